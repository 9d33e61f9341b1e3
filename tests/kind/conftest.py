"""The kind e2e (marker `kind`): one kind cluster for the session, made by `demo/kind/run.sh --local --keep
--release DIR` from images built on this machine (hack/kind), with a release of this commit, as a user
installs one: `hack/release.sh --local` makes its files (the image as an archive, the packaged chart running
it), run.sh checks them against SHA256SUMS, loads the archive into the nodes and installs the packaged chart.

The tests run in CI (CI=true: anything missing fails them) or when FAKEPLUGIN_KIND=1; otherwise they
skip, as they take minutes (tens of minutes with a cold image cache). FAKEPLUGIN_KIND_REUSE=1 keeps
the cluster after the session and reuses it next time (for working on the tests).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from fakeplugin.cluster import BinaryNotFound, binaries
from tests.harness.kind import CLUSTER, IMAGE, IMAGE_REPOSITORY, KIND, NVML_WORKLOAD, KindCluster
from tests.harness.nvml import PROBE
from tests.harness.paths import REPO
from tests.harness.tooling import unavailable

HERE = Path(__file__).parent


# Modules that go last, in this order: test_kind.py's last test uninstalls the chart the others use;
# test_operator_prometheus.py installs it in the namespace gpu-operator and uninstalls it; test_fleet.py
# installs it again in fleet mode and uninstalls it.
LAST = ("test_kind.py", "test_operator_prometheus.py", "test_fleet.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules of LAST after the others, whatever the file names (the other modules keep their order,
    and every test outside tests/kind its place)."""
    slots = [n for n, item in enumerate(items) if item.path.parent == HERE]
    ordered = sorted(
        (items[n] for n in slots),
        key=lambda item: LAST.index(item.path.name) + 1 if item.path.name in LAST else 0,
    )
    for n, item in zip(slots, ordered, strict=True):
        items[n] = item


def _enabled() -> bool:
    return os.environ.get("CI") == "true" or os.environ.get("FAKEPLUGIN_KIND") == "1"


def _tool_path() -> str:
    """PATH with our kubectl and helm (hack/build-k8s.sh) when the machine has none."""
    path = os.environ.get("PATH", "")
    missing = [t for t in ("kubectl", "helm") if shutil.which(t) is None]
    try:
        extra = {str(binaries.find(t).parent) for t in missing}
    except BinaryNotFound as exc:
        unavailable(str(exc))
    return ":".join([path, *sorted(extra)])


def _dockerd(action: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(REPO / "hack/kind/dockerd.sh"), action], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.fixture(scope="session")
def kind_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KindCluster]:
    if not _enabled():
        pytest.skip("kind e2e: runs in CI or with FAKEPLUGIN_KIND=1 (minutes; builds images when cold)")
    if os.geteuid() != 0:
        unavailable("the kind e2e needs root (our dockerd, debootstrap)")
    for tool in ("go", "python3"):
        if shutil.which(tool) is None:
            unavailable(f"the kind e2e needs {tool}")
    env = {**os.environ, "PATH": _tool_path()}
    env.pop("DOCKER_HOST", None)
    started = _dockerd("status", env).returncode != 0
    start = _dockerd("start", env)
    if start.returncode != 0:
        pytest.fail(f"hack/kind/dockerd.sh start failed:\n{start.stderr[-4000:]}", pytrace=False)
    key, _, value = start.stdout.strip().partition("=")
    env[key] = value
    reuse = os.environ.get("FAKEPLUGIN_KIND_REUSE") == "1"
    if not reuse:
        subprocess.run([str(KIND), "delete", "cluster", "--name", CLUSTER], env=env, capture_output=True)
    kubeconfig = tmp_path_factory.mktemp("kind") / "kubeconfig"
    release, commit = _release(tmp_path_factory.mktemp("release") / "dist", env)
    demo = subprocess.run(
        [str(REPO / "demo/kind/run.sh"), "--local", "--keep", "--release", str(release)],
        env={
            **env,
            "CLUSTER": CLUSTER,
            "KIND_CONFIG": str(REPO / "tests/kind/kind-config.yaml"),
            "KUBECONFIG_OUT": str(kubeconfig),
        },
        capture_output=True,
        text=True,
        timeout=5400,
    )
    output = demo.stdout + demo.stderr
    if demo.returncode != 0:
        # Both ends: kind prints its error first, then the failed command's whole output.
        shown = output if len(output) < 12000 else f"{output[:4000]}\n[...]\n{output[-8000:]}"
        pytest.fail(f"demo/kind/run.sh --local --keep failed:\n{shown}", pytrace=False)
    (chart,) = release.glob("fakeplugin-*.tgz")
    cluster = KindCluster(kubeconfig, env, output, chart, commit)
    # The demo's pods hold all three GPUs: the tests need them free.
    cluster.kubectl(
        "delete", "namespace", "lab01", "lab02", "--ignore-not-found", "--wait", "--timeout=180s", timeout=200
    )
    yield cluster
    if not reuse:
        subprocess.run([str(KIND), "delete", "cluster", "--name", CLUSTER], env=env, capture_output=True)
        if started:
            _dockerd("stop", env)


def _release(out: Path, env: dict[str, str]) -> tuple[Path, str]:
    """The release files of HEAD and HEAD's commit: those of $FAKEPLUGIN_KIND_RELEASE when set (hack/test.sh
    makes them in the background during the local tier), else made here into `out` (hack/release.sh --local in
    a clone: the working tree may be dirty); the image IMAGE_REPOSITORY:<version>, built by our Docker
    engine on our base image."""
    head = ["git", "rev-parse", "HEAD"]
    made = os.environ.get("FAKEPLUGIN_KIND_RELEASE")
    if made:
        commit = subprocess.run(head, cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
        return Path(made), commit
    clone = out.parent / "clone"
    subprocess.run(["git", "clone", "--quiet", "--shared", str(REPO), str(clone)], check=True)
    commit = subprocess.run(head, cwd=clone, capture_output=True, text=True, check=True).stdout.strip()
    done = subprocess.run(
        ["bash", "hack/release.sh", "--local", "--out", str(out), "--image-repository", IMAGE_REPOSITORY],
        cwd=clone,
        env={**env, "HELM": str(binaries.find("helm"))},
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        pytest.fail(f"hack/release.sh --local failed:\n{done.stderr[-8000:]}", pytrace=False)
    return out, commit


@pytest.fixture
def kind_namespace(kind_cluster: KindCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted (with its pods and claims) after it."""
    name = f"t-{request.node.name.lower().replace('_', '-')[:40].strip('-')}-{int(time.time()) % 100000}"
    kind_cluster.kubectl("create", "namespace", name)
    yield name
    kind_cluster.kubectl("delete", "namespace", name, "--wait", "--timeout=180s", timeout=200)


@pytest.fixture(scope="session")
def busybox(kind_cluster: KindCluster) -> str:
    """The busybox-only image of hack/kind/images.sh, loaded into the cluster's nodes."""
    out = kind_cluster.run(str(REPO / "hack/kind/images.sh"), "--bases", timeout=1800)
    image = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)["BUSYBOX_IMAGE"]
    kind_cluster.run(str(KIND), "load", "docker-image", "--name", CLUSTER, image)
    return image


@pytest.fixture(scope="session")
def nvml_workload(kind_cluster: KindCluster, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A workload image with nvidia-ml-py, loaded into the GPU nodes: the release's image (its python3)
    plus the pure-Python `pynvml` module of the nvidia-ml-py the fast tier tests with (pyproject.toml's dev
    extra; no network in the build) and tests/harness/nvml_probe.py, which prints what pynvml sees."""
    context = tmp_path_factory.mktemp("nvml-workload")
    for module in (Path(pynvml.__file__), PROBE):
        shutil.copy(module, context)
    (context / "Dockerfile").write_text(
        f"FROM {IMAGE}\nCOPY pynvml.py {PROBE.name} /opt/nvml-probe/\nENV PYTHONPATH=/opt/nvml-probe\n"
    )
    kind_cluster.run("docker", "build", "-q", "-t", NVML_WORKLOAD, str(context))
    nodes = ",".join(kind_cluster.gpu_nodes())
    kind_cluster.run(str(KIND), "load", "docker-image", "--name", CLUSTER, "--nodes", nodes, NVML_WORKLOAD)
    return NVML_WORKLOAD
