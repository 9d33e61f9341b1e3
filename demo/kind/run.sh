#!/usr/bin/env bash
# The reference lab on kind, end to end: build the image, create the cluster (kind-config.yaml),
# load the image into its nodes, install the chart with the lab's own values plus an inventory,
# then run Scenario I (two containers sharing one claim) and the per-pod template case, asserting
# each step with `kubectl wait` and the containers' environment.
#
#   demo/kind/run.sh
#
# Needs docker, kind, kubectl, helm and python3. Environment:
#   CLUSTER          kind cluster name (default fakeplugin-lab); reused when it exists
#   KIND_NODE_IMAGE  node image for `kind create cluster --image` (default: kind's own)
#   IMAGE            image to build and run (default fakeplugin:dev)
#   KEEP=1           keep the scenario objects and the cluster at the end (a reused cluster is
#                    always kept)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

CLUSTER="${CLUSTER:-fakeplugin-lab}"
IMAGE="${IMAGE:-fakeplugin:dev}"
NAMESPACE=nvidia-dra-driver-gpu
DRIVER=gpu.nvidia.com
TIMEOUT=180s

say() { printf '\n[kind-demo %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '[kind-demo] FAILED: %s\n' "$*" >&2; exit 1; }

for tool in docker kind kubectl helm python3; do
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

say "building image $IMAGE"
docker build -t "$IMAGE" .

created=0
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  say "reusing kind cluster $CLUSTER"
else
  created=1
  say "creating kind cluster $CLUSTER"
  kind create cluster --name "$CLUSTER" --config demo/kind/kind-config.yaml --wait 180s \
    ${KIND_NODE_IMAGE:+--image "$KIND_NODE_IMAGE"}
fi
KUBECONFIG="$(mktemp)"
export KUBECONFIG
kind get kubeconfig --name "$CLUSTER" >"$KUBECONFIG"
mapfile -t NODES < <(kind get nodes --name "$CLUSTER")

say "checking that containerd has CDI enabled on every node"
for node in "${NODES[@]}"; do
  docker exec "$node" containerd config dump | grep -Eq '^\s*enable_cdi\s*=\s*true' \
    || die "CDI is off in containerd on $node: set enable_cdi = true in its CRI plugin config"
done

say "loading $IMAGE into the nodes"
# kind >= 0.31 writes containerd config v4, which some `kind load` versions cannot import into.
if ! kind load docker-image --name "$CLUSTER" "$IMAGE"; then
  say "kind load failed; importing with ctr on each node"
  for node in "${NODES[@]}"; do
    docker save "$IMAGE" | docker exec -i "$node" ctr --namespace k8s.io images import -
  done
fi

say "installing the chart with the lab's values (examples/seed-lab-values.yaml) and demo/kind/inventory.yaml"
helm upgrade --install fakeplugin charts/fakeplugin --namespace "$NAMESPACE" --create-namespace \
  -f examples/seed-lab-values.yaml --set-file inventory=demo/kind/inventory.yaml \
  --set image.repository="${IMAGE%:*}" --set image.tag="${IMAGE##*:}" --set image.pullPolicy=Never \
  --wait --timeout 5m
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

# The GPU UUIDs in a container's printed env: each CDI device it got sets FAKEPLUGIN_GPU_<...>_UUID
# (NVIDIA_VISIBLE_DEVICES is `void`, as NVIDIA's driver sets it).
visible_devices() {
  kubectl -n "$1" logs "$2" -c "$3" | sed -n 's/^FAKEPLUGIN_GPU_[0-9A-Z_]*_UUID=//p' | paste -sd,
}

say "Scenario I: claim must-nvidia-gpu shared by two containers of one pod"
kubectl create namespace lab01 --dry-run=client -o yaml | kubectl apply -f -
kubectl -n lab01 apply -f examples/scenario-i.yaml
kubectl -n lab01 wait --for=condition=Ready pod/shared-gpu --timeout="$TIMEOUT"
kubectl -n lab01 wait resourceclaim/must-nvidia-gpu --timeout="$TIMEOUT" \
  --for=jsonpath='{.status.allocation.devices.results[0].driver}'="$DRIVER"
uuid="$(allocated_uuid lab01 must-nvidia-gpu)"
for ctr in ctr0 ctr1; do
  seen="$(visible_devices lab01 shared-gpu "$ctr")"
  [[ "$seen" == "$uuid" ]] || die "container $ctr sees GPUs '$seen' in its env, the claim has $uuid"
done
smi0="$(kubectl -n lab01 logs shared-gpu -c ctr0 | grep '^GPU ' || true)"
smi1="$(kubectl -n lab01 logs shared-gpu -c ctr1 | grep '^GPU ' || true)"
[[ "$smi0" == "$smi1" ]] || die "the containers' nvidia-smi -L differ: '$smi0' vs '$smi1'"
echo "both containers see $uuid"

say "template case: a ResourceClaimTemplate gives each Deployment replica its own GPU"
kubectl create namespace lab02 --dry-run=client -o yaml | kubectl apply -f -
kubectl -n lab02 apply -f examples/template-deployment.yaml
kubectl -n lab02 wait --for=condition=Available deployment/gpu-per-pod --timeout="$TIMEOUT"
mapfile -t CLAIMS < <(kubectl -n lab02 get resourceclaims -o name)
((${#CLAIMS[@]} == 2)) || die "expected 2 claims made from the template, found ${#CLAIMS[@]}: ${CLAIMS[*]}"
uuids=()
for claim in "${CLAIMS[@]}"; do
  kubectl -n lab02 wait "$claim" --timeout="$TIMEOUT" \
    --for=jsonpath='{.status.allocation.devices.results[0].driver}'="$DRIVER"
  uuids+=("$(allocated_uuid lab02 "${claim#*/}")")
done
[[ "${uuids[0]}" != "${uuids[1]}" ]] || die "both replicas got the same GPU ${uuids[0]}"
for pod in $(kubectl -n lab02 get pods -l app=gpu-per-pod -o name); do
  seen="$(visible_devices lab02 "${pod#*/}" ctr)"
  [[ " ${uuids[*]} " == *" $seen "* ]] || die "$pod sees GPUs '$seen' in its env, not one of ${uuids[*]}"
done
echo "replicas got ${uuids[*]}"

if [[ "${KEEP:-}" == 1 ]]; then
  say "done; cluster $CLUSTER kept (KUBECONFIG=$KUBECONFIG)"
  exit 0
fi
say "cleaning up: claims made from the template go with their pods"
kubectl -n lab02 delete deployment gpu-per-pod --wait --timeout="$TIMEOUT"
kubectl -n lab02 wait --for=delete "${CLAIMS[@]}" --timeout="$TIMEOUT"
kubectl delete namespace lab02 lab01 --wait --timeout="$TIMEOUT"
if ((created)); then
  kind delete cluster --name "$CLUSTER"
fi
rm -f "$KUBECONFIG"
say "done"
