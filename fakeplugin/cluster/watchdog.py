"""A local cluster that goes down with the process that started it, however that process ends.

`Cluster.up(..., watchdog=True)` (the pytest plugin's and the tests' clusters) starts
`python -m fakeplugin.cluster.watchdog STATE_DIR` in a session of its own (a terminal's Ctrl-C does
not reach it), its stdin a pipe whose one writer is the starting process. The starter writes `DONE`
once it took the cluster down itself; end of file without it means the starter is gone (an exception
that skipped the cleanup, SIGKILL, a CI job's timeout), and the watchdog takes the cluster down:
every recorded process stopped, the runtime state (sockets, kubeconfig) removed, the logs kept.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
from pathlib import Path

DONE = b"DONE\n"

log = logging.getLogger("fakeplugin.cluster")


class Watchdog:
    """The starter's side: the watchdog process and the pipe to it."""

    def __init__(self, state_dir: Path, log_file: Path) -> None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab") as out:
            # Not spawn(): it must not carry the state dir's marker (processes.processes_of), which
            # would make the watchdog itself a user of the state dir it cleans.
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "fakeplugin.cluster.watchdog", str(state_dir)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def release(self) -> None:
        """The starter took the cluster down itself: the watchdog exits without touching it."""
        assert self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            self._proc.stdin.write(DONE)
            self._proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s watchdog: %(message)s")
    state_dir = Path(argv[1])
    said = sys.stdin.buffer.read()  # blocks until the starter writes DONE or is gone
    if said == DONE:
        return 0
    from fakeplugin.cluster.layout import StateLayout
    from fakeplugin.cluster.state import StateStore
    from fakeplugin.cluster.supervisor import Supervisor, take_down

    store = StateStore(StateLayout(state_dir))
    if not store.layout.cluster_file.exists():
        return 0  # never started, or already down
    log.info("the process that started the cluster in %s is gone: taking it down", state_dir)
    take_down(store, Supervisor(store), purge=False)
    log.info("the cluster in %s is down; logs kept in %s", state_dir, store.layout.logs)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
