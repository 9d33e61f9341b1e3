"""The node's boot ID: read once by the host at start and handed to every driver's node (runtime.driver
`Driver.node`), whose checkpoints forget what an earlier boot prepared (a reboot undid it)."""

from __future__ import annotations

from pathlib import Path

# The kernel's ID of this boot; a node's fake one in the local cluster (`serve --boot-id-file`).
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")


class BootIdError(Exception):
    """The boot ID cannot be read; the message names the file."""


def read_boot_id(path: Path = BOOT_ID_FILE) -> str:
    try:
        boot_id = path.read_text().strip()
    except OSError as e:
        raise BootIdError(f"cannot read the boot ID from {path}: {e}") from e
    if not boot_id:
        raise BootIdError(f"boot ID file {path} is empty")
    return boot_id
