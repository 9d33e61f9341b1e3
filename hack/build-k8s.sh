#!/usr/bin/env bash
# Build pinned, real Kubernetes components (and etcd, helm, our fake CRI) from Go modules into a
# cache outside the repository. Idempotent: binaries already built are kept (fakecri is rebuilt when
# hack/fakecri/main.go changed). Needs Go (>= 1.24 for 1.34, 1.25 for 1.35, 1.26 for 1.36 and 1.37) and the
# Go module proxy; nothing is vendored. 1.38 wants Go 1.27: when the installed Go is older than a minor's,
# every go command of the build runs with GOTOOLCHAIN=$K8S_GOTOOLCHAIN, fetched from the module proxy.
#
#   hack/build-k8s.sh [--only NAME[,NAME...]]
#
# NAMEs: etcd kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl fakecri helm kwok
# Optional NAMEs, built only when named in --only (never by default, so CI does not pay for them):
#   dra-test-driver  Kubernetes' own Go DRA test driver (upstream kubeletplugin helper), the
#                    anchor bench/prepare_vs_anchor.py measures us against (the floor)
#   dra-anchor       the bench's other Go anchors (bench/anchor/main.go on the same helper: the test
#                    driver plus a durable checkpoint, or plus NVIDIA's per-call work); source tree only;
#                    Kubernetes 1.37+ (its kubeletplugin helper asks for WatchHealthStatus)
#   kubeadm kube-proxy  for the kind node image (hack/kind/build-binaries.sh)
#   kueue            Kueue's manager (sigs.k8s.io/kueue), for `cluster up --with kueue`; with the
#                    module's CRDs, webhook manifests and chart beside it (docs/kueue.md)
#   karpenter        Karpenter's kwok provider with GPU instance types (hack/karpenter/main.go on
#                    sigs.k8s.io/karpenter), for `cluster up --with karpenter`; with the module's CRDs
#                    beside it (docs/karpenter.md). Karpenter's go.mod wants a newer Go than 1.26.8:
#                    this builds it with GOTOOLCHAIN=$KARPENTER_GOTOOLCHAIN, fetched by the go command
#                    from the module proxy like any module
#   actionlint       the GitHub Actions linter (github.com/rhysd/actionlint) the build tier runs on our
#                    workflows (tests/test_workflows.py), in $FAKEPLUGIN_CACHE/actionlint/$ACTIONLINT_VERSION/
# Prints progress on stderr and the binary directory on stdout.
#
# Environment:
#   FAKEPLUGIN_CACHE        cache root (default ~/.cache/fakeplugin); binaries in $FAKEPLUGIN_CACHE/k8s/$K8S_VERSION/bin
#   K8S_VERSION             Kubernetes version, any served 1.34.x-1.38.x (default: $FAKEPLUGIN_K8S_VERSION,
#                           else the table's default)
#   ETCD_VERSION            etcd version (default: the table's for that minor)
#   HELM_VERSION            helm version (default: the table's for that minor)
#   KWOK_VERSION            kwok version, the simulated nodes' engine, the same for every minor (default v0.8.0)
#   KUEUE_VERSION           Kueue version (default: the table's), the same for every minor
#   KEDA_VERSION            KEDA version (default: the table's), the same for every minor
#   KARPENTER_VERSION       Karpenter version (default: the table's), the same for every minor
#   KARPENTER_GOTOOLCHAIN   the Go toolchain Karpenter builds with (default: the table's, go1.27.3)
#   ACTIONLINT_VERSION      actionlint version (default: the table's)
#   K8S_GOTOOLCHAIN         the Go toolchain a minor newer than the installed Go builds with (default: the same)
#   CDI_VERSION             tags.cncf.io/container-device-interface version for fakecri (default v1.1.0)
# The etcd, helm and oldest Go of each Kubernetes minor come from one table, fakeplugin/cluster/versions.py
# (run here as `python3 versions.py pins VERSION`), which also holds each minor's gates and flags.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
# In a source tree this script is hack/ (the table: fakeplugin/cluster/); in an installed package it is
# fakeplugin/cluster/gosrc/hack/ (the table: two levels up).
for VERSIONS_PY in "$REPO/fakeplugin/cluster/versions.py" "$HERE/../../versions.py" ""; do
  [[ -f "$VERSIONS_PY" ]] && break
done
[[ -n "$VERSIONS_PY" ]] || { echo "build-k8s: fakeplugin/cluster/versions.py not found next to $HERE" >&2; exit 1; }
PINS="$(python3 "$VERSIONS_PY" pins "${K8S_VERSION:-${FAKEPLUGIN_K8S_VERSION:-}}")" || exit 1
pin() { sed -n "s/^$1=//p" <<<"$PINS"; }
K8S_VERSION="$(pin K8S_VERSION)"
ETCD_VERSION="${ETCD_VERSION:-$(pin ETCD_VERSION)}"
HELM_VERSION="${HELM_VERSION:-$(pin HELM_VERSION)}"
GO_MIN="$(pin GO_MIN)"
KUEUE_VERSION="${KUEUE_VERSION:-${FAKEPLUGIN_KUEUE_VERSION:-$(pin KUEUE_VERSION)}}"
KEDA_VERSION="${KEDA_VERSION:-$(pin KEDA_VERSION)}"
KARPENTER_VERSION="${KARPENTER_VERSION:-$(pin KARPENTER_VERSION)}"
KARPENTER_GOTOOLCHAIN="${KARPENTER_GOTOOLCHAIN:-$(pin GO_TOOLCHAIN)}"
K8S_GOTOOLCHAIN="${K8S_GOTOOLCHAIN:-$(pin GO_TOOLCHAIN)}"
ACTIONLINT_VERSION="${ACTIONLINT_VERSION:-$(pin ACTIONLINT_VERSION)}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"
CDI_VERSION="${CDI_VERSION:-v1.1.0}"
CACHE="${FAKEPLUGIN_CACHE:-$HOME/.cache/fakeplugin}"
BIN="$CACHE/k8s/$K8S_VERSION/bin"
WORK="$CACHE/k8s/$K8S_VERSION/src"
KUBE_NAMES=(kube-apiserver kube-scheduler kube-controller-manager kubelet kubectl)
ALL_NAMES=(etcd "${KUBE_NAMES[@]}" fakecri helm kwok)
OPTIONAL_NAMES=(dra-test-driver dra-anchor kubeadm kube-proxy kueue keda karpenter actionlint)

say() { printf '[build-k8s %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { say "error: $*"; exit 1; }

ONLY=""
case "${1:-}" in
  "") ;;
  --only) [[ -n "${2:-}" ]] || die "--only needs a comma-separated list of: ${ALL_NAMES[*]} ${OPTIONAL_NAMES[*]}"; ONLY=",$2," ;;
  -h|--help) sed -n '2,41p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) die "unknown argument $1 (usage: $0 [--only NAME[,NAME...]])" ;;
esac
for n in ${ONLY//,/ }; do
  [[ " ${ALL_NAMES[*]} ${OPTIONAL_NAMES[*]} " == *" $n "* ]] ||
    die "--only: unknown binary $n (known: ${ALL_NAMES[*]} ${OPTIONAL_NAMES[*]})"
done

command -v go >/dev/null || die "go not found in PATH; install Go >= $GO_MIN (https://go.dev/dl/)"
go_minor() { go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/'; }
go_new_enough() { local m; m="$(go_minor)"; [[ "$m" =~ ^[0-9]+$ && "$m" -ge "${GO_MIN#1.}" ]]; }
if ! go_new_enough; then
  # A minor newer than the installed Go (1.38: go 1.27.0): the approved newer toolchain, as Karpenter's.
  say "$(go env GOVERSION) is older than Go $GO_MIN: fetching Go toolchain $K8S_GOTOOLCHAIN (module proxy)"
  export GOTOOLCHAIN="$K8S_GOTOOLCHAIN"
  go version >/dev/null 2>&1 ||
    die "Kubernetes $K8S_VERSION needs Go >= $GO_MIN; the go command could not fetch $K8S_GOTOOLCHAIN (set K8S_GOTOOLCHAIN to one the Go module proxy serves): $(go version 2>&1 | tr -s '\n\t' '  ')"
  go_new_enough || die "$(go env GOVERSION) is too old: Kubernetes $K8S_VERSION needs Go >= $GO_MIN"
fi
say "Kubernetes $K8S_VERSION with etcd $ETCD_VERSION, helm $HELM_VERSION ($(go env GOVERSION))"

export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
mkdir -p "$BIN" "$WORK"

want() { [[ -z "$ONLY" || "$ONLY" == *",$1,"* ]]; }
named() { [[ "$ONLY" == *",$1,"* ]]; }  # optional binaries: only when --only names them
have() { [[ -x "$BIN/$1" ]]; }
fakecri_sum() { sha256sum "$REPO/hack/fakecri/main.go" | cut -d' ' -f1; }
fakecri_fresh() { have fakecri && [[ "$(cat "$BIN/fakecri.sha256" 2>/dev/null)" == "$(fakecri_sum)" ]]; }

# go with its output shown only when it fails (module downloads are chatty).
quiet_go() {
  local out
  if ! out="$(go "$@" 2>&1)"; then
    printf '%s\n' "$out" >&2
    die "go $* failed"
  fi
}

# build NAME PACKAGE LDFLAGS: go build into a temp file, then rename, so a binary is whole or absent.
build() {
  local name="$1" pkg="$2" ld="$3" t0=$SECONDS
  say "building $name"
  go build -trimpath -ldflags "$ld" -o "$BIN/.$name.tmp" "$pkg"
  mv "$BIN/.$name.tmp" "$BIN/$name"
  say "built $name in $((SECONDS - t0)) s"
}

build_etcd() {
  want etcd || return 0
  have etcd && { say "etcd: cached"; return; }
  local mod="$WORK/etcd"
  mkdir -p "$mod" && cd "$mod"
  [[ -f go.mod ]] || printf 'module local/etcdbin\n\ngo %s.0\n' "$GO_MIN" > go.mod
  say "etcd $ETCD_VERSION: resolving go.etcd.io/etcd/server/v3 (module proxy)"
  quiet_go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  build etcd go.etcd.io/etcd/server/v3 "-s -w"
}

# A wrapper module: k8s.io/kubernetes plus every staging module it replaces with ./staging/..., mapped
# to the matching v0.X.Y tag. Written to go.mod.tmp first, so an interrupted run starts over.
wrapper_module() {
  local mod="$1" kdir minor="v0.${K8S_VERSION#v1.}" m
  mkdir -p "$mod"
  [[ -f "$mod/go.mod" ]] && return
  say "kubernetes $K8S_VERSION: preparing wrapper module in $mod"
  # The go and godebug lines of k8s.io/kubernetes's own go.mod for this minor.
  printf 'module local/%s\n\ngo %s.0\n\ngodebug default=go%s\n' "$(basename "$mod")" "$GO_MIN" "$GO_MIN" > "$mod/go.mod.tmp"
  go mod edit -require="k8s.io/kubernetes@$K8S_VERSION" "$mod/go.mod.tmp"
  say "downloading k8s.io/kubernetes@$K8S_VERSION (module proxy)"
  kdir="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  while read -r m; do
    go mod edit -replace="$m=$m@$minor" "$mod/go.mod.tmp"
  done < <(grep -oE '^\s*k8s.io/[a-z0-9-]+ => ./staging' "$kdir/go.mod" | awk '{print $1}')
  mv "$mod/go.mod.tmp" "$mod/go.mod"
}

build_kube() {
  local names=() n pkgs=()
  for n in "${KUBE_NAMES[@]}"; do
    want "$n" && ! have "$n" && names+=("$n")
  done
  [[ ${#names[@]} -eq 0 ]] && { say "kubernetes $K8S_VERSION: cached in $BIN"; return; }
  wrapper_module "$WORK/kube"
  cd "$WORK/kube"
  say "kubernetes $K8S_VERSION: resolving dependencies (the first run downloads several hundred MB)"
  # No `go mod tidy`: nothing in this module imports the cmd packages, tidy would drop them.
  for n in "${KUBE_NAMES[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$n@$K8S_VERSION"); done
  quiet_go get "${pkgs[@]}"
  for n in "${names[@]}"; do
    build "$n" "k8s.io/kubernetes/cmd/$n" "$(kube_ldflags)"
  done
}

kube_ldflags() {
  printf '%s' "-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1"
  printf '%s' " -X k8s.io/component-base/version.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2) -X k8s.io/component-base/version.gitTreeState=clean"
}

# The Go DRA test driver: a main package inside k8s.io/kubernetes itself, so it builds from a wrapper
# module like the components (a module of its own: its test-only dependencies such as ginkgo and
# gomega never enter the components' go.mod).
build_dra_test_driver() {
  named dra-test-driver || return 0
  have dra-test-driver && { say "dra-test-driver: cached"; return; }
  wrapper_module "$WORK/dra-test-driver"
  cd "$WORK/dra-test-driver"
  say "dra-test-driver: resolving k8s.io/kubernetes/test/e2e/dra/test-driver@$K8S_VERSION"
  quiet_go get "k8s.io/kubernetes/test/e2e/dra/test-driver@$K8S_VERSION"
  build dra-test-driver k8s.io/kubernetes/test/e2e/dra/test-driver "$(kube_ldflags)"
}

# The bench's Go anchors (bench/anchor/main.go): a wrapper module of their own, like fakecri's (the
# kubelet's checkpointmanager, the kubeletplugin helper, the CDI library); rebuilt when main.go changed.
# bench/ is not packaged: from an installed package this name is refused.
dra_anchor_sum() { sha256sum "$REPO/bench/anchor/main.go" | cut -d' ' -f1; }
build_dra_anchor() {
  named dra-anchor || return 0
  [[ -f "$REPO/bench/anchor/main.go" ]] || die "dra-anchor: $REPO/bench/anchor/main.go not found (bench/ is not packaged: run hack/build-k8s.sh --only dra-anchor in a clone of the repository)"
  have dra-anchor && [[ "$(cat "$BIN/dra-anchor.sha256" 2>/dev/null)" == "$(dra_anchor_sum)" ]] && { say "dra-anchor: cached"; return; }
  wrapper_module "$WORK/dra-anchor"
  cd "$WORK/dra-anchor"
  cp "$REPO/bench/anchor/main.go" main.go
  say "dra-anchor: resolving dependencies"
  quiet_go get "k8s.io/kubernetes@$K8S_VERSION" "tags.cncf.io/container-device-interface@$CDI_VERSION" .
  build dra-anchor . "-s -w"
  dra_anchor_sum > "$BIN/dra-anchor.sha256"
}

# kubeadm and kube-proxy (kind node images): a wrapper module of their own, so the components'
# go.mod stays as it was.
build_kube_node() {
  local names=() n pkgs=()
  for n in kubeadm kube-proxy; do
    named "$n" && ! have "$n" && names+=("$n")
  done
  [[ ${#names[@]} -eq 0 ]] && return
  wrapper_module "$WORK/kube-node"
  cd "$WORK/kube-node"
  say "kubernetes $K8S_VERSION: resolving ${names[*]}"
  for n in "${names[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$n@$K8S_VERSION"); done
  quiet_go get "${pkgs[@]}"
  for n in "${names[@]}"; do
    build "$n" "k8s.io/kubernetes/cmd/$n" "$(kube_ldflags)"
  done
}

# fakecri has a module of its own: the CDI library needs newer dependencies (runtime-spec) than
# Kubernetes pins, and those must not leak into the kubelet and the other components.
build_fakecri() {
  want fakecri || return 0
  fakecri_fresh && { say "fakecri: cached"; return; }
  wrapper_module "$WORK/fakecri"
  cd "$WORK/fakecri"
  cp "$REPO/hack/fakecri/main.go" main.go
  say "fakecri: resolving dependencies"
  quiet_go get "k8s.io/kubernetes@$K8S_VERSION" "tags.cncf.io/container-device-interface@$CDI_VERSION" .
  build fakecri . "-s -w"
  fakecri_sum > "$BIN/fakecri.sha256"
}

build_helm() {
  want helm || return 0
  have helm && { say "helm: cached"; return; }
  local mod="$WORK/helm"
  mkdir -p "$mod" && cd "$mod"
  [[ -f go.mod ]] || printf 'module local/helmbin\n\ngo %s.0\n' "$GO_MIN" > go.mod
  say "helm $HELM_VERSION: resolving helm.sh/helm/v3 (module proxy)"
  quiet_go get "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  # As helm's Makefile does: the Kubernetes version helm assumes (for charts' kubeVersion) follows
  # the client-go it was built with; without this it claims v1.20.
  local kv major minor
  kv="$(go list -m -f '{{.Version}}' k8s.io/client-go)"
  major=$(( $(echo "${kv#v}" | cut -d. -f1) + 1 ))
  minor="$(echo "$kv" | cut -d. -f2)"
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
    ld+=" -X $pkg.k8sVersionMajor=$major -X $pkg.k8sVersionMinor=$minor"
  done
  build helm helm.sh/helm/v3/cmd/helm "$ld"
}

# kwok (sigs.k8s.io/kwok) plays the local cluster's simulated nodes and their pods (fakeplugin fleet).
# It does not depend on the Kubernetes version: built once per kwok version, copied into each version's bin.
build_kwok() {
  want kwok || return 0
  have kwok && { say "kwok: cached"; return; }
  local shared="$CACHE/kwok/$KWOK_VERSION" mod="$CACHE/kwok/$KWOK_VERSION/src"
  if [[ ! -x "$shared/kwok" ]]; then
    mkdir -p "$mod" && cd "$mod"
    [[ -f go.mod ]] || printf 'module local/kwokbin\n\ngo 1.25.0\n' > go.mod
    say "kwok $KWOK_VERSION: resolving sigs.k8s.io/kwok (module proxy)"
    quiet_go get "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    say "building kwok"
    go build -trimpath -ldflags "-s -w" -o "$shared/.kwok.tmp" sigs.k8s.io/kwok/cmd/kwok
    mv "$shared/.kwok.tmp" "$shared/kwok"
  fi
  cp "$shared/kwok" "$BIN/.kwok.tmp" && mv "$BIN/.kwok.tmp" "$BIN/kwok"
  say "kwok $KWOK_VERSION: in $BIN"
}

# Kueue (sigs.k8s.io/kueue): independent of the Kubernetes version, built once per Kueue version into
# $CACHE/kueue/$KUEUE_VERSION/ with what a deployment needs from its module (config/components: CRDs,
# webhook manifests; charts/kueue), copied out of the Go module cache.
build_kueue() {
  named kueue || return 0
  local dir="$CACHE/kueue/$KUEUE_VERSION" mod="$CACHE/kueue/$KUEUE_VERSION/src" src
  [[ -x "$dir/kueue" && -d "$dir/module/config" ]] && { say "kueue $KUEUE_VERSION: cached in $dir"; return; }
  mkdir -p "$mod" && cd "$mod"
  # Kueue 0.19's own go.mod says go 1.26.0: the Go this needs, whatever the Kubernetes minor.
  [[ -f go.mod ]] || printf 'module local/kueuebin\n\ngo 1.26.0\n' > go.mod
  say "kueue $KUEUE_VERSION: resolving sigs.k8s.io/kueue (module proxy)"
  quiet_go get "sigs.k8s.io/kueue/cmd/kueue@$KUEUE_VERSION"
  say "building kueue (a few minutes cold)"
  local t0=$SECONDS
  go build -trimpath -ldflags "-s -w" -o "$dir/.kueue.tmp" sigs.k8s.io/kueue/cmd/kueue
  mv "$dir/.kueue.tmp" "$dir/kueue"
  say "built kueue in $((SECONDS - t0)) s"
  src="$(go list -m -f '{{.Dir}}' sigs.k8s.io/kueue)"
  rm -rf "$dir/.module.tmp" && mkdir -p "$dir/.module.tmp/config" "$dir/.module.tmp/charts"
  cp -r "$src/config/components" "$dir/.module.tmp/config/"
  cp -r "$src/charts/kueue" "$dir/.module.tmp/charts/"
  chmod -R u+w "$dir/.module.tmp"
  rm -rf "$dir/module" && mv "$dir/.module.tmp" "$dir/module"
  say "kueue $KUEUE_VERSION: in $dir"
}

# KEDA (github.com/kedacore/keda/v2): independent of the Kubernetes version, built once per KEDA version
# into $CACHE/keda/$KEDA_VERSION/. Not through a wrapper module as Kueue is: KEDA's go.mod pins k8s.io and
# controller-runtime with replace directives, which Go ignores in a dependency, so the build runs inside
# a writable copy of the module itself (its own go.mod, go.sum and replaces; the module proxy, no vendor/).
build_keda() {
  named keda || return 0
  local dir="$CACHE/keda/$KEDA_VERSION" src="$CACHE/keda/$KEDA_VERSION/src" mod ld t0
  [[ -x "$dir/keda" && -x "$dir/keda-adapter" && -d "$dir/module/config" ]] && { say "keda $KEDA_VERSION: cached in $dir"; return; }
  if [[ ! -f "$src/go.mod" ]]; then
    say "keda $KEDA_VERSION: downloading github.com/kedacore/keda/v2 (module proxy)"
    mod="$(go mod download -json "github.com/kedacore/keda/v2@$KEDA_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    mkdir -p "$dir"
    rm -rf "$src.tmp"
    cp -r "$mod" "$src.tmp"
    chmod -R u+w "$src.tmp"
    mv "$src.tmp" "$src"
  fi
  cd "$src"
  say "keda $KEDA_VERSION: resolving its dependencies (several hundred modules)"
  quiet_go mod download
  # As KEDA's Makefile does (GO_LDFLAGS), less the commit: a module zip has none.
  ld="-s -w -X=github.com/kedacore/keda/v2/version.Version=${KEDA_VERSION#v}"
  t0=$SECONDS
  say "building keda (the operator) and keda-adapter (the metrics API server)"
  go build -trimpath -ldflags "$ld" -o "$dir/.keda.tmp" ./cmd/operator
  go build -trimpath -ldflags "$ld" -o "$dir/.keda-adapter.tmp" ./cmd/adapter
  mv "$dir/.keda.tmp" "$dir/keda"
  mv "$dir/.keda-adapter.tmp" "$dir/keda-adapter"
  say "built keda and keda-adapter in $((SECONDS - t0)) s"
  rm -rf "$dir/.module.tmp"
  mkdir -p "$dir/.module.tmp"
  cp -r "$src/config" "$dir/.module.tmp/"
  rm -rf "$dir/module"
  mv "$dir/.module.tmp" "$dir/module"
  say "keda $KEDA_VERSION: in $dir"
}

# Karpenter (sigs.k8s.io/karpenter): our main package (hack/karpenter/main.go) in a wrapper module, built
# once per Karpenter version and main.go into $CACHE/karpenter/$KARPENTER_VERSION/, with the kwok
# provider's CRDs (kwok/charts/crds, kwok/apis/crds) copied out of the module. Its go.mod's `go` line is
# newer than the machine's Go: GOTOOLCHAIN names the one toolchain to fetch, for these go commands only.
karpenter_sum() { sha256sum "$REPO/hack/karpenter/main.go" | cut -d' ' -f1; }
build_karpenter() {
  named karpenter || return 0
  local dir="$CACHE/karpenter/$KARPENTER_VERSION" t0 src
  if [[ -x "$dir/karpenter" && -d "$dir/crds" && "$(cat "$dir/karpenter.sha256" 2>/dev/null)" == "$(karpenter_sum)" ]]; then
    say "karpenter $KARPENTER_VERSION: cached in $dir"
    return
  fi
  mkdir -p "$dir/src" && cd "$dir/src"
  [[ -f go.mod ]] || printf 'module local/karpenterbin\n\ngo 1.26.0\n' > go.mod
  cp "$REPO/hack/karpenter/main.go" main.go
  say "karpenter $KARPENTER_VERSION: fetching Go toolchain $KARPENTER_GOTOOLCHAIN and sigs.k8s.io/karpenter (module proxy)"
  GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN" go version >/dev/null 2>&1 ||
    die "karpenter needs Go toolchain $KARPENTER_GOTOOLCHAIN (its go.mod wants a newer Go than $(go env GOVERSION)); the go command could not fetch it (set KARPENTER_GOTOOLCHAIN to one the Go module proxy serves): $(GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN" go version 2>&1 | tr -s '\n\t' '  ')"
  GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN" quiet_go get "sigs.k8s.io/karpenter@$KARPENTER_VERSION"
  GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN" quiet_go mod tidy
  t0=$SECONDS
  say "building karpenter (about 8 minutes cold on 2 cores)"
  GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN" go build -trimpath -ldflags "-s -w" -o "$dir/.karpenter.tmp" .
  mv "$dir/.karpenter.tmp" "$dir/karpenter"
  karpenter_sum > "$dir/karpenter.sha256"
  say "built karpenter in $((SECONDS - t0)) s"
  src="$(GOTOOLCHAIN="$KARPENTER_GOTOOLCHAIN" go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
  rm -rf "$dir/.crds.tmp" && mkdir -p "$dir/.crds.tmp"
  cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$dir/.crds.tmp/"
  chmod u+w "$dir"/.crds.tmp/*
  rm -rf "$dir/crds" && mv "$dir/.crds.tmp" "$dir/crds"
  say "karpenter $KARPENTER_VERSION: in $dir"
}

# actionlint: independent of the Kubernetes version, `go install` of its command (a few small modules) into
# $CACHE/actionlint/$ACTIONLINT_VERSION/, through a temporary GOBIN so the binary is whole or absent.
build_actionlint() {
  named actionlint || return 0
  local dir="$CACHE/actionlint/$ACTIONLINT_VERSION" t0=$SECONDS
  [[ -x "$dir/actionlint" ]] && { say "actionlint $ACTIONLINT_VERSION: cached in $dir"; return; }
  say "building actionlint $ACTIONLINT_VERSION (module proxy)"
  rm -rf "$dir/.gobin.tmp" && mkdir -p "$dir/.gobin.tmp"
  GOBIN="$dir/.gobin.tmp" quiet_go install -trimpath -ldflags "-s -w" \
    "github.com/rhysd/actionlint/cmd/actionlint@$ACTIONLINT_VERSION"
  mv "$dir/.gobin.tmp/actionlint" "$dir/actionlint"
  rmdir "$dir/.gobin.tmp"
  say "built actionlint in $((SECONDS - t0)) s: $dir/actionlint"
}

T0=$SECONDS
build_etcd
build_kube
build_fakecri
build_helm
build_kwok
build_dra_test_driver
build_dra_anchor
build_kube_node
build_kueue
build_keda
build_karpenter
build_actionlint
say "done in $((SECONDS - T0)) s; binaries in $BIN"
echo "$BIN"
