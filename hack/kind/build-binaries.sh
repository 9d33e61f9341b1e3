#!/usr/bin/env bash
# Build the Go binaries a kind node image needs, beyond the Kubernetes components of
# hack/build-k8s.sh, from their Go modules (CGO off, static) into a cache outside the repository.
# Idempotent: a binary already built for its version is kept. Prints the binary directory on stdout.
#
#   hack/kind/build-binaries.sh
#
# Builds: kind, containerd + ctr + containerd-shim-runc-v2, crictl, CNI plugins (bridge, host-local,
# loopback, portmap, ptp, flannel), flanneld, coredns, pause (ours, hack/kind/pause), and with
# hack/build-k8s.sh: kubeadm, kube-proxy and the other Kubernetes components. Versions: hack/kind/lib.sh.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }

command -v go >/dev/null || die "go not found in PATH; install Go >= 1.25"
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
BIN="$KIND_CACHE/bin"
mkdir -p "$BIN"

quiet() {
  local out
  out="$("$@" 2>&1)" || { printf '%s\n' "$out" >&2; die "$* failed"; }
}

# install NAME VERSION PACKAGE [GO FLAGS...]: `go install PACKAGE@VERSION` into $BIN/NAME, kept per
# version (a stamp file), renamed into place so a binary is whole or absent.
install() {
  local name="$1" version="$2" pkg="$3" t0=$SECONDS tmp
  shift 3
  if [[ -x "$BIN/$name" && "$(cat "$BIN/.$name.version" 2>/dev/null)" == "$version" ]]; then
    say "$name $version: cached"
    return
  fi
  say "$name $version: building $pkg"
  tmp="$(mktemp -d "$BIN/.build.XXXXXX")"
  GOBIN="$tmp" nice -n 10 go install -trimpath -ldflags "-s -w" "$@" "$pkg@$version" \
    || { rm -rf "$tmp"; die "go install $pkg@$version failed"; }
  mv "$tmp/$(basename "$pkg")" "$BIN/$name"
  rm -rf "$tmp"
  echo "$version" >"$BIN/.$name.version"
  say "$name $version: built in $((SECONDS - t0)) s"
}

# flanneld: built from a copy of its module with two backends compiled out, both unused here (the node
# image runs host-gw): tencentvpc, whose SDK module (tencentcloud-sdk-go/tencentcloud/vpc) the module
# proxy does not serve, and udp, which needs cgo.
build_flanneld() {
  local version="$FLANNEL_VERSION" src="$KIND_CACHE/src/flannel-$FLANNEL_VERSION" dir t0=$SECONDS
  if [[ -x "$BIN/flanneld" && "$(cat "$BIN/.flanneld.version" 2>/dev/null)" == "$version" ]]; then
    say "flanneld $version: cached"
    return
  fi
  say "flanneld $version: building github.com/flannel-io/flannel (without the tencentvpc and udp backends)"
  dir="$(go mod download -json "github.com/flannel-io/flannel@$version" | sed -n 's/^\s*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$dir" ]] || die "go mod download github.com/flannel-io/flannel@$version failed"
  rm -rf "$src" && mkdir -p "$(dirname "$src")" && cp -r "$dir" "$src" && chmod -R u+w "$src"
  sed -i -e '\#_ "github.com/flannel-io/flannel/pkg/backend/tencentvpc"#d' \
    -e '\#_ "github.com/flannel-io/flannel/pkg/backend/udp"#d' "$src/main.go"
  rm -rf "$src/pkg/backend/tencentvpc"
  (cd "$src" && go mod edit -droprequire github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/vpc \
    && GOFLAGS=-mod=mod nice -n 10 go build -trimpath \
      -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$version" -o "$BIN/.flanneld.tmp" .) \
    || die "building flanneld $version failed"
  mv "$BIN/.flanneld.tmp" "$BIN/flanneld"
  echo "$version" >"$BIN/.flanneld.version"
  say "flanneld $version: built in $((SECONDS - t0)) s"
}

T0=$SECONDS
install kind "$KIND_VERSION" sigs.k8s.io/kind
for c in containerd ctr containerd-shim-runc-v2; do
  install "$c" "$CONTAINERD_VERSION" "github.com/containerd/containerd/v2/cmd/$c" \
    -tags "no_aufs no_zfs no_btrfs no_devmapper"
done
install crictl "$CRICTL_VERSION" sigs.k8s.io/cri-tools/cmd/crictl
for p in ipam/host-local main/bridge main/loopback main/ptp meta/portmap; do
  install "cni-$(basename "$p")" "$CNI_PLUGINS_VERSION" "github.com/containernetworking/plugins/plugins/$p"
done
install cni-flannel "$CNI_FLANNEL_VERSION" github.com/containernetworking/plugins/plugins/meta/flannel
build_flanneld

say "kubeadm, kube-proxy and the Kubernetes components: hack/build-k8s.sh"
"$KIND_REPO/hack/build-k8s.sh" >/dev/null
"$KIND_REPO/hack/build-k8s.sh" --only kubeadm,kube-proxy >/dev/null
if [[ -z "$COREDNS_VERSION" ]]; then
  COREDNS_VERSION="$("$K8S_BIN/kubeadm" config images list --kubernetes-version "$K8S_VERSION" 2>/dev/null \
    | sed -n 's#^registry.k8s.io/coredns/coredns:##p')"
  [[ -n "$COREDNS_VERSION" ]] || die "kubeadm $K8S_VERSION lists no coredns image (set COREDNS_VERSION)"
fi
install coredns "$COREDNS_VERSION" github.com/coredns/coredns

pause_key="$(content_key "$KIND_REPO/hack/kind/pause/main.go" "$KIND_REPO/hack/kind/pause/go.mod")"
if [[ -x "$BIN/pause" && "$(cat "$BIN/.pause.version" 2>/dev/null)" == "$pause_key" ]]; then
  say "pause: cached"
else
  say "pause: building hack/kind/pause"
  (cd "$KIND_REPO/hack/kind/pause" && go build -trimpath -ldflags "-s -w" -o "$BIN/.pause.tmp" .)
  mv "$BIN/.pause.tmp" "$BIN/pause"
  echo "$pause_key" >"$BIN/.pause.version"
fi

say "done in $((SECONDS - T0)) s; binaries in $BIN and $K8S_BIN"
echo "$BIN"
