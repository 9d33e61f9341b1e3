#!/usr/bin/env bash
# What fakeplugin's GitHub Action (action.yml at the repository root; docs/ci.md) does, as the runner runs
# it: its inputs come as environment variables, its outputs go to $GITHUB_OUTPUT.
#
#   INPUT_MODE                local (default): fakeplugin's local cluster (real control plane and kubelets,
#                             a fake CRI, no Docker; its binaries built from Go modules, cached in
#                             $FAKEPLUGIN_CACHE); kind: a kind cluster with our image (built from the
#                             action's checkout) and chart; down: take down what an earlier run of this
#                             script in the same job started (a last step with `if: always()`)
#   INPUT_INVENTORY           the inventory file (default: the seed lab, the action's examples/seed-lab.yaml;
#                             kind: demo/kind/inventory.yaml, the seed lab by kind's node labels)
#   INPUT_KUBERNETES_VERSION  vX.Y.Z (default: fakeplugin's default; kind: the node image kindest/node:vX.Y.Z,
#                             default kind's own)
#   INPUT_WITH                local mode's add-ons, comma-separated as `cluster up --with`: kueue,
#                             prometheus, keda, karpenter (each may say =FILE); prometheus needs the
#                             distribution's prometheus package installed before
#   INPUT_FAKEPLUGIN_VERSION  what to pip install: empty (the action's own checkout), a version (X.Y.Z:
#                             fakeplugin==X.Y.Z from PyPI), or any pip requirement or path
#   ACTION_PATH               the action's checkout (default: this repository)
#   RUNNER_TEMP               where the kubeconfig, the local cluster's state dir and the record of what
#                             was started go (fakeplugin-action/ below it; default $TMPDIR or /tmp)
#   PYTHON                    the Python whose pip installs fakeplugin (default python3: setup-python's)
#
# Outputs: kubeconfig=<file> (both modes), state-dir=<dir> (local). The local cluster needs root: as
# another user, `sudo` runs `cluster up` and `down` (GitHub's runners have it without a password).
set -euo pipefail

say() { printf '[fakeplugin action] %s\n' "$*" >&2; }
die() {
  printf '::error title=fakeplugin action::%s\n' "$*" >&2
  exit 1
}

MODE="${INPUT_MODE:-local}"
INVENTORY="${INPUT_INVENTORY:-}"
K8S="${INPUT_KUBERNETES_VERSION:-}"
WITH="${INPUT_WITH:-}"
SPEC="${INPUT_FAKEPLUGIN_VERSION:-}"
ACTION="${ACTION_PATH:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
WORK="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/fakeplugin-action"
OUTPUT="${GITHUB_OUTPUT:-/dev/null}"
PYTHON="${PYTHON:-python3}"
KIND_CLUSTER=fakeplugin
IMAGE=fakeplugin:action
NAMESPACE=nvidia-dra-driver-gpu
# The runner's cache, also for root (sudo may set another HOME): what actions/cache saves (docs/ci.md).
export FAKEPLUGIN_CACHE="${FAKEPLUGIN_CACHE:-$HOME/.cache/fakeplugin}"

as_root() {
  if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo --preserve-env env "PATH=$PATH" "$@"; fi
}

# ---- the inputs, all checked before anything is installed or started
case "$MODE" in
  local | kind | down) ;;
  *) die "mode: '$MODE' is not one of local, kind, down" ;;
esac
if [[ -n "$K8S" ]]; then
  [[ "$K8S" =~ ^v?1\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] ||
    die "kubernetes-version: '$K8S' is not a Kubernetes version (vX.Y.Z, e.g. v1.37.2)"
  K8S="v${K8S#v}"
fi
if [[ -n "$WITH" ]]; then
  [[ "$MODE" == local ]] || die "with: add-ons ($WITH) run in mode local only"
  IFS=, read -ra addons <<<"$WITH"
  for addon in "${addons[@]}"; do
    case "${addon%%=*}" in
      kueue | prometheus | keda | karpenter) ;;
      *) die "with: unknown add-on '${addon%%=*}' (known: kueue, prometheus, keda, karpenter)" ;;
    esac
  done
fi
if [[ -z "$INVENTORY" ]]; then
  if [[ "$MODE" == kind ]]; then INVENTORY="$ACTION/demo/kind/inventory.yaml"; else INVENTORY="$ACTION/examples/seed-lab.yaml"; fi
fi
[[ "$MODE" == down || -f "$INVENTORY" ]] || die "inventory: no such file: $INVENTORY"
if [[ -z "$SPEC" ]]; then
  SPEC="$ACTION"
elif [[ "$SPEC" =~ ^[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+-]*$ ]]; then
  SPEC="fakeplugin==$SPEC"
fi
mkdir -p "$WORK"
KUBECONFIG_OUT="$WORK/kubeconfig"
STARTED="$WORK/started"  # what `down` takes down: mode=..., then state-dir=... or kind-cluster=...

down() {
  if [[ ! -f "$STARTED" ]]; then
    say "down: this job started no cluster (no $STARTED)"
    return 0
  fi
  local started_mode what
  started_mode="$(sed -n 's/^mode=//p' "$STARTED")"
  if [[ "$started_mode" == local ]]; then
    what="$(sed -n 's/^state-dir=//p' "$STARTED")"
    say "down: the local cluster in $what"
    as_root fakeplugin cluster down --state-dir "$what"
  else
    what="$(sed -n 's/^kind-cluster=//p' "$STARTED")"
    say "down: kind cluster $what"
    kind delete cluster --name "$what"
  fi
  rm -f "$STARTED"
}

install() {
  say "installing fakeplugin: pip install $SPEC"
  "$PYTHON" -m pip install -q "$SPEC"
  command -v fakeplugin >/dev/null || die "pip installed $SPEC, but no fakeplugin command is on PATH"
  say "$(fakeplugin --version)"
}

up_local() {
  local state="$WORK/cluster" version=() only=() addon
  [[ -n "$K8S" ]] && version=(--kubernetes-version "$K8S")
  if [[ -n "$WITH" ]]; then
    for addon in "${addons[@]}"; do
      case "${addon%%=*}" in
        kueue | keda | karpenter) only+=("${addon%%=*}") ;;
        prometheus)
          if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
            die "with: prometheus needs the prometheus package (prometheus and promtool on PATH) installed before this step"
          fi
          ;;
      esac
    done
  fi
  say "building what is missing of the Kubernetes binaries (cached in $FAKEPLUGIN_CACHE)"
  fakeplugin cluster build "${version[@]}"
  if ((${#only[@]})); then
    fakeplugin cluster build "${version[@]}" --only "$(IFS=,; echo "${only[*]}")"
  fi
  say "starting the local cluster of $INVENTORY in $state"
  as_root fakeplugin cluster up --inventory "$INVENTORY" --state-dir "$state" "${version[@]}" ${WITH:+--with "$WITH"}
  printf 'mode=local\nstate-dir=%s\n' "$state" >"$STARTED"
  # Root's file, readable by the job's steps that run as the runner's user.
  as_root cat "$state/admin.kubeconfig" >"$KUBECONFIG_OUT"
  echo "state-dir=$state" >>"$OUTPUT"
}

up_kind() {
  local image=() helm_version kind_version
  [[ -n "$K8S" ]] && image=(--image "kindest/node:$K8S")
  command -v docker >/dev/null || die "mode kind needs docker"
  mkdir -p "$WORK/bin"
  export PATH="$WORK/bin:$PATH"
  if ! command -v kind >/dev/null; then
    # shellcheck disable=SC2016 # $1 and $KIND_VERSION are the inner shell's
    kind_version="$(bash -c 'source "$1/hack/kind/lib.sh" && echo "$KIND_VERSION"' _ "$ACTION")"
    say "installing kind $kind_version (go install)"
    GOBIN="$WORK/bin" go install "sigs.k8s.io/kind@$kind_version"
  fi
  if ! command -v helm >/dev/null; then
    helm_version="$(python3 "$ACTION/fakeplugin/cluster/versions.py" pins "" | sed -n 's/^HELM_VERSION=//p')"
    say "installing helm $helm_version (go install)"
    GOBIN="$WORK/bin" go install "helm.sh/helm/v3/cmd/helm@$helm_version"
  fi
  say "building the image $IMAGE from $ACTION"
  docker build -t "$IMAGE" "$ACTION" >&2
  say "creating kind cluster $KIND_CLUSTER"
  kind create cluster --name "$KIND_CLUSTER" --config "$ACTION/demo/kind/kind-config.yaml" \
    --kubeconfig "$KUBECONFIG_OUT" --wait 120s "${image[@]}"
  printf 'mode=kind\nkind-cluster=%s\n' "$KIND_CLUSTER" >"$STARTED"
  kind load docker-image --name "$KIND_CLUSTER" "$IMAGE"
  say "installing the chart with the seed lab's values and $INVENTORY"
  helm upgrade --install fakeplugin "$ACTION/charts/fakeplugin" --kubeconfig "$KUBECONFIG_OUT" \
    --namespace "$NAMESPACE" --create-namespace -f "$ACTION/examples/seed-lab-values.yaml" \
    --set-file "inventory=$INVENTORY" --set "image.repository=${IMAGE%%:*}" --set "image.tag=${IMAGE#*:}" \
    --wait --timeout 5m
}

if [[ "$MODE" == down ]]; then
  down
  exit 0
fi
install
if [[ "$MODE" == local ]]; then up_local; else up_kind; fi
echo "kubeconfig=$KUBECONFIG_OUT" >>"$OUTPUT"
say "cluster up; kubeconfig: $KUBECONFIG_OUT"
