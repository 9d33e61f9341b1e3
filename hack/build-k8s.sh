#!/usr/bin/env bash
# Build pinned, real Kubernetes components (and etcd, helm, our fake CRI) from Go modules
# into a cache outside the repository. Idempotent: binaries already built are kept.
#
#   hack/build-k8s.sh [--only NAME[,NAME...]]
#
# Environment:
#   FAKEPLUGIN_CACHE   cache root (default ~/.cache/fakeplugin)
#   K8S_VERSION        Kubernetes version (default v1.35.4)
#   ETCD_VERSION       etcd version (default v3.6.16)
#   HELM_VERSION       helm version (default v3.19.0)
#   CDI_VERSION        tags.cncf.io/container-device-interface version (default v1.1.0)
set -euo pipefail

K8S_VERSION="${K8S_VERSION:-v1.35.4}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
HELM_VERSION="${HELM_VERSION:-v3.19.0}"
CDI_VERSION="${CDI_VERSION:-v1.1.0}"
CACHE="${FAKEPLUGIN_CACHE:-$HOME/.cache/fakeplugin}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="$CACHE/k8s/$K8S_VERSION/bin"
WORK="$CACHE/k8s/$K8S_VERSION/src"
ONLY="${1:-}"
[[ "$ONLY" == "--only" ]] && ONLY=",${2:-}," || ONLY=""

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
mkdir -p "$BIN" "$WORK"

say() { printf '[build-k8s %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
want() { [[ -z "$ONLY" || "$ONLY" == *",$1,"* ]]; }
have() { [[ -x "$BIN/$1" ]]; }

build_kube() {
  local names=() n
  for n in kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl fakecri; do
    want "$n" && ! have "$n" && names+=("$n")
  done
  [[ ${#names[@]} -eq 0 ]] && { say "kubernetes $K8S_VERSION: cached in $BIN"; return; }
  local mod="$WORK/kube"
  mkdir -p "$mod"
  cd "$mod"
  if [[ ! -f go.mod ]]; then
    say "kubernetes $K8S_VERSION: preparing wrapper module in $mod"
    go mod init local/k8sbin >/dev/null 2>&1
    go mod edit -go=1.25.0 -godebug=default=go1.25
    go mod edit -require="k8s.io/kubernetes@$K8S_VERSION"
    local kdir minor="v0.${K8S_VERSION#v1.}"
    say "downloading k8s.io/kubernetes@$K8S_VERSION (module proxy)"
    kdir="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    # Every staging module the kubernetes go.mod replaces with ./staging/... gets the matching v0.X.Y.
    for m in $(grep -oE '^\s*k8s.io/[a-z0-9-]+ => ./staging' "$kdir/go.mod" | awk '{print $1}'); do
      go mod edit -replace="$m=$m@$minor"
    done
  fi
  if want fakecri; then mkdir -p fakecri && cp "$REPO/hack/fakecri/main.go" fakecri/main.go; fi
  say "resolving dependencies (first run downloads several hundred MB)"
  go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-scheduler@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kube-controller-manager@$K8S_VERSION" "k8s.io/kubernetes/cmd/kubelet@$K8S_VERSION" \
    "k8s.io/kubernetes/cmd/kubectl@$K8S_VERSION" "tags.cncf.io/container-device-interface@$CDI_VERSION" >/dev/null 2>&1 \
    || go get "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" "tags.cncf.io/container-device-interface@$CDI_VERSION"
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
  ld+=" -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
  for n in "${names[@]}"; do
    local pkg="k8s.io/kubernetes/cmd/$n"
    [[ "$n" == fakecri ]] && { go mod tidy >/dev/null 2>&1 || true; pkg="./fakecri"; }
    say "building $n (a cold build takes minutes on 2 cores)"
    local t0=$SECONDS
    go build -trimpath -ldflags "$ld" -o "$BIN/$n.tmp" "$pkg"
    mv "$BIN/$n.tmp" "$BIN/$n"
    say "built $n in $((SECONDS - t0)) s"
  done
}

build_etcd() {
  want etcd || return 0
  have etcd && { say "etcd: cached"; return; }
  local mod="$WORK/etcd"
  mkdir -p "$mod" && cd "$mod"
  [[ -f go.mod ]] || go mod init local/etcdbin >/dev/null 2>&1
  say "building etcd $ETCD_VERSION"
  go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >/dev/null 2>&1 || go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.tmp" go.etcd.io/etcd/server/v3
  mv "$BIN/etcd.tmp" "$BIN/etcd"
}

build_helm() {
  want helm || return 0
  have helm && { say "helm: cached"; return; }
  local mod="$WORK/helm"
  mkdir -p "$mod" && cd "$mod"
  [[ -f go.mod ]] || go mod init local/helmbin >/dev/null 2>&1
  say "building helm $HELM_VERSION"
  go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >/dev/null 2>&1 || go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" -o "$BIN/helm.tmp" helm.sh/helm/v3/cmd/helm
  mv "$BIN/helm.tmp" "$BIN/helm"
}

T0=$SECONDS
build_etcd
build_kube
build_helm
say "done in $((SECONDS - T0)) s; binaries in $BIN"
echo "$BIN"
