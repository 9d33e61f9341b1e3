"""CDI edits and specs of compute-domain.nvidia.com claims (pure, but for writing the files).

As `cmd/compute-domain-kubelet-plugin/cdi.go` and `computedomain.go`: vendor `k8s.<driver>`; one
transient spec per claim, kind `k8s.<driver>/claim`, file `<vendor>-claim_<claimUID>.yaml`, one CDI device
per prepared device named `<claimUID>-<device>` carrying its config group's edits; a device whose group has
no edits gets no CDI device, and a claim without any gets no spec (a channel on a node without a clique).
A daemon device is also handed the base spec's `k8s.<driver>/device=all` (CreateStandardDeviceSpecFile).

- channel (`GetComputeDomainChannelContainerEdits`): character devices
  `/dev/nvidia-caps-imex-channels/channel<N>`, major of `nvidia-caps-imex-channels` in /proc/devices,
  minor N, mode 0666 (`nvlib.go` getNVCapIMEXChannelDeviceInfo); channel 0, or 0..2047 for
  allocationMode All. The runtime creates them in the container; nothing on the host is needed.
- daemon (`GetCDIContainerEditsCommon`, `GetCDIContainerEditsForImex`): env `CLIQUE_ID`,
  `COMPUTE_DOMAIN_UUID`, `COMPUTE_DOMAIN_NAME`, `COMPUTE_DOMAIN_NAMESPACE`; the domain's directory
  mounted at `/imexd` (`rw,nosuid,nodev,bind`); with a clique also the `fabric-imex-mgmt` capability
  device `/dev/nvidia-caps/nvidia-cap<minor>` (major of `nvidia-caps`, minor and mode from
  /proc/driver/nvidia/capabilities/fabric-imex-mgmt).

Device numbers are the host's on real nodes; here they are fixed values seen on real hosts [U: host-
dependent]. The base spec's content is NVIDIA's management-mode CDI spec (driver libraries, device
nodes, hooks); ours holds only `NVIDIA_VISIBLE_DEVICES=void` [U: a stand-in, as no driver is installed].
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fakeplugin.cdi import VISIBLE_DEVICES_VOID, required_version, vendor, write_spec

CLAIM_CLASS = "claim"
DEVICE_CLASS = "device"  # the base spec's class (cdiDeviceClass)
BASE_SPEC_ID = "base"  # cdiBaseSpecIdentifier
ALL_DEVICE = "all"
IMEXD_PATH = "/imexd"  # where the daemon container finds its domain directory
IMEX_CHANNELS_DIR = "/dev/nvidia-caps-imex-channels"
CHANNEL_MODE = 0o666
# /proc/devices majors: 234 nvidia-caps-imex-channels (NVIDIA/nvidia-modprobe#9, and the host in
# dra-driver-nvidia-gpu PR #304, which also shows 511 nvidia-caps); dynamic on real hosts [U].
IMEX_CHANNELS_MAJOR = 234
NVIDIA_CAPS_MAJOR = 511
# fabric-imex-mgmt: PR #304's listing shows it created as nvidia-cap4323, mode 0400 [U].
FABRIC_IMEX_MGMT_MINOR = 4323
FABRIC_IMEX_MGMT_MODE = 0o400
MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")


def base_device_id(driver_name: str) -> str:
    """`k8s.<driver>/device=all`: the base spec's device, handed with every daemon device."""
    return f"{vendor(driver_name)}/{DEVICE_CLASS}={ALL_DEVICE}"


def _char_device(path: str, major: int, minor: int, mode: int) -> dict[str, Any]:
    return {"path": path, "type": "c", "major": major, "minor": minor, "fileMode": mode}


def channel_edits(channels: int) -> dict[str, Any]:
    """The device nodes of IMEX channels 0..channels-1."""
    return {
        "deviceNodes": [
            _char_device(f"{IMEX_CHANNELS_DIR}/channel{i}", IMEX_CHANNELS_MAJOR, i, CHANNEL_MODE)
            for i in range(channels)
        ]
    }


def daemon_edits(*, clique_id: str, domain: Mapping[str, Any], domain_dir: Path) -> dict[str, Any]:
    """What the IMEX daemon container of ComputeDomain `domain` (its object) gets on this node."""
    meta = domain.get("metadata") or {}
    edits: dict[str, Any] = {
        "env": [
            f"CLIQUE_ID={clique_id}",
            f"COMPUTE_DOMAIN_UUID={meta.get('uid', '')}",
            f"COMPUTE_DOMAIN_NAME={meta.get('name', '')}",
            f"COMPUTE_DOMAIN_NAMESPACE={meta.get('namespace', '')}",
        ],
        "mounts": [
            {"hostPath": str(domain_dir), "containerPath": IMEXD_PATH, "options": list(MOUNT_OPTIONS)}
        ],
    }
    if clique_id:  # only a daemon that runs nvidia-imex needs the capability
        path = f"/dev/nvidia-caps/nvidia-cap{FABRIC_IMEX_MGMT_MINOR}"
        edits["deviceNodes"] = [
            _char_device(path, NVIDIA_CAPS_MAJOR, FABRIC_IMEX_MGMT_MINOR, FABRIC_IMEX_MGMT_MODE)
        ]
    return edits


def claim_spec(
    claim_uid: str, devices: Sequence[tuple[str, Mapping[str, Any]]], *, driver_name: str
) -> dict[str, Any]:
    """The spec of one claim: `devices` are (device name, its edits), each with edits."""
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": f"{vendor(driver_name)}/{CLAIM_CLASS}",
        "devices": [
            {"name": f"{claim_uid}-{name}", "containerEdits": dict(edits)} for name, edits in devices
        ],
    }
    spec["cdiVersion"] = required_version(spec)
    return spec


def base_spec(driver_name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "cdiVersion": "",
        "kind": f"{vendor(driver_name)}/{DEVICE_CLASS}",
        "devices": [{"name": ALL_DEVICE, "containerEdits": {"env": [VISIBLE_DEVICES_VOID]}}],
    }
    spec["cdiVersion"] = required_version(spec)
    return spec


def write_base_spec(cdi_root: Path, driver_name: str) -> None:
    """The base spec (CreateStandardDeviceSpecFile): `<vendor>-device_base.yaml`."""
    cdi_root.mkdir(parents=True, exist_ok=True)
    write_spec(cdi_root / f"{vendor(driver_name)}-{DEVICE_CLASS}_{BASE_SPEC_ID}.yaml", base_spec(driver_name))
