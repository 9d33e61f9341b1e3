"""A claim's devices prepared, one config group at a time (`device_state.go` prepareDevices,
applyComputeDomainChannelConfigDriverManaged, applyComputeDomainDaemonConfig, assertImexChannelNotAllocated).

Channel group: channel 0 not held by another completed claim (all channels count as a request for channel
0), the claim's namespace is the domain's (permanent), node label, this node Ready, then the channel edits
(none without a clique). Daemon group: the domain's directory `<plugin_dir>/domains/<cdUID>/` with the IMEX
config template, then the daemon edits. Each device's checkpoint form is built here, so the checkpoint
holds exactly what the kubelet was told.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fakeplugin.apis.computedomain import CHANNEL_CONFIG_KIND
from fakeplugin.atomicfile import write_atomic
from fakeplugin.cdi import cdi_device_id
from fakeplugin.drivers.computedomain import cdispec
from fakeplugin.drivers.computedomain.checkpoint import ClaimState, ComputeDomainCheckpoint
from fakeplugin.drivers.computedomain.domains import DomainError, DomainManager
from fakeplugin.drivers.computedomain.opaqueconfig import ConfigGroup, check
from fakeplugin.drivers.computedomain.slices import CHANNEL, DAEMON, MAX_CHANNELS
from fakeplugin.model import ClaimRef

DOMAINS_DIR = "domains"  # ComputeDomainDaemonConfigFilesDirName
CONFIG_TEMPLATE = "imexd.cfg.tmpl"
# A stand-in for the image's /templates/compute-domain-daemon-config.tmpl.cfg: the daemon renders it into
# /imexd/imexd.cfg; no nvidia-imex reads it here [U: upstream's template sets ~50 IMEX options].
TEMPLATE_TEXT = (
    "# nvidia-imex configuration template written by fakeplugin (no IMEX daemon runs on a fake node)\n"
    "IMEX_NODE_CONFIG_FILE={{ .IMEXDaemonNodesConfigPath }}\n"
    "IMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}\n"
)


@dataclass(frozen=True)
class Prepared:
    """What a claim's prepare produced: checkpoint groups, the kubelet's devices, the spec's devices."""

    groups: tuple[dict[str, Any], ...]
    spec_devices: tuple[tuple[str, Mapping[str, Any]], ...]  # (device name, edits)


def domain_dir(plugin_dir: Path, domain_id: str) -> Path:
    return plugin_dir / DOMAINS_DIR / domain_id


def prepare_groups(
    ref: ClaimRef,
    groups: Sequence[ConfigGroup],
    checkpoint: ComputeDomainCheckpoint,
    *,
    domains: DomainManager,
    plugin_dir: Path,
    driver_name: str,
) -> Prepared:
    """Raises ComputeDomainConfigError (validation) or DomainError with upstream's text below `prepare devices
    failed: `."""
    out_groups: list[dict[str, Any]] = []
    spec_devices: list[tuple[str, Mapping[str, Any]]] = []
    for group in groups:
        check(group.config)
        try:
            edits = (
                _channel(ref, group, checkpoint, domains)
                if group.config.kind == CHANNEL_CONFIG_KIND
                else _daemon(ref, group, domains, plugin_dir)
            )
        except DomainError as e:
            raise DomainError(f"error applying config: {e}", permanent=e.permanent) from e
        device_type = CHANNEL if group.config.kind == CHANNEL_CONFIG_KIND else DAEMON
        devices = []
        for result in group.results:
            name = str(result["device"])
            ids = [cdispec.base_device_id(driver_name)] if device_type == DAEMON else []
            if edits is not None:
                ids.append(cdi_device_id(ref.uid, name, driver_name=driver_name))
                spec_devices.append((name, edits))
            device = {"Requests": [result["request"]], "PoolName": result.get("pool", ""), "DeviceName": name}
            typed = {"info": {"id": 0}, "device": {**device, "CDIDeviceIDs": ids}}  # CheckpointedDevice
            devices.append({t: typed if t == device_type else None for t in (CHANNEL, DAEMON)})
        out_groups.append(
            {
                "devices": devices,
                "configState": {"Type": device_type, "ComputeDomain": group.config.domain_id},
            }
        )
    return Prepared(tuple(out_groups), tuple(spec_devices))


def _channel(
    ref: ClaimRef, group: ConfigGroup, checkpoint: ComputeDomainCheckpoint, domains: DomainManager
) -> dict[str, Any] | None:
    if len(group.results) != 1:  # a violated invariant upstream, not an expected error
        raise DomainError(f"applyComputeDomainChannelConfig: unexpected results {list(group.results)}")
    holder = channel_holder(checkpoint, 0)
    if holder:
        raise DomainError(
            f"allocation failed: channel 0 already allocated by claim {holder} (according to checkpoint)"
        )
    uid = group.config.domain_id
    domains.assert_namespace(ref.namespace, uid)
    domains.add_node_label(uid)
    domains.assert_ready(uid)
    if not domains.clique_id():
        return None  # no fabric: no channel device nodes, the claim still succeeds
    return cdispec.channel_edits(MAX_CHANNELS if group.config.channels_all else 1)


def channel_holder(checkpoint: ComputeDomainCheckpoint, channel_id: int) -> str:
    """The completed claim holding channel `channel_id`, or ""."""
    for uid, entry in checkpoint.claims.items():
        if entry.state is not ClaimState.PREPARE_COMPLETED:
            continue
        for group in entry.devices:
            for device in group.get("devices") or []:
                if (device.get(CHANNEL) or {}).get("info", {}).get("id") == channel_id:
                    return uid
    return ""


def _daemon(ref: ClaimRef, group: ConfigGroup, domains: DomainManager, plugin_dir: Path) -> dict[str, Any]:
    requests = [str(r.get("request")) for r in group.results]
    if len(group.results) != 1:
        raise DomainError(
            f"only expected 1 device for requests '[{' '.join(requests)}]' in claim '{ref.uid}'"
        )
    uid = group.config.domain_id
    directory = domain_dir(plugin_dir, uid)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        write_atomic(directory / CONFIG_TEMPLATE, TEMPLATE_TEXT.encode(), mode=0o644, sync=False)
    except OSError as e:
        raise DomainError(
            f"error preparing ComputeDomain daemon settings for requests '[{' '.join(requests)}]' in claim "
            f"'{ref.uid}': {e}"
        ) from e
    where = f"error getting common container edits for ComputeDomain daemon '{uid}'"
    try:
        domain = domains.domain(uid, f"{where}: error getting compute domain {uid}")
    except DomainError as e:
        if str(e).startswith(where):
            raise
        raise DomainError(f"{where}: compute domain not found: {uid}") from e
    return cdispec.daemon_edits(clique_id=domains.clique_id(), domain=domain, domain_dir=directory)
