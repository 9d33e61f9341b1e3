"""Finding the Kubernetes binaries (envtest's lookup order) and building them with hack/build-k8s.sh."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

K8S_VERSION = "v1.35.4"
# Everything `cluster up` runs; helm is built by the script too but not needed here.
CLUSTER_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kubelet",
    "kubectl",
    "fakecri",
)
BUILD_SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "build-k8s.sh"


class BinaryNotFound(RuntimeError):
    pass


def cache_dir(env: Mapping[str, str] = os.environ) -> Path:
    """Where hack/build-k8s.sh puts binaries: $FAKEPLUGIN_CACHE/k8s/<version>/bin."""
    root = Path(env.get("FAKEPLUGIN_CACHE") or Path.home() / ".cache" / "fakeplugin")
    return root / "k8s" / env.get("K8S_VERSION", K8S_VERSION) / "bin"


def asset_env_var(name: str) -> str:
    """envtest's per-binary override: TEST_ASSET_ + upper-cased name, non-alphanumerics as '_'."""
    return "TEST_ASSET_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def location(name: str, env: Mapping[str, str] = os.environ) -> Path:
    """Where `name` should be, first match wins: TEST_ASSET_<NAME>, $KUBEBUILDER_ASSETS/<name>, the cache.

    As in envtest, a set environment variable is taken as is: no fallback when the file is missing.
    """
    if env.get(asset_env_var(name)):
        return Path(env[asset_env_var(name)])
    if env.get("KUBEBUILDER_ASSETS"):
        return Path(env["KUBEBUILDER_ASSETS"]) / name
    return cache_dir(env) / name


def find(name: str, env: Mapping[str, str] = os.environ) -> Path:
    path = location(name, env)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BinaryNotFound(
            f"{name}: no executable at {path} (looked up via {asset_env_var(name)}, $KUBEBUILDER_ASSETS, "
            f"then the build cache); build it with `fakeplugin cluster build --only {name}` "
            f"(runs {BUILD_SCRIPT}; needs Go >= 1.25 and the Go module proxy)"
        )
    return path


def find_all(
    names: tuple[str, ...] = CLUSTER_BINARIES, env: Mapping[str, str] = os.environ
) -> dict[str, Path]:
    """All binaries, or one error listing every missing one."""
    found: dict[str, Path] = {}
    missing: list[str] = []
    for name in names:
        try:
            found[name] = find(name, env)
        except BinaryNotFound as exc:
            missing.append(str(exc))
    if missing:
        raise BinaryNotFound("missing binaries:\n  " + "\n  ".join(missing))
    return found


def build(only: list[str] | None = None) -> int:
    """Run hack/build-k8s.sh (idempotent; progress goes to stderr); returns its exit status."""
    if not BUILD_SCRIPT.is_file():
        raise BinaryNotFound(f"build script {BUILD_SCRIPT} not found (it ships with the source tree)")
    argv = ["bash", str(BUILD_SCRIPT)]
    if only:
        argv += ["--only", ",".join(only)]
    return subprocess.run(argv, stdout=sys.stderr, check=False).returncode
