"""Stale temp files at plugin start: what a plugin killed in the middle of an atomic write left behind.

A `kill -9` (OOM kill, node drain timeout, crash) between creating a temp file and renaming it over its
target leaves the temp file forever; the target itself is always complete (fakeplugin.atomicfile). At start,
under the node lock (so no writer of ours is midway), the Preparer removes such files of ours from every
directory it writes: the CDI root (only temp files of our own driver's specs: other drivers share it), the
plugin dir (checkpoint), `bin/` (the nvidia-smi script and program), `smi/` (claims' data files), the
`smi/<claimUID>/` directories of claims an earlier fakeplugin prepared and, with the mock NVML library,
`nvml/` (claims' NVML description files), `nvml/devices/` and each of `nvml/live/<device>/` (the devices'
descriptions and live states), and `lib/` (the library).
"""

from __future__ import annotations

import os
from pathlib import Path

from fakeplugin import cdi
from fakeplugin.atomicfile import remove_stale_temp_files
from fakeplugin.drivers.gpu.prepare import smi


def remove_stale_files(
    cdi_root: Path, plugin_dir: Path, *, driver_name: str, nvml: bool = False
) -> list[Path]:
    """Remove our stale temp files from the directories the plugin writes (`nvml`: the NVML descriptions'
    too); return what was removed."""
    # Every spec of ours is named <vendor>-<class>_<claimUID>.yaml (cdi.spec_path); driver names are DNS
    # subdomains (no '_'), so this prefix names no other driver's files.
    spec_prefix = f"{cdi.vendor(driver_name)}-{cdi.CLAIM_CLASS}_"
    removed = remove_stale_temp_files(cdi_root, target_prefix=spec_prefix)
    removed += remove_stale_temp_files(plugin_dir)
    removed += remove_stale_temp_files(smi.script_path(plugin_dir).parent)
    data_root = smi.data_dir(plugin_dir)
    removed += remove_stale_temp_files(data_root)
    try:
        claim_dirs = [e.path for e in os.scandir(data_root) if e.is_dir(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        claim_dirs = []
    for claim_dir in sorted(claim_dirs):
        removed += remove_stale_temp_files(Path(claim_dir))
    if nvml:
        from fakeplugin.drivers.gpu.prepare import nvmldata  # only with the library (claimfiles)

        for directory in nvmldata.written_dirs(plugin_dir):
            removed += remove_stale_temp_files(directory)
    return removed
