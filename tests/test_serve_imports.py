"""The modules a running `fakeplugin serve` has loaded: exactly the list in tests/data/serve-imports.txt.

Every import costs the plugin pod resident memory for its whole life (docs/benchmarks.md, issue 21;
`python bench/import_cost.py` says how much each costs), so the set must not grow unnoticed. The plugin runs
as the DaemonSet runs it, here against an API server that refuses connections (its Prepare and Unprepare
calls still take their whole paths up to the API call); at its exit it writes `sys.modules`. Standard
library modules are not listed (they differ between Python versions); everything else is, by full name.

After a change that means to load more (or fewer) modules, rewrite the list and commit it with the change:

    python -m tests.test_serve_imports
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc

from fakeplugin._proto.dra.v1 import api_pb2 as dra
from fakeplugin._proto.dra.v1 import api_pb2_grpc as dra_grpc
from fakeplugin._proto.pluginregistration.v1 import api_pb2 as reg
from fakeplugin._proto.pluginregistration.v1 import api_pb2_grpc as reg_grpc
from tests.harness import DRIVER

REPO = Path(__file__).resolve().parent.parent
ALLOWED = REPO / "tests" / "data" / "serve-imports.txt"
UPDATE = "python -m tests.test_serve_imports"
NODE = "capi-dralabs-md-gput10-gzl84-f2m2d"  # a T10 node of examples/seed-lab.yaml
TIMEOUT_S = 60
# Interpreter, site and build artefacts, not imports: Cython's per-version runtime modules, sysconfig's data,
# setuptools' .pth hook.
NOT_IMPORTS = re.compile(r"^(__|_cython_|cython_runtime$|_sysconfigdata_|_distutils_hack$)")
# Loaded by requests (through the API client's config) only where PySocks is installed: selenium's
# urllib3[socks] brings it into the dev venv (pyproject's dev extras, the fleet view's browser test); the
# plugin's image has none. Not counted either way.
DEV_ONLY = frozenset({"socks", "urllib3.contrib.socks"})

# Runs `fakeplugin serve` as `python -m fakeplugin serve` does; writes the loaded modules when it exits.
LAUNCH = """
import atexit, json, sys
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from fakeplugin.cli import main
sys.exit(main(sys.argv[1:]))
"""

KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: gone, user: u}}]
current-context: c
"""


def third_party(modules: list[str]) -> list[str]:
    """The modules outside the standard library, sorted."""
    return sorted(
        m
        for m in modules
        if m.split(".")[0] not in sys.stdlib_module_names and not NOT_IMPORTS.match(m) and m not in DEV_ONLY
    )


def serve_modules(root: Path) -> list[str]:
    """Run the plugin in `root` through start, GetInfo, a Prepare and an Unprepare, then SIGTERM; what
    it had loaded (outside the standard library)."""
    (root / "kubeconfig").write_text(KUBECONFIG)
    (root / "boot_id").write_text("0b00b00b-0000-4000-8000-000000000003\n")
    out = root / "modules.json"
    argv = [
        sys.executable, "-c", LAUNCH, str(out), "serve",
        "--inventory", str(REPO / "examples" / "seed-lab.yaml"),
        "--node-name", NODE,
        "--kubeconfig", str(root / "kubeconfig"),
        "--boot-id-file", str(root / "boot_id"),
        "--cdi-root", str(root / "cdi"),
        "--kubelet-registrar-directory-path", str(root / "reg"),
        "--kubelet-plugins-directory-path", str(root / "plugins"),
    ]  # fmt: skip
    log = (root / "serve.log").open("w")
    proc = subprocess.Popen(
        argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env={"PYTHONPATH": str(REPO)}
    )
    try:
        with grpc.insecure_channel(f"unix:{root / 'reg' / f'{DRIVER}-reg.sock'}") as channel:
            info = reg_grpc.RegistrationStub(channel).GetInfo(
                reg.InfoRequest(), timeout=TIMEOUT_S, wait_for_ready=True
            )
        claim = dra.Claim(namespace="ns", name="c", uid="0b00b00b-0000-4000-8000-00000000000c")
        with grpc.insecure_channel(f"unix:{info.endpoint}") as channel:
            stub = dra_grpc.DRAPluginStub(channel)
            prepared = stub.NodePrepareResources(
                dra.NodePrepareResourcesRequest(claims=[claim]), timeout=TIMEOUT_S
            )
            assert "retrieve claim ns/c" in prepared.claims[claim.uid].error  # the API call was made
            unprepared = stub.NodeUnprepareResources(
                dra.NodeUnprepareResourcesRequest(claims=[claim]), timeout=TIMEOUT_S
            )
            assert unprepared.claims[claim.uid].error == ""
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=TIMEOUT_S) == 0, (root / "serve.log").read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    return third_party(json.loads(out.read_text()))


def allowed() -> list[str]:
    return [line for line in ALLOWED.read_text().splitlines() if line and not line.startswith("#")]


def test_serve_loads_exactly_the_allowed_modules() -> None:
    with tempfile.TemporaryDirectory(prefix="fpimp-", dir="/tmp") as root:  # short: socket paths
        loaded = serve_modules(Path(root))
    new = sorted(set(loaded) - set(allowed()))
    gone = sorted(set(allowed()) - set(loaded))
    assert not new, (
        f"fakeplugin serve now loads {len(new)} module(s) not in {ALLOWED.relative_to(REPO)}: {new}. "
        "Each costs every plugin pod memory (bench/import_cost.py): import it lazily where the plugin "
        f"never needs it, or, if the plugin does, run `{UPDATE}` and commit the list."
    )
    assert not gone, (
        f"fakeplugin serve no longer loads {gone}: run `{UPDATE}` and commit the shorter list "
        f"({ALLOWED.relative_to(REPO)})."
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="fpimp-", dir="/tmp") as root:
        loaded = serve_modules(Path(root))
    header = (
        "# The modules outside the standard library that a running `fakeplugin serve` loads.\n"
        f"# Checked by tests/test_serve_imports.py; rewritten by `{UPDATE}`.\n"
    )
    ALLOWED.write_text(header + "\n".join(loaded) + "\n")
    print(f"{ALLOWED.relative_to(REPO)}: {len(loaded)} modules")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
