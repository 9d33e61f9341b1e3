#!/usr/bin/env bash
# Every file of a release in one folder, from the commit checked out (HEAD), never from the working tree:
# HEAD is exported with `git archive` into a temporary directory and everything is built there, so
# untracked and ignored files cannot reach a release. .github/workflows/release.yaml runs it on a version
# tag (CONTRIBUTING.md, "Making a release").
#
#   hack/release.sh [--out DIR] [--no-image] [--image-repository REPO] [--local] [--allow-dirty]
#
#   --out DIR               where the files go (default dist/); it must be empty or absent
#   --no-image              no container image (no Docker needed)
#   --image-repository REPO the release's image, without tag (default ghcr.io/<owner>/fakeplugin, <owner>
#                           being $GITHUB_REPOSITORY_OWNER in lower case, else the GitHub owner of the
#                           `origin` remote): the packaged chart's default image is REPO:<version>
#   --local                 for a machine that reaches no image registry (as demo/kind/run.sh --local): the
#                           image's base is the Python image hack/kind/images.sh --bases builds from Debian's
#                           packages, built by our Docker engine when none answers (hack/kind/dockerd.sh), with
#                           the host's network (that engine has no bridge). Needs root, as images.sh
#   --allow-dirty           build although the working tree has changes (they are not in the release: HEAD is)
#
# The files, <version> being fakeplugin.__version__ at HEAD:
#   fakeplugin-<version>.tar.gz                                                the sdist
#   fakeplugin-<version>-py3-none-any.whl                                      the pure wheel (other systems)
#   fakeplugin-<version>-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl    the linux wheels, with the
#   fakeplugin-<version>-py3-none-manylinux_2_17_aarch64.manylinux2014_aarch64.whl  Go helpers fakecri and kwok
#   fakeplugin-<version>.tgz                                                   the Helm chart
#   fakeplugin-<version>-linux-amd64.oci.tar                                   the image, unless --no-image: an
#                                                                              OCI layout docker load reads
#   SHA256SUMS                                                                 sha256sum lines of all of them, by name
#
# Reproducible: SOURCE_DATE_EPOCH is the commit's time (git log -1 --format=%ct), every archive is rewritten
# with sorted entries of that date (hack/release-files.py), the Go helpers are built with -trimpath and no
# VCS stamp, so two runs on one commit (same Go, helm and Python) give the same bytes; the image is not
# reproducible. The helpers are CGO-less static builds (CGO_ENABLED=0 GOOS=linux GOARCH=amd64|arm64) by
# hack/build-k8s.sh itself (--only fakecri,kwok, into a temporary FAKEPLUGIN_CACHE), at its default
# Kubernetes, kwok and CDI versions: needing no libc, a manylinux tag says no more than is true.
#
# Needs: git, Go (as hack/build-k8s.sh), helm ($HELM, else helm on PATH, else the cache's, found as
# fakeplugin.cluster.binaries finds it), python3 >= 3.11 with venv (the build tools, from PyPI), Docker
# unless --no-image.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
PYTHON="${PYTHON:-python3}"
SETUPTOOLS_PIN="setuptools==84.2.1"  # the build backend, pinned: another version may write other bytes
PLATFORMS=(  # GOARCH and the wheel's platform tags
  "amd64 manylinux_2_17_x86_64.manylinux2014_x86_64"
  "arm64 manylinux_2_17_aarch64.manylinux2014_aarch64"
)

say() { printf '[release %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }
usage() { sed -n '2,38p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

OUT="dist"
IMAGE=1
IMAGE_REPOSITORY=""
ALLOW_DIRTY=0
LOCAL=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --out) [[ -n "${2:-}" ]] || die "--out needs a folder"; OUT="$2"; shift 2 ;;
    --no-image) IMAGE=0; shift ;;
    --image-repository) [[ -n "${2:-}" ]] || die "--image-repository needs a name"; IMAGE_REPOSITORY="$2"; shift 2 ;;
    --local) LOCAL=1; shift ;;
    --allow-dirty) ALLOW_DIRTY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument $1" ;;
  esac
done

cd "$REPO"
git rev-parse --verify -q HEAD >/dev/null || die "$REPO is not a git checkout with a commit"
if [[ -n "$(git status --porcelain)" ]]; then
  ((ALLOW_DIRTY)) || die "the working tree has changes (git status); a release is built from HEAD alone: commit them, or pass --allow-dirty to build HEAD anyway"
  say "warning: the working tree has changes; they are NOT in the release, which is HEAD ($(git rev-parse --short HEAD))"
fi
if [[ -z "$IMAGE_REPOSITORY" ]]; then
  owner="${GITHUB_REPOSITORY_OWNER:-}"
  if [[ -z "$owner" ]]; then
    owner="$( (git remote get-url origin 2>/dev/null || true) |
      sed -nE 's#^(https://github\.com/|git@github\.com:|ssh://git@github\.com/)([^/]+)/.*#\2#p')"
  fi
  [[ -n "$owner" ]] || die "no image repository: pass --image-repository ghcr.io/<owner>/fakeplugin (neither GITHUB_REPOSITORY_OWNER nor a GitHub origin remote names the owner)"
  IMAGE_REPOSITORY="ghcr.io/${owner,,}/fakeplugin"
fi
[[ "$IMAGE_REPOSITORY" =~ ^[a-z0-9][a-z0-9._/:-]*$ && "${IMAGE_REPOSITORY##*/}" != *:* ]] ||
  die "--image-repository $IMAGE_REPOSITORY: not an image name without a tag, in lower case"
BUILD_ARGS=()
if ((IMAGE && LOCAL)); then
  # shellcheck source=kind/lib.sh
  source "$HERE/kind/lib.sh"
  use_our_docker
  if ! docker info >/dev/null 2>&1; then
    say "no Docker engine answers: starting our own (hack/kind/dockerd.sh)"
    export "$("$HERE/kind/dockerd.sh" start)"
  fi
  base="$("$HERE/kind/images.sh" --bases | sed -n 's/^PYTHON_IMAGE=//p')"
  [[ -n "$base" ]] || die "hack/kind/images.sh --bases printed no PYTHON_IMAGE"
  BUILD_ARGS=(--network host --build-arg "PYTHON_IMAGE=$base")
fi
if ((IMAGE)); then
  docker info >/dev/null 2>&1 || die "docker is not usable here (docker info failed): start it, or pass --no-image"
fi
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
[[ -z "$(ls -A "$OUT")" ]] || die "$OUT is not empty: give an empty or new folder to --out"

COMMIT="$(git rev-parse HEAD)"
SOURCE_DATE_EPOCH="$(git log -1 --format=%ct HEAD)"
export SOURCE_DATE_EPOCH
TMP="$(mktemp -d "${TMPDIR:-/tmp}/fakeplugin-release.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
SRC="$TMP/src"
STAGE="$TMP/stage"
mkdir -p "$SRC" "$STAGE"
git archive --format=tar HEAD | tar -x -C "$SRC"
VERSION="$(sed -nE 's/^__version__ = "([^"]+)"$/\1/p' "$SRC/fakeplugin/__init__.py")"
[[ -n "$VERSION" ]] || die "no __version__ in fakeplugin/__init__.py at $COMMIT"
say "fakeplugin $VERSION from $COMMIT (SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH), image $IMAGE_REPOSITORY:$VERSION"
FILES="$SRC/hack/release-files.py"

# ---- the sdist and the pure wheel: setuptools' own hooks (PEP 517) at a pinned version, the wheel built
# from the sdist (what pip does with it), both rewritten deterministically.
say "build tools: $SETUPTOOLS_PIN"
"$PYTHON" -m venv "$TMP/tools"
TOOLS="$TMP/tools/bin/python"
"$TOOLS" -m pip install --quiet --disable-pip-version-check "$SETUPTOOLS_PIN"
pep517() {  # pep517 HOOK SOURCE_DIR OUT_DIR: prints the file's name
  (cd "$2" && "$TOOLS" -c 'import sys; from setuptools import build_meta; print(getattr(build_meta, sys.argv[1])(sys.argv[2]))' "$1" "$3" | tail -n1)
}
mkdir -p "$TMP/sdist" "$TMP/wheel" "$TMP/unpacked"
say "the sdist"
sdist="$(pep517 build_sdist "$SRC" "$TMP/sdist")"
[[ "$sdist" == "fakeplugin-$VERSION.tar.gz" ]] || die "the sdist is $sdist, not fakeplugin-$VERSION.tar.gz"
"$TOOLS" "$FILES" tgz "$TMP/sdist/$sdist" "$STAGE/$sdist"
say "the pure wheel (from the sdist)"
tar -xzf "$STAGE/$sdist" -C "$TMP/unpacked"
pure="$(pep517 build_wheel "$TMP/unpacked/fakeplugin-$VERSION" "$TMP/wheel")"
"$TOOLS" "$FILES" wheel "$TMP/wheel/$pure" "$STAGE" >/dev/null

# ---- the Go helpers, cross-compiled by hack/build-k8s.sh (of the exported tree) into a temporary cache;
# the Go module and build caches are the usual ones (GOMODCACHE, GOCACHE). Its version overrides are
# cleared: a release has the defaults of its commit.
for platform in "${PLATFORMS[@]}"; do
  read -r goarch tags <<<"$platform"
  say "fakecri and kwok for linux/$goarch"
  cache="$TMP/go-$goarch"
  bin="$(env -u K8S_VERSION -u FAKEPLUGIN_K8S_VERSION -u KWOK_VERSION -u CDI_VERSION -u K8S_GOTOOLCHAIN \
    FAKEPLUGIN_CACHE="$cache" GOOS=linux GOARCH="$goarch" CGO_ENABLED=0 \
    bash "$SRC/hack/build-k8s.sh" --only fakecri,kwok | tail -n1)"
  mkdir -p "$TMP/helpers-$goarch"
  for name in fakecri kwok; do
    [[ -x "$bin/$name" ]] || die "hack/build-k8s.sh built no $name in $bin"
    install -m 0755 "$bin/$name" "$TMP/helpers-$goarch/$name"
  done
  wheel="$("$TOOLS" "$FILES" wheel "$TMP/wheel/$pure" "$STAGE" --platform "$tags" --helpers "$TMP/helpers-$goarch")"
  say "$(basename "$wheel")"
done

# ---- the chart, its default image this release's
say "the chart"
HELM_BIN="${HELM:-}"
[[ -n "$HELM_BIN" ]] || HELM_BIN="$(command -v helm || true)"
if [[ -z "$HELM_BIN" ]]; then
  HELM_BIN="$(cd "$SRC" && "$PYTHON" -c 'from fakeplugin.cluster import binaries; print(binaries.find("helm"))' 2>/dev/null)" ||
    die "helm not found: set HELM, put helm on PATH, or build it (hack/build-k8s.sh --only helm)"
fi
"$TOOLS" "$FILES" chart-values "$SRC/charts/fakeplugin/values.yaml" "$IMAGE_REPOSITORY" "$VERSION"
mkdir -p "$TMP/chart"
"$HELM_BIN" package "$SRC/charts/fakeplugin" --destination "$TMP/chart" >/dev/null
[[ -f "$TMP/chart/fakeplugin-$VERSION.tgz" ]] || die "helm package wrote no fakeplugin-$VERSION.tgz (the chart's version is not $VERSION?)"
"$TOOLS" "$FILES" tgz "$TMP/chart/fakeplugin-$VERSION.tgz" "$STAGE/fakeplugin-$VERSION.tgz"

# ---- the image (not reproducible)
if ((IMAGE)); then
  say "the image $IMAGE_REPOSITORY:$VERSION (docker build, docker save)"
  # With buildx, --load: a builder of the docker-container driver (docker/setup-buildx-action's) keeps its
  # images to itself otherwise, and docker save would find none.
  build=(docker build)
  docker buildx version >/dev/null 2>&1 && build=(docker buildx build --load)
  "${build[@]}" --quiet --platform linux/amd64 "${BUILD_ARGS[@]}" --build-arg "VERSION=$VERSION" \
    --label "org.opencontainers.image.revision=$COMMIT" -t "$IMAGE_REPOSITORY:$VERSION" "$SRC" >/dev/null
  docker save -o "$TMP/image.tar" "$IMAGE_REPOSITORY:$VERSION"
  # An OCI image layout docker load reads too: Docker >= 25 saves one, older engines are converted.
  "$TOOLS" "$FILES" oci-archive "$TMP/image.tar" "$STAGE/fakeplugin-$VERSION-linux-amd64.oci.tar"
fi

(cd "$STAGE" && find . -maxdepth 1 -type f -printf '%f\0' | LC_ALL=C sort -z | xargs -0 sha256sum >"$TMP/SHA256SUMS")
mv "$TMP/SHA256SUMS" "$STAGE/SHA256SUMS"
mv "$STAGE"/* "$OUT"/
say "done: $OUT"
(cd "$OUT" && ls -l)
