#!/usr/bin/env bash
# An upstream tool's image for the kind path, from the binary hack/build-k8s.sh built from the tool's Go
# module (no registry: FROM the local Debian base of hack/kind/images.sh). Cached: kept while the binary,
# the Dockerfile and the base are the same (key in the image's label). On stdout, one line:
#   KUEUE_IMAGE=fakeplugin.local/kueue:$VERSION    (hack/build-k8s.sh --only kueue)
#   KWOK_IMAGE=fakeplugin.local/kwok:$VERSION      (hack/build-k8s.sh --only kwok)
#   PROMETHEUS_IMAGE=fakeplugin.local/prometheus:$VERSION   (built here from its Go module, cached)
#
#   hack/kind/tool-image.sh kueue [VERSION]   (default: $FAKEPLUGIN_KUEUE_VERSION, else the pinned one)
#   hack/kind/tool-image.sh kwok [VERSION]    (default: $KWOK_VERSION, else v0.8.0, build-k8s.sh's)
#   hack/kind/tool-image.sh prometheus [VERSION]  (default: $PROMETHEUS_VERSION, else v0.316.0; the binary
#                                              in $FAKEPLUGIN_CACHE/prometheus/VERSION)
#
# Load it with `hack/kind/kind load docker-image`. Kueue's chart runs it with
# controllerManager.manager.image.{repository,tag} (docs/kueue-kind.md); ours runs kwok's with
# fleet.kwok.image.{repository,tag} (docs/chart-fleet.md); both with pullPolicy IfNotPresent.
# tests/kind/test_operator_prometheus.py runs Prometheus's (docs/prometheus.md).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ "${1:-}" == -h || "${1:-}" == --help || -z "${1:-}" ]] && { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
use_our_docker
docker info >/dev/null 2>&1 || die "no Docker engine answers (start one: hack/kind/dockerd.sh start)"

TOOL="$1"
case "$TOOL" in
  kueue)
    VERSION="${2:-${FAKEPLUGIN_KUEUE_VERSION:-$(python3 "$KIND_REPO/fakeplugin/cluster/versions.py" pins "$K8S_VERSION" \
      | sed -n 's/^KUEUE_VERSION=//p')}}"
    BINARY="$FAKEPLUGIN_CACHE/kueue/$VERSION/kueue" ;;
  kwok)
    VERSION="${2:-${KWOK_VERSION:-v0.8.0}}"
    BINARY="$FAKEPLUGIN_CACHE/kwok/$VERSION/kwok" ;;
  prometheus)
    # Built here from its Go module with Kubernetes service discovery alone (Debian's package has none:
    # its config refuses kubernetes_sd_configs); the build tags are the module's plugins/*.go (v0.316.0 is
    # Prometheus 3.16.0). No web UI (docs/prometheus.md): the HTTP API is what the tests read.
    VERSION="${2:-${PROMETHEUS_VERSION:-v0.316.0}}"
    BINARY="$FAKEPLUGIN_CACHE/prometheus/$VERSION/prometheus"
    if [[ ! -x "$BINARY" ]]; then
      say "prometheus $VERSION: building from its Go module (minutes when cold)"
      src="$(GOFLAGS=-mod=mod go mod download -json "github.com/prometheus/prometheus@$VERSION" \
        | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
      [[ -d "$src/cmd/prometheus" ]] || die "github.com/prometheus/prometheus@$VERSION not in the Go module cache"
      mkdir -p "${BINARY%/*}"
      (cd "$src" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 nice -n 10 go build -ldflags "-s -w" \
        -tags remove_all_sd,enable_kubernetes_sd -o "$BINARY.tmp" ./cmd/prometheus) || die "go build of prometheus failed"
      mv "$BINARY.tmp" "$BINARY"
    fi ;;
  *) die "unknown tool '$TOOL': kueue, kwok or prometheus" ;;
esac
[[ -x "$BINARY" ]] || die "no $TOOL $VERSION at $BINARY (build it: hack/build-k8s.sh --only $TOOL)"
DEBIAN_IMAGE="fakeplugin.local/debian:$DEBIAN_SUITE"
image_exists "$DEBIAN_IMAGE" || die "no $DEBIAN_IMAGE (build it: hack/kind/images.sh --bases)"
DOCKERFILE="$KIND_REPO/hack/kind/images/$TOOL.Dockerfile"
IMAGE="fakeplugin.local/$TOOL:$VERSION"

key="$(content_key "$BINARY" "$DOCKERFILE" "$(docker image inspect -f '{{.Id}}' "$DEBIAN_IMAGE")")"
if [[ "$(docker image inspect -f '{{index .Config.Labels "fakeplugin.kind.key"}}' "$IMAGE" 2>/dev/null)" == "$key" ]]; then
  say "$IMAGE: cached"
else
  t0=$SECONDS
  ctx="$(mktemp -d "${TMPDIR:-/tmp}/fakeplugin-$TOOL-image.XXXXXX")"
  trap 'rm -rf "$ctx"' EXIT
  cp "$BINARY" "$ctx/$TOOL"
  log="$ctx/build.log"
  nice -n 10 docker build --network none -q -t "$IMAGE" -f "$DOCKERFILE" --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" \
    --label "fakeplugin.kind.key=$key" --label "org.opencontainers.image.version=$VERSION" "$ctx" >"$log" 2>&1 \
    || { cat "$log" >&2; die "docker build of $IMAGE failed"; }
  say "built $IMAGE in $((SECONDS - t0)) s"
fi
echo "${TOOL^^}_IMAGE=$IMAGE"
