"""The test tiers (docs/testing.md, "Test tiers"), loaded by pyproject's `addopts = -p tests.harness.tiers`.

A test's tier is its marker; a test without one is in the fast tier:
  (none)    fast: no cluster, no Go build, no Docker; plain `pytest` runs exactly these
  build     builds something, or needs what hack/build-k8s.sh built (helm, Kueue); no cluster
  cluster   a real local cluster (tests/e2e)
  kind      a kind cluster from images built by hack/kind (tests/kind)

Plain `pytest` (no `-m`) selects the fast tier, unless its arguments name a file or folder below tests/
that holds other tiers' tests (`pytest tests/e2e/test_dra.py` runs that module). `-m` decides alone.

The guard: while a fast-tier test runs (its fixtures' setup and teardown included), an audit hook
(PEP 578) refuses to start a Kubernetes component, Go, Docker or kind, to touch the build cache
($FAKEPLUGIN_CACHE, default ~/.cache/fakeplugin) or to connect to a Docker socket; the test fails
naming what it did and the marker to give it. Children of a fast test inherit FAKEPLUGIN_CACHE and
DOCKER_HOST pointing nowhere and FAKEPLUGIN_OFFLINE=1 (NOWHERE), so a subprocess that needs them fails too
and none downloads a release binary.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

TIERS = ("build", "cluster", "kind")
FAST = " and ".join(f"not {tier}" for tier in TIERS)
# What a fast test must not start: what a cluster, a Go build or Docker runs.
FORBIDDEN_PROGRAMS = frozenset(
    {
        "containerd",
        "debootstrap",
        "docker",
        "dockerd",
        "etcd",
        "fakecri",
        "go",
        "helm",
        "kind",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
        "kubelet",
        "kwok",
        "unshare",
        "build-k8s.sh",
        "dockerd.sh",
        "images.sh",
    }
)
# A fast test's children find no cache and no Docker (paths below a file, which nobody can create), and
# download nothing (fakeplugin/cluster/downloads.py: no request at all).
NOWHERE = {
    "FAKEPLUGIN_CACHE": "/dev/null/fast-tier-has-no-cache",
    "DOCKER_HOST": "unix:///dev/null/no-docker",
    "FAKEPLUGIN_OFFLINE": "1",
}
SHELLS = frozenset({"sh", "bash", "dash"})


@dataclass
class _Guard:
    tests: Path = Path()  # <rootdir>/tests: the tests the tiers are of
    caches: tuple[str, ...] = ()  # the build cache as configured, and NOWHERE's
    test: str = ""  # the fast test running now; "" when none is
    violations: list[str] = field(default_factory=list)

    def refuse(self, what: str) -> None:
        self.violations.append(what)
        raise TierViolation(
            f"{self.test}: a fast-tier test {what} (give it a tier marker: {', '.join(TIERS)})"
        )

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.test:
            return
        if event == "subprocess.Popen":
            self._program(args[0] if args[0] is not None else _first(args[1]), args[1])
        elif event in ("os.exec", "os.posix_spawn", "os.spawn"):
            self._program(args[1] if event == "os.spawn" else args[0])
        elif event == "os.system":
            self._program(_first(args[0]))
        elif event in ("open", "os.mkdir", "os.listdir", "os.scandir") and isinstance(args[0], str | bytes):
            path = os.fsdecode(args[0])
            if self._cached(path):
                self.refuse(f"touched the build cache ({path})")
        elif (
            event == "socket.connect"
            and isinstance(args[1], str | bytes)
            and "docker" in os.fsdecode(args[1])
        ):
            self.refuse(f"connected to Docker ({os.fsdecode(args[1])})")

    def _cached(self, path: str) -> bool:
        return any(path == c or path.startswith(c + os.sep) for c in self.caches)

    def _program(self, program: Any, command: Any = ()) -> None:
        if program is None:
            return
        path = os.fsdecode(program)
        if os.path.basename(path) in FORBIDDEN_PROGRAMS or self._cached(path):
            self.refuse(f"started {path}")
        words = [os.fsdecode(w) for w in command] if isinstance(command, list | tuple) else []
        if len(words) >= 3 and os.path.basename(words[0]) in SHELLS and words[1] == "-c":
            self._program(_first(words[2]))  # `sh -c "kubectl ..."`: the shell's first program


class TierViolation(RuntimeError):
    pass


def _first(command: Any) -> Any:
    """The program of a command line: a list's first item, a shell string's first word."""
    if isinstance(command, str | bytes):
        text = os.fsdecode(command)
        try:
            words = shlex.split(text)
        except ValueError:  # unbalanced quotes: the shell will say so; the guard only needs the program
            words = text.split()
        return words[0] if words else None
    return next(iter(command), None)


_GUARD = _Guard()


def pytest_configure(config: pytest.Config) -> None:
    for tier, text in (
        ("build", "builds something, or needs what hack/build-k8s.sh built (helm, Kueue); no cluster"),
        ("cluster", "needs the real local Kubernetes test cluster (binaries from hack/build-k8s.sh)"),
        ("kind", "the kind e2e (tests/kind): a kind cluster from images built by hack/kind"),
    ):
        config.addinivalue_line("markers", f"{tier}: {text}")
    _GUARD.tests = config.rootpath / "tests"
    if _GUARD.caches:
        return  # audit hooks cannot be removed: one per process
    from fakeplugin.cluster.binaries import cache_root

    _GUARD.caches = (str(cache_root().absolute()), NOWHERE["FAKEPLUGIN_CACHE"])
    sys.addaudithook(_GUARD.hook)


def is_fast(item: pytest.Item) -> bool:
    """A test of ours (below <rootdir>/tests) without a tier marker; tests elsewhere (examples/, a user's
    run from this repository and its pyproject) are in no tier: neither guarded nor deselected."""
    return _GUARD.tests in item.path.parents and not any(item.get_closest_marker(tier) for tier in TIERS)


def is_ours(item: pytest.Item) -> bool:
    return _GUARD.tests in item.path.parents


def _named(config: pytest.Config) -> list[Path]:
    """The files and folders below tests/ the command line names (node IDs without their `::` part)."""
    root = config.invocation_params.dir
    paths = [(root / arg.split("::")[0]).resolve() for arg in config.args]
    return [p for p in paths if p != _GUARD.tests and _GUARD.tests in p.parents]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("markexpr"):
        return
    named = _named(config)
    kept, dropped = [], []
    for item in items:
        wanted = (
            not is_ours(item) or is_fast(item) or any(p == item.path or p in item.path.parents for p in named)
        )
        (kept if wanted else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    if not is_fast(item):
        return (yield)
    _GUARD.test, _GUARD.violations = item.nodeid, []
    with pytest.MonkeyPatch.context() as env:
        for key, value in NOWHERE.items():
            env.setenv(key, value)
        try:
            return (yield)
        finally:
            _GUARD.test = ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    violations, _GUARD.violations = _GUARD.violations, []  # this phase's
    if _GUARD.test and violations and report.passed:
        # The test swallowed the guard's exception: its report still fails.
        report.outcome = "failed"
        report.longrepr = "\n".join(f"{item.nodeid}: a fast-tier test {v}" for v in violations)
    return report
