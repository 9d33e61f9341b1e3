# Shared by the hack/kind scripts (sourced, not run). Versions, cache paths, progress output.
#
# Environment (all optional):
#   FAKEPLUGIN_CACHE    cache root (default ~/.cache/fakeplugin); kind's things live in $FAKEPLUGIN_CACHE/kind
#   K8S_VERSION         Kubernetes version of the node image (default: fakeplugin/cluster/versions.py's)
#   KIND_VERSION        sigs.k8s.io/kind version (default below; CI's kind workflow installs the same)
#   DEBIAN_SUITE        Debian release of the local base images (default bookworm)
#   DEBIAN_MIRROR       Debian mirror for debootstrap (default http://deb.debian.org/debian)

KIND_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
K8S_VERSION="${K8S_VERSION:-$(python3 "$KIND_REPO/fakeplugin/cluster/versions.py" default)}"
KIND_VERSION="${KIND_VERSION:-v0.33.0}"
CONTAINERD_VERSION="${CONTAINERD_VERSION:-v2.3.7}"
CRICTL_VERSION="${CRICTL_VERSION:-v1.37.0}"
CNI_PLUGINS_VERSION="${CNI_PLUGINS_VERSION:-v1.9.1}"
# The last served release of containernetworking/plugins that still holds the flannel CNI plugin
# (v1.0 moved it to flannel-io/cni-plugin, which the module proxy does not serve).
CNI_FLANNEL_VERSION="${CNI_FLANNEL_VERSION:-v0.9.1}"
FLANNEL_VERSION="${FLANNEL_VERSION:-v0.28.10}"
# Empty: the CoreDNS that kubeadm of $K8S_VERSION deploys (`kubeadm config images list`; v1.13.1 for 1.35,
# v1.14.6 for 1.37: cmd/kubeadm/app/constants/constants.go CoreDNSVersion), read by build-binaries.sh.
COREDNS_VERSION="${COREDNS_VERSION:-}"
DEBIAN_SUITE="${DEBIAN_SUITE:-bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

FAKEPLUGIN_CACHE="${FAKEPLUGIN_CACHE:-$HOME/.cache/fakeplugin}"
KIND_CACHE="$FAKEPLUGIN_CACHE/kind"
K8S_BIN="$FAKEPLUGIN_CACHE/k8s/$K8S_VERSION/bin"
# Our own dockerd, when hack/kind/dockerd.sh started one (see there).
KIND_DOCKER_RUN="${KIND_DOCKER_RUN:-/run/fakeplugin-kind}"
KIND_DOCKER_HOST="unix://$KIND_DOCKER_RUN/docker.sock"

say() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }

# Use our dockerd when it runs and the caller did not pick a docker daemon.
use_our_docker() {
  if [[ -z "${DOCKER_HOST:-}" && -S "$KIND_DOCKER_RUN/docker.sock" ]]; then
    export DOCKER_HOST="$KIND_DOCKER_HOST"
  fi
}

# A short hash of files (their content) and strings: cache keys for images.
content_key() {
  local item
  for item in "$@"; do
    # A file's content, not its path: a clone elsewhere (CI) finds the same images.
    if [[ -f "$item" ]]; then sha256sum <"$item"; else printf '%s\n' "$item"; fi
  done | sha256sum | cut -c1-12
}

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }
