"""dcgm-exporter by release (fakeplugin.telemetry.exporters, docs/telemetry.md *The exporter by release*):
what each release's scrape shows, on rendered text parsed by the Prometheus client's parser. Expected values
come from upstream's rules written out here (NVIDIA/dcgm-exporter's templates and transformations, NVML's
nvml.h), not from fakeplugin's tables."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from fakeplugin.drivers.gpu.publish.node import node_devices
from fakeplugin.faults.fabricfaults import parse_fabric_faults, with_fabric_faults
from fakeplugin.inventory import parse_inventory
from fakeplugin.model import GpuDevice
from fakeplugin.telemetry import counters, exposition, samples
from fakeplugin.telemetry.attribution import Use
from fakeplugin.telemetry.exporters import DEFAULT_EXPORTER_RELEASE, RELEASES, exporter_release
from fakeplugin.telemetry.load import Load
from fakeplugin.telemetry.samples import NodeState
from fakeplugin.telemetry.source import KubeletAttribution
from tests.harness.dashboard import DASHBOARD_PANELS, DASHBOARD_VARIABLES, Sample, label_values, selected

NODE = "gpu-node-1"
UID = "0d4c2a7e-5b1f-4e8a-9c3d-6f2b1a0e9d87"
# The releases and the node label each renders (rendermetrics/render_metrics.go: `Hostname` at 4.5.3-4.8.2,
# tag commit 691c927; `hostname` from #655, commit d5e5f510, in 4.6.0-4.8.3 at 7ad58324 and after).
HOSTNAME_LABEL = {"4.5.3-4.8.2": "Hostname", "4.6.0-4.8.3": "hostname", "4.6.1-4.8.4": "hostname"}
# The GPU template's label order (toMetric/metricLabels): the renderer's, then `label` counters (the default
# file's DCGM_FI_DRIVER_VERSION).
GPU_LABELS = ["gpu", "UUID", "pci_bus_id", "device", "modelName"]


def devices(gpus: list[dict[str, Any]], **node: Any) -> list[GpuDevice]:
    text = yaml.safe_dump(
        {
            "driverVersion": "580.159.04",
            "cudaDriverVersion": "13.0",
            "nodes": [{"name": NODE, "gpus": gpus, **node}],
        }
    )
    return node_devices(parse_inventory(yaml.safe_load(text)), NODE, {})


def render(
    state: NodeState, release: str, *, pod_uid: bool = False, chosen: list[counters.Counter] | None = None
) -> str:
    exporter = exporter_release(release)
    series = samples.node_series(state, chosen or counters.default(), release=exporter, pod_uid=pod_uid)
    return b"".join(exposition.blocks(series, by_name=exporter.expfmt)).decode()


def rows(text: str, metric: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of the metric's samples, by GPU and GPU instance (from 4.6.0-4.8.3 the exporter
    orders them by their label set: test_the_order_and_numbers_of_4_6_0)."""
    [family] = [f for f in text_string_to_metric_families(text) if f.name == metric]
    found = [(dict(s.labels), s.value) for s in family.samples]
    return sorted(found, key=lambda row: (int(row[0]["gpu"]), int(row[0].get("GPU_I_ID", -1))))


def use(device: GpuDevice, *, pod: str = "trainer-0", uid: str = UID) -> Use:
    return Use(pod, "team-a", "main", f"{pod}-gpus", "team-a", "gpu.nvidia.com", NODE, device.name, uid)


def test_the_releases_and_the_default() -> None:
    assert list(RELEASES) == list(HOSTNAME_LABEL)
    assert DEFAULT_EXPORTER_RELEASE == "4.6.0-4.8.3"  # what GPU Operator v26.7.0 deploys
    assert exporter_release(None) is exporter_release("") is RELEASES["4.6.0-4.8.3"]


def test_an_unknown_release_names_the_flag_and_the_known_ones() -> None:
    with pytest.raises(ValueError) as raised:
        exporter_release("4.8.4")
    assert str(raised.value) == (
        '--telemetry-exporter-release: unknown dcgm-exporter release "4.8.4"; '
        "known: 4.5.3-4.8.2, 4.6.0-4.8.3, 4.6.1-4.8.4"
    )


@pytest.mark.parametrize("release", list(HOSTNAME_LABEL))
def test_each_release_names_the_node_label_as_its_template(release: str) -> None:
    text = render(NodeState(NODE, devices([{"profile": "h200", "count": 2}])), release)
    label = HOSTNAME_LABEL[release]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert list(sample.labels)[:6] == [*GPU_LABELS, label], family.name
            assert sample.labels[label] == NODE
            assert {"Hostname", "hostname"} - {label} & set(sample.labels) == set()
    temps = rows(text, "DCGM_FI_DEV_GPU_TEMP")
    assert [list(labels) for labels, _ in temps] == [[*GPU_LABELS, label, "DCGM_FI_DRIVER_VERSION"]] * 2


@pytest.mark.parametrize("release", list(HOSTNAME_LABEL))
@pytest.mark.parametrize("switch", [False, True])
def test_pod_uid_only_on_4_8_4_with_the_switch(release: str, switch: bool) -> None:
    """kubernetes.go's DRA path sets `pod_uid` (const.go uidAttribute) only after #738 (4.8.4, fixing #718),
    and only with --kubernetes-enable-pod-uid; attributes are sorted, so it follows `pod`."""
    found = devices([{"profile": "h200", "count": 2}])
    text = render(NodeState(NODE, found, uses=[use(found[0])]), release, pod_uid=switch)
    utils = rows(text, "DCGM_FI_DEV_GPU_UTIL")
    assert [labels.get("pod") for labels, _ in utils] == ["trainer-0", None]
    with_uid = [labels for labels, _ in utils if "pod_uid" in labels]
    if release == "4.6.1-4.8.4" and switch:
        assert [(labels["gpu"], labels["pod_uid"]) for labels in with_uid] == [("0", UID)]
        assert list(with_uid[0])[-2:] == ["pod", "pod_uid"]
    else:
        assert with_uid == []
    assert ("pod_uid" in text) is (release == "4.6.1-4.8.4" and switch)


class _Listed:
    """The kubelet's PodResources List, answered (podresources.PodResources.uses)."""

    def __init__(self, found: list[Use]) -> None:
        self.found = found

    def uses(self) -> list[Use]:
        return self.found


def test_serve_takes_the_pod_uid_from_the_pod() -> None:
    """The List has no UID: the exporter reads it from the pod (PodMapper's metadata), as serve does."""
    found = devices([{"profile": "h200"}])
    listed = [use(found[0], uid="")]
    pods = {"/api/v1/namespaces/team-a/pods/trainer-0": {"metadata": {"name": "trainer-0", "uid": UID}}}

    def get(path: str) -> dict[str, Any]:
        if path not in pods:
            raise LookupError(path)
        return pods[path]

    got, _ = KubeletAttribution(_Listed(listed), get).read(NODE)  # type: ignore[arg-type]
    assert [u.pod_uid for u in got] == [UID]


def test_mig_uses_attribute_their_gpu_instance_from_4_6_0() -> None:
    """4.5.3-4.8.2 keys a DRA MIG device by its parent's UUID, which has no series in flex mode (#714);
    from 4.6.0-4.8.3 `draMappingKey` keys it `<gpu>-<GPU_I_ID>` (GetGPUInstanceIdentifier), its instance's
    series ID, which then carries the pod and the dra_mig_* labels."""
    found = devices([{"profile": "h200", "mig": [{"profile": "3g.71gb"}, {"profile": "4g.71gb"}]}])
    mig = next(d for d in found if d.mig is not None and d.mig.profile == "3g.71gb")
    state = NodeState(NODE, found, uses=[use(mig)])
    old = rows(render(state, "4.5.3-4.8.2"), "DCGM_FI_DEV_GPU_TEMP")
    assert [labels.get("pod") for labels, _ in old] == [None, None]
    new = rows(render(state, "4.6.0-4.8.3"), "DCGM_FI_DEV_GPU_TEMP")
    attributed = [labels for labels, _ in new if "pod" in labels]
    assert [labels["GPU_I_PROFILE"] for labels in attributed] == ["3g.71gb"]
    assert (attributed[0]["dra_mig_profile"], attributed[0]["dra_mig_device_uuid"]) == ("3g.71gb", mig.uuid)
    assert (attributed[0]["dra_device_name"], attributed[0]["UUID"]) == (mig.name, mig.parent_uuid)


# nvml.h (NVIDIA/go-nvml 2f9e261 gen/nvml/nvml.h): NVML_GPU_FABRIC_HEALTH_SUMMARY_* and the mask's rows.
SUMMARY_NOT_SUPPORTED, SUMMARY_HEALTHY = 0, 1
FALSE = 2  # NVML_GPU_FABRIC_HEALTH_MASK_<row>_FALSE
SHIFT = {"DEGRADED_BW": 0, "ROUTE_RECOVERY": 2, "ROUTE_UNHEALTHY": 4, "ACCESS_TIMEOUT_RECOVERY": 6}
FABRIC_CSV = (
    "DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
    "DCGM_FI_DEV_FABRIC_HEALTH_MASK, gauge, GPU fabric health mask.\n"
    "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY, gauge, GPU fabric health summary.\n"
)


def fabric_values(text: str) -> list[tuple[float, float]]:
    """(mask, summary) of each GPU, by index."""
    masks = rows(text, "DCGM_FI_DEV_FABRIC_HEALTH_MASK")
    summaries = rows(text, "DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY")
    return [(m, s) for (_, m), (_, s) in zip(masks, summaries, strict=True)]


def test_fabric_health_on_4_8_4_healthy_then_after_a_fabric_fault() -> None:
    """A GB200 in its NVL72 fabric reports (the qx-gb200.xml capture) Health Summary Healthy, Bandwidth Full
    (not degraded), Route Recovery in progress False, Route Unhealthy False, Access Timeout Recovery False,
    the other rows N/A (NOT_SUPPORTED 0). Before its registration completes every row is N/A."""
    chosen = counters.parse(FABRIC_CSV, "fabric.csv")
    fabric = {"clique": 2, "clusterUUID": "4b1e8f2a-57c3-4c1d-9a5e-2f0d6b7c8e91"}
    found = devices([{"profile": "gb200", "count": 2}], fabric=fabric)
    healthy_mask = sum(FALSE << shift for shift in SHIFT.values())
    assert healthy_mask == 170
    text = render(NodeState(NODE, found), "4.6.1-4.8.4", chosen=chosen)
    assert fabric_values(text) == [(healthy_mask, SUMMARY_HEALTHY)] * 2
    faulted = with_fabric_faults(found, parse_fabric_faults("gpu-1=InProgress"))
    text = render(NodeState(NODE, faulted), "4.6.1-4.8.4", chosen=chosen)
    assert fabric_values(text) == [(healthy_mask, SUMMARY_HEALTHY), (0, SUMMARY_NOT_SUPPORTED)]
    failed = with_fabric_faults(found, parse_fabric_faults("Completed:ERROR_TIMEOUT"))
    assert fabric_values(render(NodeState(NODE, failed), "4.6.1-4.8.4", chosen=chosen)) == [(0, 0)] * 2
    # Before 4.8.4 the fields make no series; a GPU whose fabric info NVML does not support has none either.
    for release in ("4.5.3-4.8.2", "4.6.0-4.8.3"):
        names = {
            f.name
            for f in text_string_to_metric_families(render(NodeState(NODE, found), release, chosen=chosen))
        }
        assert names == {"DCGM_FI_DEV_GPU_TEMP"}
    a100 = render(NodeState(NODE, devices([{"profile": "a100-40gb"}])), "4.6.1-4.8.4", chosen=chosen)
    assert {f.name for f in text_string_to_metric_families(a100)} == {"DCGM_FI_DEV_GPU_TEMP"}
    assert samples.is_simulated(chosen[1], exporter_release("4.6.1-4.8.4"))
    assert not samples.is_simulated(chosen[1], exporter_release("4.6.0-4.8.3"))


def signature(labels: dict[str, str]) -> str:
    """render_metrics.go `labelSignature` (7ad58324): pairs sorted by name, `<len>:<name>=<len>:<value>;`."""
    return "".join(f"{len(k)}:{k}={len(v.encode())}:{v};" for k, v in sorted(labels.items()))


def test_the_order_and_numbers_of_4_6_0() -> None:
    """From 4.6.0-4.8.3 `Render` writes through expfmt: families sorted by name, a family's samples by their
    label signature, values as Go's strconv.FormatFloat(v, 'g', -1, 64) (the expected texts below printed by
    Go 1.26.8); 4.5.3-4.8.2's template keeps field-ID order, GPU order and `%f` doubles."""
    found = devices([{"profile": "h200", "count": 4}])
    state = NodeState(
        NODE,
        found,
        uses=[use(found[2]), use(found[2], pod="trainer-1")],
        loads={found[1].name: Load(90, 90)},
        energy_mj={found[0].uuid: 1234567},
    )
    new, old = render(state, "4.6.0-4.8.3"), render(state, "4.5.3-4.8.2")
    names = [f.name for f in text_string_to_metric_families(new)]
    assert names == sorted(names) and names != [f.name for f in text_string_to_metric_families(old)]
    for family in text_string_to_metric_families(new):
        signatures = [signature(dict(s.labels)) for s in family.samples]
        assert signatures == sorted(signatures), family.name
        assert len(family.samples) == 5  # four GPUs, the third one's series once per container
    old_gpus = [s.labels["gpu"] for s in next(text_string_to_metric_families(old)).samples]
    assert old_gpus == ["0", "1", "2", "2", "3"]

    def line(text: str, metric: str, gpu: str) -> str:
        [found] = [x for x in text.splitlines() if x.startswith(f'{metric}{{gpu="{gpu}"')]
        return found.rsplit(" ", 1)[1]

    for metric, gpu, before, after in (
        ("DCGM_FI_DEV_POWER_USAGE", "0", "84.000000", "84"),  # H200 idle: 12 % of 700 W
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0", "1234567", "1.234567e+06"),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", "1", "3600000000", "3.6e+09"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "1", "0.900000", "0.9"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "0", "0.000000", "0"),
        ("DCGM_FI_DEV_GPU_TEMP", "0", "33", "33"),
    ):
        assert (line(old, metric, gpu), line(new, metric, gpu)) == (before, after), metric


@pytest.mark.parametrize("release", list(HOSTNAME_LABEL))
def test_nvidias_dashboard_selects_every_gpu_of_every_endpoint(release: str) -> None:
    """NVIDIA's Grafana dashboard (tests/harness/dashboard.py) against two endpoints as Prometheus scrapes
    them (`instance` the target's, added at scrape): a kubelet node's plugin with two H200s, a fleet with a
    node of one; its variables find both endpoints and both GPU indexes, every per-GPU panel's selector each
    of the three GPUs, the aggregating ones something. tests/e2e/test_prometheus.py asks a real Prometheus."""
    targets = {
        "127.0.0.1:9400": NodeState(NODE, devices([{"profile": "h200", "count": 2}])),
        "127.0.0.1:9401": NodeState("sim-gpu", devices([{"profile": "h200"}])),
    }
    scraped: list[Sample] = [
        (family.name, {**sample.labels, "instance": instance})
        for instance, state in targets.items()
        for family in text_string_to_metric_families(render(state, release))
        for sample in family.samples
    ]
    variables = {name: label_values(scraped, query) for name, query in DASHBOARD_VARIABLES.items()}
    assert variables == {"instance": sorted(targets), "gpu": ["0", "1"]}
    for expr in DASHBOARD_PANELS:
        found = selected(scraped, expr, variables)
        gpus = sorted((labels["instance"], labels["gpu"]) for _, labels in found)
        assert gpus == [("127.0.0.1:9400", "0"), ("127.0.0.1:9400", "1"), ("127.0.0.1:9401", "0")], expr
    # A legend or a per-node variable reads the node from the release's label: on every series.
    assert all(HOSTNAME_LABEL[release] in labels for _, labels in scraped)
