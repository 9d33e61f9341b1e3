"""Finding the Kubernetes binaries (envtest's lookup order) and getting the missing ones: the official
releases where upstream publishes them with a checksum (downloads.py), hack/build-k8s.sh for the rest."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from fakeplugin.cluster import versions

if TYPE_CHECKING:  # downloads.py (urllib, tarfile) is loaded when used: every command imports this module
    from fakeplugin.cluster.downloads import Fetched

K8S_VERSION = versions.DEFAULT_VERSION
# Everything `cluster up` runs; helm is built by the script too but not needed here.
CLUSTER_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-scheduler",
    "kube-controller-manager",
    "kubelet",
    "kubectl",
    "fakecri",
    "kwok",
)
# What hack/build-k8s.sh builds without --only.
SCRIPT_BINARIES = (*CLUSTER_BINARIES, "helm")
# hack/build-k8s.sh and the fake CRI's source, shipped as package data (in a source tree: links to hack/),
# so an installed fakeplugin (a wheel, the image) builds the binaries too.
BUILD_SCRIPT = Path(__file__).resolve().parent / "gosrc" / "hack" / "build-k8s.sh"
# Our Go helpers that a release's linux wheel carries, built for its platform by hack/release.sh (static,
# CGO-less), in BUNDLED_DIR of the installed package; never in a source tree (the folder is gitignored, and
# pyproject's exclude-package-data keeps a stray one out of a wheel built from a working tree).
BUNDLED = ("fakecri", "kwok")
BUNDLED_DIR = Path(__file__).resolve().parent / "bin"


class BinaryNotFound(RuntimeError):
    pass


def cache_root(env: Mapping[str, str] = os.environ) -> Path:
    """$FAKEPLUGIN_CACHE, default ~/.cache/fakeplugin (as in hack/build-k8s.sh)."""
    return Path(env.get("FAKEPLUGIN_CACHE") or Path.home() / ".cache" / "fakeplugin")


# Where `fakeplugin cluster` keeps a local cluster unless told otherwise. Here, not in cluster.local: every
# command's --state-dir flag reads it, and importing cluster.local would cost the plugin its memory.
DEFAULT_STATE_DIR = cache_root() / "cluster"


def cache_dir(env: Mapping[str, str] = os.environ, version: str | None = None) -> Path:
    """Where hack/build-k8s.sh puts binaries: $FAKEPLUGIN_CACHE/k8s/<version>/bin; the version as
    chosen_version picks it."""
    return cache_root(env) / "k8s" / chosen_version(env, version) / "bin"


def chosen_version(env: Mapping[str, str] = os.environ, version: str | None = None) -> str:
    """`version`, else $FAKEPLUGIN_K8S_VERSION, else K8S_VERSION (the script's variable), else the default."""
    return version or env.get(versions.ENV) or env.get("K8S_VERSION") or K8S_VERSION


def asset_env_var(name: str) -> str:
    """envtest's per-binary override: TEST_ASSET_ + upper-cased name, non-alphanumerics as '_'."""
    return "TEST_ASSET_" + re.sub(r"[^A-Z0-9]", "_", name.upper())


def location(name: str, env: Mapping[str, str] = os.environ, version: str | None = None) -> Path:
    """Where `name` should be, first match wins: TEST_ASSET_<NAME>, $KUBEBUILDER_ASSETS/<name>, the cache
    (of `version`, see cache_dir), then, for fakecri and kwok (BUNDLED), the helper an installed release
    wheel carries (BUNDLED_DIR) when the cache has none.

    As in envtest, a set environment variable is taken as is: no fallback when the file is missing. The
    cache comes before the bundled helper because it is what `fakeplugin cluster build` made on purpose, for
    this Kubernetes version and from the fake CRI's source as it is now (hack/build-k8s.sh rebuilds fakecri
    when its source changed); the bundled helper is the last resort, so that a `pip install`ed fakeplugin
    runs a local cluster without Go. Where neither exists, the cache's path is returned (find_all names it).
    """
    if env.get(asset_env_var(name)):
        return Path(env[asset_env_var(name)])
    if env.get("KUBEBUILDER_ASSETS"):
        return Path(env["KUBEBUILDER_ASSETS"]) / name
    cached = cache_dir(env, version) / name
    if name in BUNDLED and not _executable(cached) and _executable(BUNDLED_DIR / name):
        return BUNDLED_DIR / name
    return cached


def find(name: str, env: Mapping[str, str] = os.environ, version: str | None = None) -> Path:
    return find_all((name,), env, version)[name]


def find_all(
    names: tuple[str, ...] = CLUSTER_BINARIES, env: Mapping[str, str] = os.environ, version: str | None = None
) -> dict[str, Path]:
    """All binaries, or one error naming every missing one and how to build them."""
    found = {name: location(name, env, version) for name in names}
    missing = {n: p for n, p in found.items() if not _executable(p)}
    if missing:
        raise BinaryNotFound(
            "missing binaries (looked up as TEST_ASSET_<NAME>, else $KUBEBUILDER_ASSETS/<name>, else the "
            f"build cache, else for {' and '.join(BUNDLED)} the package's own, which only a release's linux "
            "wheel has):\n"
            + "".join(f"  {n}: no executable at {p}\n" for n, p in missing.items())
            + "get them (the official releases of etcd, the Kubernetes components and helm downloaded and "
            f"verified where possible, the rest built by {BUILD_SCRIPT}, which needs Go and the Go module "
            f"proxy) with `fakeplugin cluster build{_version_flag(version)} --only {','.join(missing)}`"
        )
    return found


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def fetch(names: tuple[str, ...], env: Mapping[str, str] = os.environ, version: str | None = None) -> Fetched:
    """Download the official release of each of `names` that is missing from the cache and that upstream
    publishes with a checksum (downloads.py; nothing with FAKEPLUGIN_OFFLINE=1). A name looked up through
    TEST_ASSET_<NAME> or $KUBEBUILDER_ASSETS is never fetched: the cache is not where it is looked for."""
    from fakeplugin.cluster import downloads

    chosen = chosen_version(env, version)
    bin_dir = cache_dir(env, chosen)
    missing = [n for n in names if location(n, env, chosen) == bin_dir / n and not _executable(bin_dir / n)]
    return downloads.fetch_all(missing, bin_dir, chosen, env)


def kueue_dir(version: str, env: Mapping[str, str] = os.environ) -> Path:
    """What hack/build-k8s.sh builds for Kueue `version`: `kueue` (the manager) and `module/` (its
    config/components and charts/kueue)."""
    return cache_root(env) / "kueue" / version


def find_kueue(version: str, env: Mapping[str, str] = os.environ) -> tuple[Path, Path]:
    """Kueue's manager (TEST_ASSET_KUEUE, else the cache) and its module files, or one error saying how
    to build them."""
    home = kueue_dir(version, env)
    binary = Path(env[asset_env_var("kueue")]) if env.get(asset_env_var("kueue")) else home / "kueue"
    module = home / "module"
    if not _executable(binary) or not (module / "config").is_dir():
        raise BinaryNotFound(
            f"Kueue {version} is not built (no executable at {binary}, or no module files in {module}); "
            f"build it with `fakeplugin cluster build --only kueue` (FAKEPLUGIN_KUEUE_VERSION={version}; "
            f"runs {BUILD_SCRIPT}; needs Go >= 1.26 and the Go module proxy), or pass --build"
        )
    return binary, module


def keda_dir(version: str, env: Mapping[str, str] = os.environ) -> Path:
    """What hack/build-k8s.sh builds for KEDA `version`: `keda` (the operator), `keda-adapter` (the metrics
    API server) and `module/config` (its CRDs and manifests)."""
    return cache_root(env) / "keda" / version


def find_keda(version: str, env: Mapping[str, str] = os.environ) -> tuple[Path, Path, Path]:
    """KEDA's operator, metrics API server and module files (the cache), or one error saying how to
    build them."""
    home = keda_dir(version, env)
    operator, adapter, module = home / "keda", home / "keda-adapter", home / "module"
    if not all(_executable(b) for b in (operator, adapter)) or not (module / "config").is_dir():
        raise BinaryNotFound(
            f"KEDA {version} is not built (no executables keda, keda-adapter or no module files in {home}); "
            f"build it with `fakeplugin cluster build --only keda` (runs {BUILD_SCRIPT}; needs Go >= 1.26 "
            "and the Go module proxy; about 6 minutes on 2 cores)"
        )
    return operator, adapter, module


def karpenter_dir(version: str, env: Mapping[str, str] = os.environ) -> Path:
    """What hack/build-k8s.sh builds for Karpenter `version`: `karpenter` (its kwok provider with GPU
    instance types, hack/karpenter/main.go) and `crds/` (the kwok provider's CRDs)."""
    return cache_root(env) / "karpenter" / version


def find_karpenter(version: str, env: Mapping[str, str] = os.environ) -> tuple[Path, Path]:
    """Karpenter's binary (TEST_ASSET_KARPENTER, else the cache) and its CRDs, or one error saying how to
    build them."""
    home = karpenter_dir(version, env)
    binary = (
        Path(env[asset_env_var("karpenter")]) if env.get(asset_env_var("karpenter")) else home / "karpenter"
    )
    crds = home / "crds"
    if not _executable(binary) or not any(crds.glob("*.yaml")):
        raise BinaryNotFound(
            f"Karpenter {version} is not built (no executable at {binary}, or no CRDs in {crds}); build it "
            f"with `fakeplugin cluster build --only karpenter` (runs {BUILD_SCRIPT} with "
            "GOTOOLCHAIN=go1.27.3, which the go command fetches from the Go module proxy: Karpenter's "
            "go.mod wants a newer Go than 1.26.8; about 8 minutes on 2 cores), or pass --build"
        )
    return binary, crds


def _version_flag(version: str | None) -> str:
    return f" --kubernetes-version {version}" if version and version != K8S_VERSION else ""


def build(
    only: list[str] | None = None,
    version: str | None = None,
    kueue_version: str | None = None,
    *,
    download: bool = True,
) -> int:
    """Get `only` (default: what hack/build-k8s.sh builds without --only) for `version` (default: as
    cache_dir picks it): with `download`, the missing official releases first (fetch), then
    hack/build-k8s.sh for the rest, Kueue at `kueue_version` (default: the table's); idempotent, progress
    on stderr; returns the script's exit status (0 when nothing was left to build)."""
    from fakeplugin.cluster import downloads

    names = list(only or SCRIPT_BINARIES)
    if download:
        fetch(tuple(names), version=version)
    bin_dir = cache_dir(version=version)
    # A downloaded binary is not built again; the others go to the script, which keeps what it has built
    # (and rebuilds fakecri when its source changed).
    rest = [n for n in names if not (n in downloads.DOWNLOADABLE and _executable(bin_dir / n))]
    if not rest:
        return 0
    if not only and len(rest) == len(SCRIPT_BINARIES):
        rest = []  # all of them: the script's own default
    if not BUILD_SCRIPT.is_file():
        raise BinaryNotFound(
            f"build script {BUILD_SCRIPT} not found (it ships as package data: reinstall fakeplugin)"
        )
    argv = ["bash", str(BUILD_SCRIPT)]
    if rest:
        argv += ["--only", ",".join(rest)]
    env = dict(os.environ)
    if version:
        env["K8S_VERSION"] = version
    if kueue_version:
        env["KUEUE_VERSION"] = kueue_version
    return subprocess.run(argv, stdout=sys.stderr, check=False, env=env).returncode
