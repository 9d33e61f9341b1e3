"""The shells and awks the fake nvidia-smi (prepare/nvidia-smi.sh + nvidia-smi.awk) is tested under.

Images carry different ones (Debian and Ubuntu: dash and mawk; Alpine and busybox images: busybox's sh, awk
and coreutils; gawk where a distribution chose it), so the tests of tests/test_nvidia_smi*.py run under
each pair (`smi_shell` fixture, tests/conftest.py). Each pair gets a directory that holds `sh` and the
commands the script runs (`SCRIPT_COMMANDS`), and nothing else: the script's PATH is that directory, so a
command it starts to use without being listed here fails every pair.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fakeplugin.drivers.gpu.prepare import smi
from tests.harness.tooling import unavailable

# What nvidia-smi.sh runs besides shell builtins.
SCRIPT_COMMANDS = ("awk", "cat", "date", "sed")
# Pair name → command → the program that stands for it (its argv prefix); a command not listed is the
# host's one of that name. A program given alone is linked under the command's name (busybox picks its
# applet by that name); one with arguments gets a wrapper script.
SHELLS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "dash+mawk": {"sh": ("dash",), "awk": ("mawk",)},
    "busybox": {command: ("busybox",) for command in ("sh", *SCRIPT_COMMANDS)},
    "sh+gawk-posix": {"sh": ("sh",), "awk": ("gawk", "--posix")},
}
PACKAGES = "apt-get install dash mawk busybox gawk; hack/setup.sh does when root"


@dataclass(frozen=True)
class SmiShell:
    """One pair: `bin` holds its `sh` and the script's commands, and is the script's whole PATH."""

    name: str
    bin: Path

    def command(self, root: Path, *args: str) -> list[str]:
        """The argv that runs the container's nvidia-smi under `root` (a container view) with `args`."""
        return [str(self.bin / "sh"), str(root / smi.SCRIPT_CONTAINER_PATH.lstrip("/")), *args]

    def env(self, root: Path) -> dict[str, str]:
        return {"PATH": str(self.bin), "LC_ALL": "C", smi.TEST_ROOT_ENV: str(root)}


def make_shell(name: str, directory: Path) -> SmiShell:
    """The pair `name` of `SHELLS` in `directory` (created); unavailable (skip, or fail when CI=true) when
    one of its programs is not installed."""
    programs = SHELLS[name]
    directory.mkdir(parents=True)
    for command in ("sh", *SCRIPT_COMMANDS):
        program, *args = programs.get(command, (command,))
        found = shutil.which(program)
        if found is None:
            unavailable(f"the fake nvidia-smi under {name}: {program} is not installed ({PACKAGES})")
        target = directory / command
        if args:
            # The pair's own sh runs the wrapper: `sh` is linked first.
            target.write_text(f'#!{directory / "sh"}\nexec {found} {" ".join(args)} "$@"\n')
            target.chmod(0o755)
        else:
            target.symlink_to(found)
    return SmiShell(name, directory)
