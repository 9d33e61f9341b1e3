"""The NVIDIA dcgm-exporter releases the telemetry endpoint emulates, as data: the one place that says how
they differ in what a scrape shows (docs/telemetry.md, *The exporter by release*).

Picked by `--telemetry-exporter-release` of `serve` and `fleet` (the chart's `telemetry.exporterRelease`);
the default is 4.6.0-4.8.3, the release NVIDIA's GPU Operator v26.7.0 deploys. Paths are in
NVIDIA/dcgm-exporter at the commit each release names.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

# transformation/const.go `uidAttribute` (the same name on the device-plugin path since 4.4.0-4.5.0, #531).
POD_UID_LABEL = "pod_uid"
# go-dcgm pkg/dcgm/const_fields.go (dcgm-fields.txt): DCGM_FI_DEV_FABRIC_HEALTH_MASK, _SUMMARY.
FABRIC_HEALTH_FIELD_IDS = frozenset({174, 175})


@dataclass(frozen=True)
class ExporterRelease:
    """One dcgm-exporter release: its tag (`name`), the commit read, and what its scrape shows."""

    name: str
    commit: str  # where the fields below were read; "" where the tag's source is not available here [U]
    hostname_label: str  # the GPU series' node-name label (rendermetrics/render_metrics.go)
    # A DRA MIG device's use attributes its GPU instance's series (`<gpu>-<GPU_I_ID>`, looked up by the MIG
    # UUID through NVML: kubernetes.go `draMappingKey`), not the parent's UUID, which has no series in flex
    # mode; a MIG device without a UUID (a DynamicMIG partition before creation) attributes nothing.
    mig_instance_attribution: bool
    dra_pod_uid: bool  # --kubernetes-enable-pod-uid adds pod_uid to DRA-attributed series too
    fabric_health: bool  # DCGM_FI_DEV_FABRIC_HEALTH_MASK/_SUMMARY have series when a counters file names them
    # The exposition written by prometheus/common's expfmt (telemetry.expfmt): families by name, samples by
    # their label set, Go's shortest floats; else 4.5.3-4.8.2's template (telemetry.exposition).
    expfmt: bool


RELEASES = MappingProxyType(
    {
        # Tag 4.5.3-4.8.2, commit 691c927 (2026-05-06): the template's `Hostname`; DRA keys by parent UUID.
        "4.5.3-4.8.2": ExporterRelease(
            "4.5.3-4.8.2",
            "691c92762eb551313c825f6efe4ceeee20982801",
            hostname_label="Hostname",
            mig_instance_attribution=False,
            dra_pod_uid=False,
            fabric_health=False,
            expfmt=False,
        ),
        # Tag 4.6.0-4.8.3 (PR #711, 2026-07-14), read at 7ad58324, the commit its release notes link:
        # `hostname` (renamed by #655, commit d5e5f510); DRA v1 with MIG devices mapped to their GPU
        # instance (#654, #664: transformation/dra.go `buildDeviceMapping`, kubernetes.go `draMappingKey`).
        # The DRA path sets no pod_uid (kubernetes.go `Process`; dcgm-exporter #718). The renderer is
        # rendermetrics/render_metrics.go `Render` over expfmt.
        "4.6.0-4.8.3": ExporterRelease(
            "4.6.0-4.8.3",
            "7ad58324b4447b64dc3dedf946b889b648b7f476",
            hostname_label="hostname",
            mig_instance_attribution=True,
            dra_pod_uid=False,
            fabric_health=False,
            expfmt=True,
        ),
        # Exporter 4.8.4 with DCGM 4.6.1 (PR #745, merged 2026-09-18). [U] The tag string follows the
        # project's `<DCGM>-<exporter>` tags and the images published as 4.6.1-4.8.4(-distroless); the tag
        # and its source are not in the snapshots read here. From #745's notes and #738 (fixes #718):
        # `pod_uid` on DRA-attributed series with --kubernetes-enable-pod-uid; opt-in fabric health fields.
        # [U] The renderer and the DRA MIG mapping taken to be 4.6.0-4.8.3's (#745 lists no change to them).
        "4.6.1-4.8.4": ExporterRelease(
            "4.6.1-4.8.4",
            "",
            hostname_label="hostname",
            mig_instance_attribution=True,
            dra_pod_uid=True,
            fabric_health=True,
            expfmt=True,
        ),
    }
)
DEFAULT_EXPORTER_RELEASE = "4.6.0-4.8.3"  # what GPU Operator v26.7.0 deploys
FLAG = "--telemetry-exporter-release"


def known_exporters() -> str:
    """The selectable releases, for messages."""
    return ", ".join(RELEASES)


def exporter_release(name: str | None) -> ExporterRelease:
    """The release called `name` (None or "": the default). ValueError names the flag and the known ones."""
    release = RELEASES.get(name or DEFAULT_EXPORTER_RELEASE)
    if release is None:
        raise ValueError(f'{FLAG}: unknown dcgm-exporter release "{name}"; known: {known_exporters()}')
    return release
