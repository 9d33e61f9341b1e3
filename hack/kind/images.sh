#!/usr/bin/env bash
# Build, from local sources only (Debian's packages, Go modules, this repository), every image the
# kind path needs on a machine that reaches no image registry. Cached and idempotent: an image whose
# inputs did not change is kept (keys in image labels and tags). Progress on stderr; on stdout, lines
# to source or pass on (KEY=VALUE):
#   PYTHON_IMAGE=...      Python base for our Dockerfile (docker build --build-arg PYTHON_IMAGE=...)
#   BUSYBOX_IMAGE=...     a minimal workload image (busybox alone)
#   KIND_NODE_IMAGE=...   kind node image for Kubernetes $K8S_VERSION (kind create cluster --image ...)
#
#   hack/kind/images.sh [--bases]     (--bases: only the Debian, Python and iptables base images)
#
# Images (in the Docker engine of DOCKER_HOST, or ours from hack/kind/dockerd.sh):
#   fakeplugin.local/debian:$DEBIAN_SUITE     debootstrap --variant=minbase + docker import
#   fakeplugin.local/python:...               Debian's python3 + this machine's CA bundle
#   fakeplugin.local/debian-iptables:...      base of kube-proxy and flanneld
#   fakeplugin.local/busybox:...              busybox alone: a minimal workload image for the e2e
#   registry.k8s.io/{kube-apiserver,kube-controller-manager,kube-scheduler,kube-proxy}:$K8S_VERSION,
#   registry.k8s.io/{etcd,pause,coredns/coredns}:<as `kubeadm config images list` prints them>,
#   fakeplugin.local/flannel:$FLANNEL_VERSION  each one binary from hack/kind/build-binaries.sh
#   fakeplugin.local/kind-node:$K8S_VERSION-<key>  kind's node layout, the images above preloaded
# Versions and cache: hack/kind/lib.sh. Needs root (debootstrap), docker, go.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
use_our_docker
docker info >/dev/null 2>&1 || die "no Docker engine answers (start one: hack/kind/dockerd.sh start)"

T0=$SECONDS
BASES_ONLY=0
[[ "${1:-}" == --bases ]] && BASES_ONLY=1
LOCAL=fakeplugin.local
DEBIAN_IMAGE="$LOCAL/debian:$DEBIAN_SUITE"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/fakeplugin-kind-images.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

label_of() { docker image inspect -f "{{index .Config.Labels \"fakeplugin.kind.key\"}}" "$1" 2>/dev/null || true; }
build() {  # build TAG CONTEXT [docker build args...]: quiet unless it fails
  local tag="$1" context="$2" t0=$SECONDS log="$WORK/build.log"
  shift 2
  if ! nice -n 10 docker build --network host -q -t "$tag" "$@" "$context" >"$log" 2>&1; then
    cat "$log" >&2
    die "docker build of $tag failed"
  fi
  say "built $tag in $((SECONDS - t0)) s"
}

# --- Debian base: debootstrap from Debian's packages, then docker import.
if image_exists "$DEBIAN_IMAGE"; then
  say "$DEBIAN_IMAGE: cached"
else
  command -v debootstrap >/dev/null || {
    say "installing debootstrap (apt-get)"
    apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  say "$DEBIAN_IMAGE: debootstrap --variant=minbase $DEBIAN_SUITE from $DEBIAN_MIRROR (about a minute)"
  t0=$SECONDS
  nice -n 10 debootstrap --variant=minbase "$DEBIAN_SUITE" "$WORK/rootfs" "$DEBIAN_MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -30 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
  rm -rf "$WORK/rootfs/var/lib/apt/lists/"* "$WORK/rootfs/var/cache/apt/archives/"*.deb
  tar -C "$WORK/rootfs" -c . | docker import -c 'CMD ["/bin/bash"]' - "$DEBIAN_IMAGE" >/dev/null
  rm -rf "$WORK/rootfs"
  say "$DEBIAN_IMAGE: imported in $((SECONDS - t0)) s"
fi

# --- Python base for our Dockerfile, trusting this machine's CA bundle.
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
[[ -f "$CA_BUNDLE" ]] || die "no CA bundle at $CA_BUNDLE (set CA_BUNDLE)"
PYTHON_IMAGE="$LOCAL/python:3-$DEBIAN_SUITE-$(content_key "$KIND_REPO/hack/kind/images/python.Dockerfile" "$CA_BUNDLE")"
if image_exists "$PYTHON_IMAGE"; then
  say "$PYTHON_IMAGE: cached"
else
  mkdir -p "$WORK/python" && cp "$CA_BUNDLE" "$WORK/python/ca-certificates.crt"
  build "$PYTHON_IMAGE" "$WORK/python" -f "$KIND_REPO/hack/kind/images/python.Dockerfile" \
    --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE"
fi

IPTABLES_IMAGE="$LOCAL/debian-iptables:$DEBIAN_SUITE-$(content_key "$KIND_REPO/hack/kind/images/iptables.Dockerfile")"
if image_exists "$IPTABLES_IMAGE"; then
  say "$IPTABLES_IMAGE: cached"
else
  build "$IPTABLES_IMAGE" "$KIND_REPO/hack/kind/images" -f "$KIND_REPO/hack/kind/images/iptables.Dockerfile" \
    --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE"
fi

BUSYBOX_IMAGE="$LOCAL/busybox:$(content_key "$KIND_REPO/hack/kind/images/busybox.Dockerfile")"
if image_exists "$BUSYBOX_IMAGE"; then
  say "$BUSYBOX_IMAGE: cached"
else
  build "$BUSYBOX_IMAGE" "$KIND_REPO/hack/kind/images" -f "$KIND_REPO/hack/kind/images/busybox.Dockerfile" \
    --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE"
fi

if ((BASES_ONLY)); then
  echo "PYTHON_IMAGE=$PYTHON_IMAGE"
  echo "BUSYBOX_IMAGE=$BUSYBOX_IMAGE"
  exit 0
fi
BIN="$("$KIND_REPO/hack/kind/build-binaries.sh")"

# --- One-binary images. binary_image TAG BASE ENTRYPOINT VERSION BINARY...: the binaries in
# /usr/local/bin (ENTRYPOINT, when not empty, also at / as upstream images have it), rebuilt when a
# binary or the base changed.
binary_image() {
  local tag="$1" base="$2" entry="$3" version="$4" key ctx="$WORK/img" b
  shift 4
  key="$(content_key "$@" "$base" "$entry" "$(docker image inspect -f '{{.Id}}' "$base" 2>/dev/null || echo scratch)")"
  if [[ "$(label_of "$tag")" == "$key" ]]; then say "$tag: cached"; return; fi
  rm -rf "$ctx" && mkdir -p "$ctx/bin"
  for b in "$@"; do cp "$b" "$ctx/bin/"; done
  {
    echo "FROM $base"
    echo "COPY bin/ /usr/local/bin/"
    [[ -n "$entry" ]] && echo "COPY bin/$entry /$entry" && echo "ENTRYPOINT [\"/$entry\"]"
    echo "ENV PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    echo "LABEL fakeplugin.kind.key=$key org.opencontainers.image.version=$version \\"
    echo "      org.opencontainers.image.description=\"built from its Go module by fakeplugin's hack/kind/images.sh\""
  } >"$ctx/Dockerfile"
  build "$tag" "$ctx"
}

KUBEADM="$K8S_BIN/kubeadm"
mapfile -t KUBEADM_IMAGES < <("$KUBEADM" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null)
image_named() { printf '%s\n' "${KUBEADM_IMAGES[@]}" | grep -E "^registry.k8s.io/$1:" || die "kubeadm lists no $1 image"; }
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  binary_image "$(image_named "$c")" scratch "" "$K8S_VERSION" "$K8S_BIN/$c"
done
binary_image "$(image_named kube-proxy)" "$IPTABLES_IMAGE" "" "$K8S_VERSION" "$K8S_BIN/kube-proxy"
# etcd: the cached etcd of hack/build-k8s.sh under the tag kubeadm deploys (label: its real version).
binary_image "$(image_named etcd)" scratch "" "$("$K8S_BIN/etcd" --version | sed -n 's/^etcd Version: /v/p')" "$K8S_BIN/etcd"
PAUSE_IMAGE="$(image_named pause)"
binary_image "$PAUSE_IMAGE" scratch pause "$(cat "$BIN/.pause.version")" "$BIN/pause"
binary_image "$(image_named coredns/coredns)" scratch coredns "$(cat "$BIN/.coredns.version")" "$BIN/coredns"
FLANNEL_IMAGE="$LOCAL/flannel:$FLANNEL_VERSION"
binary_image "$FLANNEL_IMAGE" "$IPTABLES_IMAGE" "" "$FLANNEL_VERSION" "$BIN/flanneld"
PRELOAD=("${KUBEADM_IMAGES[@]}" "$FLANNEL_IMAGE")

# --- The node image: kind's base layout (from its Go module) + our binaries + overlay, then the
# images above imported into its containerd as kind's own node images carry them.
KIND_SRC="$(cd "$KIND_REPO/hack/kind/pause" && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/kind@$KIND_VERSION" \
  | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$KIND_SRC/images/base/files" ]] || die "kind $KIND_VERSION source not found in the Go module cache"
image_ids=()
for i in "${PRELOAD[@]}"; do image_ids+=("$(docker image inspect -f '{{.Id}}' "$i")"); done
mapfile -t overlay_files < <(find "$KIND_REPO/hack/kind/node/overlay" -type f | sort)
binary_versions=()
for b in containerd ctr containerd-shim-runc-v2 crictl cni-bridge cni-host-local cni-loopback cni-portmap cni-ptp cni-flannel; do
  binary_versions+=("$BIN/.$b.version")
done
NODE_KEY="$(content_key "$KIND_VERSION" "$K8S_VERSION" "$DEBIAN_IMAGE" "$(docker image inspect -f '{{.Id}}' "$DEBIAN_IMAGE")" \
  "${image_ids[@]}" "$KIND_REPO/hack/kind/node/Dockerfile" "$KIND_REPO/hack/kind/node/flannel.yaml" \
  "${overlay_files[@]}" "${binary_versions[@]}" "$K8S_BIN/kubeadm" "$K8S_BIN/kubelet" "$K8S_BIN/kubectl")"
KIND_NODE_IMAGE="$LOCAL/kind-node:$K8S_VERSION-$NODE_KEY"
if image_exists "$KIND_NODE_IMAGE"; then
  say "$KIND_NODE_IMAGE: cached"
else
  ctx="$WORK/node"
  mkdir -p "$ctx/bin" "$ctx/k8s" "$ctx/cni"
  cp -r "$KIND_SRC/images/base/files" "$ctx/kind-files" && chmod -R u+w "$ctx/kind-files"
  rm -rf "$ctx/kind-files/LICENSES"
  # containerd without CAP_SYS_RESOURCE cannot give containers a lower OOM score than its own: ask it
  # not to (restrict_oom_score_adj); the sandbox image is the pause image kubeadm lists.
  sed -i -e 's/^\(\s*restrict_oom_score_adj\s*=\s*\)false/\1true/' \
    -e "s#^\(\s*sandbox_image\s*=\s*\).*#\1\"$PAUSE_IMAGE\"#" "$ctx/kind-files/etc/containerd/config.toml"
  # containerd's unit asks for OOMScoreAdjust=-999, which also needs CAP_SYS_RESOURCE.
  sed -i '/^OOMScoreAdjust=/d' "$ctx/kind-files/etc/systemd/system/containerd.service"
  cp -r "$KIND_REPO/hack/kind/node/overlay" "$ctx/overlay"
  mkdir -p "$ctx/overlay/kind/manifests"
  cp "$KIND_REPO/hack/kind/node/flannel.yaml" "$ctx/overlay/kind/manifests/default-cni.yaml"
  sed -i "s#@FLANNEL_IMAGE@#$FLANNEL_IMAGE#" "$ctx/overlay/kind/manifests/default-cni.yaml"
  echo "$K8S_VERSION" >"$ctx/overlay/kind/version"
  cp "$BIN"/{containerd,ctr,containerd-shim-runc-v2,crictl} "$ctx/bin/"
  cp "$K8S_BIN"/{kubeadm,kubelet,kubectl} "$ctx/k8s/"
  for p in bridge host-local loopback portmap ptp flannel; do cp "$BIN/cni-$p" "$ctx/cni/$p"; done
  base="$LOCAL/kind-node-base:$K8S_VERSION-$NODE_KEY"
  build "$base" "$ctx" -f "$KIND_REPO/hack/kind/node/Dockerfile" --build-arg DEBIAN_IMAGE="$DEBIAN_IMAGE"

  say "importing ${#PRELOAD[@]} images into the node image's containerd"
  t0=$SECONDS
  c="fakeplugin-kind-node-build-$$"
  docker rm -f "$c" >/dev/null 2>&1 || true
  docker run -d --name "$c" --entrypoint sleep "$base" infinity >/dev/null
  docker exec -d "$c" sh -c 'containerd >/var/log/containerd-build.log 2>&1'
  until docker exec "$c" ctr version >/dev/null 2>&1; do sleep 1; done
  docker save "${PRELOAD[@]}" | docker exec -i "$c" ctr -n k8s.io images import --no-unpack --digests \
    --all-platforms --label=io.cri-containerd.pinned=pinned - >/dev/null
  docker exec "$c" ctr -n k8s.io images ls -q | sed 's/^/  /' >&2
  docker exec "$c" sh -c 'kill $(pidof containerd); while pidof containerd >/dev/null; do sleep 0.2; done; rm -f /var/log/containerd-build.log'
  docker stop -t 1 "$c" >/dev/null
  docker commit "$c" "$base-imported" >/dev/null
  docker rm "$c" >/dev/null
  # docker commit keeps `sleep` as entrypoint and cannot set STOPSIGNAL (docker 20.10): a
  # metadata-only build sets both as the node Dockerfile has them.
  mkdir -p "$WORK/meta"
  printf 'FROM %s\nENV container=docker\nSTOPSIGNAL SIGRTMIN+3\nENTRYPOINT ["/usr/local/bin/fakeplugin-node-entrypoint", "/usr/local/bin/entrypoint", "/sbin/init"]\nCMD []\n' \
    "$base-imported" >"$WORK/meta/Dockerfile"
  build "$KIND_NODE_IMAGE" "$WORK/meta"
  docker rmi "$base-imported" "$base" >/dev/null
  say "$KIND_NODE_IMAGE: images imported in $((SECONDS - t0)) s"
fi

say "done in $((SECONDS - T0)) s"
echo "PYTHON_IMAGE=$PYTHON_IMAGE"
echo "BUSYBOX_IMAGE=$BUSYBOX_IMAGE"
echo "KIND_NODE_IMAGE=$KIND_NODE_IMAGE"
