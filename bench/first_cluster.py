"""A user's first cluster from a release, without Go: `pip install` of the Linux wheel (it carries fakecri
and kwok) into a fresh virtualenv, then `fakeplugin demo` (the reference lab: a real local cluster, claims
prepared, what each container got) with an empty cache, no `go` on PATH, and the Kubernetes components,
etcd and helm downloaded from a release mirror on 127.0.0.1 (the real binaries hack/build-k8s.sh made,
published as upstream publishes them: tests/harness/mirror.py). The anchor, in the same run: the demo
again in the same virtualenv, everything cached (what downloading and verifying cost is the difference).

    python bench/first_cluster.py --wheel dist/fakeplugin-<v>-py3-none-manylinux_2_17_x86_64....whl

The wheel: `hack/release.sh --no-image --out dist/`. Needs root (the local cluster) and the binaries of
--kubernetes-version in ~/.cache/fakeplugin (read, never written). Results: docs/benchmarks.md.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import arguments, machine, report, say

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tests.harness.mirror

from fakeplugin.cluster import downloads, versions  # noqa: E402
from tests.harness import mirror as mirrors  # noqa: E402


def timed(argv: list[str], env: dict[str, str], what: str) -> float:
    say(f"{what}: {' '.join(argv)}")
    started = time.monotonic()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    seconds = round(time.monotonic() - started, 1)
    say(f"{what}: {seconds} s")
    return seconds


def main() -> None:
    parser = arguments(__doc__ or "")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the results here")
    parser.add_argument("--wheel", type=Path, required=True, help="the Linux wheel of hack/release.sh")
    parser.add_argument("--kubernetes-version", default=versions.DEFAULT_VERSION)
    args = parser.parse_args()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}[platform.machine()]
    real = Path.home() / ".cache" / "fakeplugin" / "k8s" / args.kubernetes_version / "bin"
    with tempfile.TemporaryDirectory(prefix="fpfirst-", dir="/tmp") as tmp:
        root = Path(tmp)
        mirrors.publish_release(root / "mirror", real, args.kubernetes_version, arch)
        no_go = os.pathsep.join(
            p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "go").exists()
        )
        env = {k: v for k, v in os.environ.items() if k not in (downloads.OFFLINE_ENV, "VIRTUAL_ENV")}
        env |= {"PATH": no_go, "FAKEPLUGIN_CACHE": str(root / "cache")}
        venv = root / "venv"
        with mirrors.serve(root / "mirror") as mirror:
            env |= mirror.env()
            started = time.monotonic()
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            install = timed([str(venv / "bin" / "pip"), "install", "-q", str(args.wheel)], env, "pip install")
            demo = ["fakeplugin", "demo", "--state-dir", str(root / "state")]
            env["PATH"] = f"{venv / 'bin'}:{no_go}"
            first = timed(demo, env, "demo, empty cache")
            total = round(time.monotonic() - started, 1)
            warm = timed(demo, env, "demo again, everything cached (anchor)")
            fetched = sorted({p.rsplit("/", 1)[-1] for p in mirror.requests})
    report(
        {
            "machine": machine(),
            "kubernetes_version": args.kubernetes_version,
            "wheel": args.wheel.name,
            "wheel_bytes": args.wheel.stat().st_size,
            "seconds": {"pip_install": install, "demo_empty_cache": first, "total": total},
            "anchor_seconds": {"demo_cached": warm},
            "downloaded": fetched,
        },
        args.json,
    )


if __name__ == "__main__":
    main()
