#!/usr/bin/env bash
# Kueue's manager image for the kind path, from the binary `hack/build-k8s.sh --only kueue` built from
# Kueue's Go module (no registry: FROM the local Debian base of hack/kind/images.sh). Cached: kept while
# the binary, the Dockerfile and the base are the same (key in the image's label). On stdout:
#   KUEUE_IMAGE=fakeplugin.local/kueue:$KUEUE_VERSION
#
#   hack/kind/kueue-image.sh [KUEUE_VERSION]    (default: $FAKEPLUGIN_KUEUE_VERSION, else the pinned one)
#
# Load it with `hack/kind/kind load docker-image`; Kueue's chart runs it with
# controllerManager.manager.image.{repository,tag} and pullPolicy IfNotPresent (docs/kueue-kind.md).
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
use_our_docker
docker info >/dev/null 2>&1 || die "no Docker engine answers (start one: hack/kind/dockerd.sh start)"

KUEUE_VERSION="${1:-${FAKEPLUGIN_KUEUE_VERSION:-$(python3 "$KIND_REPO/fakeplugin/cluster/versions.py" pins "$K8S_VERSION" \
  | sed -n 's/^KUEUE_VERSION=//p')}}"
BINARY="$FAKEPLUGIN_CACHE/kueue/$KUEUE_VERSION/kueue"
[[ -x "$BINARY" ]] || die "no Kueue $KUEUE_VERSION at $BINARY (build it: hack/build-k8s.sh --only kueue)"
DEBIAN_IMAGE="fakeplugin.local/debian:$DEBIAN_SUITE"
image_exists "$DEBIAN_IMAGE" || die "no $DEBIAN_IMAGE (build it: hack/kind/images.sh --bases)"
DOCKERFILE="$KIND_REPO/hack/kind/images/kueue.Dockerfile"
IMAGE="fakeplugin.local/kueue:$KUEUE_VERSION"

key="$(content_key "$BINARY" "$DOCKERFILE" "$(docker image inspect -f '{{.Id}}' "$DEBIAN_IMAGE")")"
if [[ "$(docker image inspect -f '{{index .Config.Labels "fakeplugin.kind.key"}}' "$IMAGE" 2>/dev/null)" == "$key" ]]; then
  say "$IMAGE: cached"
else
  t0=$SECONDS
  ctx="$(mktemp -d "${TMPDIR:-/tmp}/fakeplugin-kueue-image.XXXXXX")"
  trap 'rm -rf "$ctx"' EXIT
  cp "$BINARY" "$ctx/manager"
  log="$ctx/build.log"
  nice -n 10 docker build --network none -q -t "$IMAGE" -f "$DOCKERFILE" --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE" \
    --label "fakeplugin.kind.key=$key" --label "org.opencontainers.image.version=$KUEUE_VERSION" "$ctx" >"$log" 2>&1 \
    || { cat "$log" >&2; die "docker build of $IMAGE failed"; }
  say "built $IMAGE in $((SECONDS - t0)) s"
fi
echo "KUEUE_IMAGE=$IMAGE"
