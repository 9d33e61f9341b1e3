#!/usr/bin/env bash
# The reference lab on kind, end to end: build the image, create the cluster (kind-config.yaml),
# load the image into its nodes, install the chart with the lab's own values plus an inventory,
# then run Scenario I (two containers sharing one claim) and the per-pod template case, and show
# what the containers themselves saw through the real container runtime (`kubectl logs`: their
# `env` and our CDI-mounted `nvidia-smi -L`), asserting each container sees exactly its GPUs.
#
#   demo/kind/run.sh [--local] [--keep] [--release DIR]
#
#   --local          build every image on this machine from local sources (hack/kind/images.sh: Debian's
#                    packages, Go modules, this repository), start our own Docker engine when none answers
#                    (hack/kind/dockerd.sh) and run kind through hack/kind/kind: for a machine that reaches
#                    package registries but no image registry. Without it: plain docker and kind, public
#                    images.
#   --keep           keep the scenario objects and the cluster at the end (a reused cluster is always kept)
#   --release DIR    a release instead of this checkout's image and chart: the files of a GitHub release
#                    (or of hack/release.sh --out DIR) in DIR, checked against its SHA256SUMS; the image
#                    archive fakeplugin-<version>-linux-<arch>.oci.tar is loaded into docker and the nodes
#                    (no build, IMAGE and PYTHON_IMAGE unused) and the packaged chart
#                    fakeplugin-<version>.tgz installed, running the image it names
#
# Needs docker, kind, kubectl, helm and python3 (with --local: root, go; kubectl and helm may come
# from hack/build-k8s.sh's cache). Environment:
#   CLUSTER          kind cluster name (default fakeplugin-lab); reused when it exists
#   KIND_CONFIG      kind cluster config (default demo/kind/kind-config.yaml)
#   KIND_NODE_IMAGE  node image for `kind create cluster --image` (default: kind's own; --local: ours)
#   IMAGE            image to build and run (default fakeplugin:dev)
#   PYTHON_IMAGE     base image for the Dockerfile (default: the Dockerfile's; --local: ours)
#   WORKLOAD_IMAGE   image of the example pods (default ubuntu:22.04 as in examples/; --local: the local
#                    Debian base image, loaded into the nodes)
#   KEEP=1           as --keep
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

LOCAL=0
RELEASE=""
while (($#)); do
  case "$1" in
    --local) LOCAL=1 ;;
    --keep) KEEP=1 ;;
    --release)
      [[ -n "${2:-}" ]] || { printf -- '--release needs a folder (see %s --help)\n' "$0" >&2; exit 2; }
      RELEASE="$2"
      shift
      ;;
    -h | --help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) printf 'unknown argument %s (see %s --help)\n' "$1" "$0" >&2; exit 2 ;;
  esac
  shift
done

CLUSTER="${CLUSTER:-fakeplugin-lab}"
KIND_CONFIG="${KIND_CONFIG:-demo/kind/kind-config.yaml}"
IMAGE="${IMAGE:-fakeplugin:dev}"
EXAMPLE_IMAGE=ubuntu:22.04  # what examples/*.yaml run
NAMESPACE=nvidia-dra-driver-gpu
DRIVER=gpu.nvidia.com
TIMEOUT=180s
KIND=kind

source hack/kind/lib.sh  # versions and paths of the --local path (nothing runs)
say() { printf '\n[kind-demo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[kind-demo] FAILED: %s\n' "$*" >&2; exit 1; }

started_docker=0
if ((LOCAL)); then
  use_our_docker
  if ! docker info >/dev/null 2>&1; then
    say "no Docker engine answers: starting our own (hack/kind/dockerd.sh)"
    export "$(hack/kind/dockerd.sh start)"
    started_docker=1
  fi
  say "building or finding the local images (hack/kind/images.sh)"
  while IFS='=' read -r key value; do
    case "$key" in
      PYTHON_IMAGE) PYTHON_IMAGE="${PYTHON_IMAGE:-$value}" ;;
      KIND_NODE_IMAGE) KIND_NODE_IMAGE="${KIND_NODE_IMAGE:-$value}" ;;
    esac
  done < <(hack/kind/images.sh)
  WORKLOAD_IMAGE="${WORKLOAD_IMAGE:-fakeplugin.local/debian:$DEBIAN_SUITE}"
  KIND=hack/kind/kind
  for tool in kubectl helm; do
    command -v "$tool" >/dev/null || PATH="$PATH:$K8S_BIN"
  done
fi
WORKLOAD_IMAGE="${WORKLOAD_IMAGE:-$EXAMPLE_IMAGE}"

for tool in docker "$KIND" kubectl helm python3; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done

# Poll a command until it succeeds (kubectl wait cannot wait for objects that do not exist yet).
until_ok() {
  local what="$1" deadline=$((SECONDS + 180))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "timed out waiting for $what"
    sleep 2
  done
}

# jsonpath-free JSON queries: `json_query EXPR` evaluates EXPR with `d` = the JSON document on stdin.
json_query() { python3 -c 'import json, sys; d = json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }

# An example's manifest, its pods running WORKLOAD_IMAGE.
example() { sed "s#image: $EXAMPLE_IMAGE#image: $WORKLOAD_IMAGE#" "examples/$1"; }

CHART=charts/fakeplugin
image_values=()
if [[ -n "$RELEASE" ]]; then
  # The release's own files, whole: every file SHA256SUMS names and that is here must match it.
  arch="$(uname -m)"
  arch="${arch/x86_64/amd64}" && arch="${arch/aarch64/arm64}"
  [[ -f "$RELEASE/SHA256SUMS" ]] || die "no SHA256SUMS in $RELEASE (the release's files: hack/release.sh --out)"
  charts=("$RELEASE"/fakeplugin-*.tgz)
  archives=("$RELEASE"/fakeplugin-*-linux-"$arch".oci.tar)
  [[ ${#charts[@]} == 1 && -f "${charts[0]}" ]] || die "not one chart fakeplugin-<version>.tgz in $RELEASE"
  [[ ${#archives[@]} == 1 && -f "${archives[0]}" ]] || die "not one image fakeplugin-<version>-linux-$arch.oci.tar in $RELEASE"
  say "checking $RELEASE against its SHA256SUMS"
  (cd "$RELEASE" && sha256sum --check --ignore-missing --quiet SHA256SUMS) >&2 || die "$RELEASE: a file does not match SHA256SUMS"
  for f in "${charts[0]}" "${archives[0]}"; do
    grep -q "  ${f##*/}\$" "$RELEASE/SHA256SUMS" || die "$RELEASE/SHA256SUMS has no line for ${f##*/}"
  done
  CHART="${charts[0]}"
  say "loading the release's image from ${archives[0]##*/}"
  IMAGE="$(docker load -i "${archives[0]}" | sed -n 's/^Loaded image: //p' | tail -n1)"
  [[ -n "$IMAGE" ]] || die "docker load of ${archives[0]} named no image"
  chart_image="$(helm show values "$CHART" --jsonpath '{.image.repository}:{.image.tag}')"
  [[ "$chart_image" == "$IMAGE" ]] || die "the chart ${CHART##*/} runs $chart_image, the archive holds $IMAGE"
else
  say "building image $IMAGE${PYTHON_IMAGE:+ (base $PYTHON_IMAGE)}"
  build_args=()
  ((LOCAL)) && build_args+=(--network host)  # pip in the build reaches PyPI through the host
  docker build "${build_args[@]}" ${PYTHON_IMAGE:+--build-arg PYTHON_IMAGE="$PYTHON_IMAGE"} -t "$IMAGE" . >&2
  image_values=(--set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never)
fi

created=0
if "$KIND" get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  say "reusing kind cluster $CLUSTER"
else
  created=1
  say "creating kind cluster $CLUSTER ($KIND_CONFIG${KIND_NODE_IMAGE:+, node image $KIND_NODE_IMAGE})"
  # One retry: on a busy host kubeadm's init has failed once with "failed to reload systemd".
  for attempt in 1 2; do
    "$KIND" create cluster --name "$CLUSTER" --config "$KIND_CONFIG" --wait 180s \
      ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"} && break
    ((attempt == 1)) || die "kind create cluster failed twice"
    say "kind create cluster failed; deleting what it left and trying once more"
    "$KIND" delete cluster --name "$CLUSTER" >&2 || true
  done
fi
KUBECONFIG="${KUBECONFIG_OUT:-$(mktemp)}"
export KUBECONFIG
"$KIND" get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
mapfile -t NODES < <("$KIND" get nodes --name "$CLUSTER")

say "checking that containerd has CDI enabled on every node"
for node in "${NODES[@]}"; do
  # The dump first, then grep: `grep -q` closing the pipe early would fail the pipeline (pipefail).
  dump="$(docker exec "$node" containerd config dump 2>/dev/null)" || die "containerd config dump failed on $node"
  grep -Eq '^\s*enable_cdi\s*=\s*true' <<<"$dump" \
    || die "CDI is off in containerd on $node: set enable_cdi = true in its CRI plugin config"
done

load_images=()
if [[ -n "$RELEASE" ]]; then
  say "loading ${archives[0]##*/} into the nodes"
  if ! "$KIND" load image-archive --name "$CLUSTER" "${archives[0]}"; then
    say "kind load failed; importing with ctr on each node"
    for node in "${NODES[@]}"; do
      docker exec -i "$node" ctr --namespace k8s.io images import - <"${archives[0]}"
    done
  fi
else
  load_images+=("$IMAGE")
fi
[[ "$WORKLOAD_IMAGE" != "$EXAMPLE_IMAGE" ]] && load_images+=("$WORKLOAD_IMAGE")
for image in "${load_images[@]}"; do
  say "loading $image into the nodes"
  # kind >= 0.31 writes containerd config v4, which some `kind load` versions cannot import into.
  if ! "$KIND" load docker-image --name "$CLUSTER" "$image"; then
    say "kind load failed; importing with ctr on each node"
    for node in "${NODES[@]}"; do
      docker save "$image" | docker exec -i "$node" ctr --namespace k8s.io images import -
    done
  fi
done

say "installing the chart $CHART with the lab's values (examples/seed-lab-values.yaml) and demo/kind/inventory.yaml"
helm upgrade --install fakeplugin "$CHART" --namespace "$NAMESPACE" --create-namespace \
  -f examples/seed-lab-values.yaml --set-file inventory=demo/kind/inventory.yaml "${image_values[@]}" \
  --wait --timeout 5m
if ((!created)); then
  # A rebuilt image under the same tag does not change the DaemonSet: restart its pods onto it.
  kubectl -n "$NAMESPACE" rollout restart daemonset/fakeplugin-kubelet-plugin
fi
kubectl -n "$NAMESPACE" rollout status daemonset/fakeplugin-kubelet-plugin --timeout="$TIMEOUT"
kubectl get deviceclasses gpu.nvidia.com mig.nvidia.com vfio.gpu.nvidia.com

say "waiting for one ResourceSlice per GPU node (3 GPUs in all)"
gpus_published() {
  [[ "$(kubectl get resourceslices -o json | json_query \
    "sum(len(s['spec'].get('devices', [])) for s in d['items'] if s['spec']['driver'] == '$DRIVER')")" == 3 ]]
}
until_ok "3 published GPUs" gpus_published
kubectl get resourceslices

# The UUID the slice publishes for the device a claim got.
allocated_uuid() {
  local ns="$1" claim="$2" result
  result="$(kubectl -n "$ns" get resourceclaim "$claim" -o json \
    | json_query "(lambda r: r['pool'] + '/' + r['device'])(d['status']['allocation']['devices']['results'][0])")"
  kubectl get resourceslices -o json | json_query "[dev['attributes']['uuid']['string'] for s in d['items']
    if s['spec']['driver'] == '$DRIVER' and s['spec']['pool']['name'] == '${result%/*}'
    for dev in s['spec']['devices'] if dev['name'] == '${result#*/}'][0]"
}

# What a container printed (its `env`, then `nvidia-smi -L`), shown, then checked: it sees exactly
# its GPU, in its environment (each CDI device it got sets FAKEPLUGIN_GPU_<...>_UUID;
# NVIDIA_VISIBLE_DEVICES is `void`, as NVIDIA's driver sets it) and in nvidia-smi -L.
check_container() {
  local ns="$1" pod="$2" ctr="$3" uuid="$4" logs seen smi
  logs="$(kubectl -n "$ns" logs "$pod" -c "$ctr")"
  printf -- '--- kubectl -n %s logs %s -c %s (NVIDIA/FAKEPLUGIN env and nvidia-smi -L):\n%s\n' "$ns" "$pod" "$ctr" \
    "$(grep -E '^(NVIDIA_|FAKEPLUGIN_)|^GPU ' <<<"$logs")"
  seen="$(sed -n 's/^FAKEPLUGIN_GPU_[0-9A-Z_]*_UUID=//p' <<<"$logs" | sort | paste -sd,)"
  [[ "$seen" == "$uuid" ]] || die "$pod/$ctr sees GPUs '$seen' in its environment, its claim has $uuid"
  smi="$(grep '^GPU ' <<<"$logs" || true)"
  [[ "$(wc -l <<<"$smi")" == 1 && "$smi" == *"(UUID: $uuid)" ]] \
    || die "$pod/$ctr: nvidia-smi -L printed '$smi', expected one GPU with UUID $uuid"
}

say "Scenario I: claim must-nvidia-gpu shared by two containers of one pod"
kubectl create namespace lab01 --dry-run=client -o yaml | kubectl apply -f -
example scenario-i.yaml | kubectl -n lab01 apply -f -
kubectl -n lab01 wait --for=condition=Ready pod/shared-gpu --timeout="$TIMEOUT"
kubectl -n lab01 wait resourceclaim/must-nvidia-gpu --timeout="$TIMEOUT" \
  --for=jsonpath='{.status.allocation.devices.results[0].driver}'="$DRIVER"
uuid="$(allocated_uuid lab01 must-nvidia-gpu)"
for ctr in ctr0 ctr1; do
  check_container lab01 shared-gpu "$ctr" "$uuid"
done
smi0="$(kubectl -n lab01 logs shared-gpu -c ctr0 | grep '^GPU ')"
smi1="$(kubectl -n lab01 logs shared-gpu -c ctr1 | grep '^GPU ')"
[[ "$smi0" == "$smi1" ]] || die "the containers' nvidia-smi -L differ: '$smi0' vs '$smi1'"
echo "both containers see $uuid"

say "template case: a ResourceClaimTemplate gives each Deployment replica its own GPU"
kubectl create namespace lab02 --dry-run=client -o yaml | kubectl apply -f -
example template-deployment.yaml | kubectl -n lab02 apply -f -
kubectl -n lab02 wait --for=condition=Available deployment/gpu-per-pod --timeout="$TIMEOUT"
mapfile -t CLAIMS < <(kubectl -n lab02 get resourceclaims -o name)
((${#CLAIMS[@]} == 2)) || die "expected 2 claims made from the template, found ${#CLAIMS[@]}: ${CLAIMS[*]}"
declare -A uuid_of_pod
uuids=()
for claim in "${CLAIMS[@]}"; do
  kubectl -n lab02 wait "$claim" --timeout="$TIMEOUT" \
    --for=jsonpath='{.status.allocation.devices.results[0].driver}'="$DRIVER"
  u="$(allocated_uuid lab02 "${claim#*/}")"
  uuids+=("$u")
  owner="$(kubectl -n lab02 get "$claim" -o json | json_query "d['status']['reservedFor'][0]['name']")"
  uuid_of_pod[$owner]="$u"
done
[[ "${uuids[0]}" != "${uuids[1]}" ]] || die "both replicas got the same GPU ${uuids[0]}"
for pod in $(kubectl -n lab02 get pods -l app=gpu-per-pod -o name); do
  check_container lab02 "${pod#*/}" ctr "${uuid_of_pod[${pod#*/}]}"
done
echo "replicas got ${uuids[*]}"

if [[ "${KEEP:-}" == 1 ]]; then
  say "done; cluster $CLUSTER kept (KUBECONFIG=$KUBECONFIG${DOCKER_HOST:+ DOCKER_HOST=$DOCKER_HOST})"
  exit 0
fi
say "cleaning up: claims made from the template go with their pods"
kubectl -n lab02 delete deployment gpu-per-pod --wait --timeout="$TIMEOUT"
kubectl -n lab02 wait --for=delete "${CLAIMS[@]}" --timeout="$TIMEOUT"
kubectl delete namespace lab02 lab01 --wait --timeout="$TIMEOUT"
if ((created)); then
  "$KIND" delete cluster --name "$CLUSTER"
fi
rm -f "$KUBECONFIG"
if ((started_docker)); then hack/kind/dockerd.sh stop; fi
say "done"
