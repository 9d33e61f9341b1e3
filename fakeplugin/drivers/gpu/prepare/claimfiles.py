"""What a prepared claim leaves on the host: its CDI spec, its GPUs' nvidia-smi data files and, with the
mock NVML library, their NVML description files (prepare.nvmldata). VFIO devices have neither data file:
bound to vfio-pci, a GPU is no longer the NVIDIA driver's.

Written in that order's reverse (the spec mounts the data files, so they exist before it does) and removed
in that order (the spec first). Errors are ClaimErrors naming the file, worded as the real driver words them.
Without the library no NVML module is loaded and nothing of NVML is written or removed: a plugin's files are
those of a plugin before NVML existed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path

from fakeplugin import cdi
from fakeplugin.drivers.gpu.prepare import cdispec, smi
from fakeplugin.mig import created_for_claim
from fakeplugin.model import VFIO_NAME_PREFIX, ClaimRef, DeviceSettings, GpuDevice, PreparedDevice
from fakeplugin.runtime.allocation import ClaimError

log = logging.getLogger(__name__)


def prepare_error(ref: ClaimRef, message: str) -> str:
    return f"error preparing devices for claim {ref}: {message}"


def unprepare_error(ref: ClaimRef, message: str) -> str:
    return f"error unpreparing devices for claim {ref}: {message}"


class ClaimFiles:
    """The files of claims prepared by `driver_name` in `cdi_root` and `plugin_dir` (the layout under the
    plugin dir: drivers.gpu.prepare.smi and .nvmldata); `device_nodes` adds fake /dev/nvidia* nodes to the
    specs; `nvml_library` (the built mock NVML library, fakeplugin.nvml.build) mounts it and each device's
    NVML description into the claim's containers."""

    def __init__(
        self,
        *,
        driver_name: str,
        cdi_root: Path,
        plugin_dir: Path,
        device_nodes: bool,
        nvml_library: Path | None = None,
    ) -> None:
        self._driver_name = driver_name
        self._specs = cdi.SpecFiles(cdi_root, driver_name)
        self._plugin_dir = plugin_dir
        self._device_nodes = device_nodes
        self._nvml_library = nvml_library

    def spec_path(self, uid: str) -> Path:
        return self._specs.claim_path(uid)

    def present(self, ref: ClaimRef, devices: Sequence[PreparedDevice]) -> bool:
        names = [d.device_name for d in devices if not d.device_name.startswith(VFIO_NAME_PREFIX)]
        if not (
            self.spec_path(ref.uid).exists() and smi.claim_data_present(self._plugin_dir, ref.uid, names)
        ):
            return False
        if self._nvml_library is None:
            return True
        from fakeplugin.drivers.gpu.prepare import nvmldata  # only with the library, as cdispec does

        return nvmldata.claim_data_present(self._plugin_dir, ref.uid, names)

    def write(
        self,
        ref: ClaimRef,
        prepared: Sequence[PreparedDevice],
        pool: Mapping[str, GpuDevice],
        settings: Mapping[str, DeviceSettings],
    ) -> None:
        """Write the claim's nvidia-smi data and NVML descriptions, then its CDI spec (DynamicMIG partitions
        are created here)."""
        missing = [d.device_name for d in prepared if d.device_name not in pool]
        if missing:
            message = f"device {missing[0]} is no longer in pool {next(iter(prepared)).pool_name}"
            raise ClaimError(prepare_error(ref, f"prepare devices failed: {message}"))
        devices = [created_for_claim(pool[d.device_name], ref.uid) for d in prepared]
        gpus = [d for d in devices if d.vfio is None]
        data_dir = smi.data_dir(self._plugin_dir)
        try:
            smi.write_claim_data(self._plugin_dir, ref.uid, gpus, settings)  # compute mode per settings
        except (OSError, ValueError) as e:
            message = f"prepare devices failed: write nvidia-smi data {data_dir}: {e}"
            raise ClaimError(prepare_error(ref, message)) from e
        if self._nvml_library is not None:
            self._write_nvml(ref, gpus)
        path = self.spec_path(ref.uid)
        try:
            text = cdispec.claim_spec_text(
                ref.uid,
                devices,
                driver_name=self._driver_name,
                device_nodes=self._device_nodes,
                plugin_dir=self._plugin_dir,
                settings=settings,
                nvml_library=self._nvml_library,
            )
            self._specs.write_claim_text(ref.uid, text)
        except (OSError, ValueError) as e:
            raise ClaimError(prepare_error(ref, f"prepare devices failed: write CDI spec {path}: {e}")) from e

    def _write_nvml(self, ref: ClaimRef, gpus: Sequence[GpuDevice]) -> None:
        from fakeplugin.drivers.gpu.prepare import nvmldata  # as in present

        try:
            nvmldata.write_claim_data(self._plugin_dir, ref.uid, gpus)
        except (OSError, ValueError) as e:
            message = (
                f"prepare devices failed: write NVML description {nvmldata.data_dir(self._plugin_dir)}: {e}"
            )
            raise ClaimError(prepare_error(ref, message)) from e

    def remove_orphan_descriptions(self, claims: Collection[str]) -> None:
        """Remove the NVML descriptions of claims not in `claims` (the checkpoint's UIDs); a file that cannot
        be removed is logged and kept. At start, under the node lock (with the library only)."""
        from fakeplugin.drivers.gpu.prepare import nvmldata  # as in present

        for path in nvmldata.orphans(self._plugin_dir, claims):
            try:
                path.unlink(missing_ok=True)
            except OSError as e:
                log.warning("NVML description %s of no prepared claim kept, cannot remove it: %s", path, e)
            else:
                log.info("removed NVML description %s of no prepared claim", path)

    def upgrade_specs(self, uids: Iterable[str]) -> None:
        """Bring the CDI specs of these prepared claims to the current shape where an earlier version wrote
        them (cdispec.upgrade_spec: each container then sees only its own requests' GPUs in env, and gets the
        nvidia-smi script's awk program). Only containers created afterwards see the change; a spec that
        cannot be upgraded is logged and kept."""
        for uid in uids:
            path = self.spec_path(uid)
            try:
                if cdispec.upgrade_spec_file(path, uid):
                    log.info("claim %s: CDI spec %s rewritten in the current shape", uid, path)
            except (OSError, ValueError) as e:
                log.warning("claim %s: CDI spec %s kept as it is, cannot upgrade it: %s", uid, path, e)

    def remove(
        self,
        ref: ClaimRef,
        devices: Sequence[PreparedDevice],
        wrap: Callable[[ClaimRef, str], str] = unprepare_error,
    ) -> None:
        """Remove the claim's CDI spec, then the nvidia-smi data and NVML descriptions of its `devices` (its
        checkpoint entry's); nothing there is fine. `wrap` words errors (an unprepare's, or a prepare's when
        it rolls back an attempt that died midway)."""
        path = self.spec_path(ref.uid)
        try:
            self._specs.remove_claim(ref.uid)
        except OSError as e:
            raise ClaimError(wrap(ref, f"remove CDI spec {path}: {e}")) from e
        data_dir = smi.data_dir(self._plugin_dir)
        try:
            smi.remove_claim_data(self._plugin_dir, ref.uid, [d.device_name for d in devices])
        except OSError as e:
            raise ClaimError(wrap(ref, f"remove nvidia-smi data {data_dir}: {e}")) from e
        if self._nvml_library is not None:
            from fakeplugin.drivers.gpu.prepare import nvmldata  # as in present

            nvml_dir = nvmldata.data_dir(self._plugin_dir)
            try:
                nvmldata.remove_claim_data(self._plugin_dir, ref.uid, [d.device_name for d in devices])
            except OSError as e:
                raise ClaimError(wrap(ref, f"remove NVML description {nvml_dir}: {e}")) from e
