#!/usr/bin/env bash
# Run the tests in tiers, fast first (docs/testing.md, "Test tiers"); stop at the first failing tier and
# name it. `.ci/run` is this script with CI=true, where a missing binary or image fails its tests.
#
#   hack/test.sh --fast [pytest args...]   lint + the fast tier: no cluster, no Go build, no Docker (minutes)
#   hack/test.sh --long [pytest args...]   every tier, kind and versions with every module (below)
#   hack/test.sh [pytest args...]          every tier, in this order:
#     lint       ruff, shellcheck
#     fast       pytest's default selection: every test without a tier marker (tests/harness/tiers.py)
#     builds     Kubernetes (hack/build-k8s.sh), Kueue, Karpenter and actionlint (--long: KEDA too); started in the
#                background during the fast tier
#     local      tests marked build or cluster: helm, real local clusters (tests/e2e); --long adds
#                LONG_LOCAL_TESTS (below): the GPU-utilisation HPA through KEDA, Ray from PyPI as a claim's
#                container
#     kind       a kind cluster from images built here (hack/kind/images.sh, built in the background during
#                `local`) running a release of HEAD (hack/release.sh --local: its packaged chart, its image
#                archive): tests/kind/test_upgrade.py, helm upgrade from 0.1.0 with claims prepared, and
#                tests/kind/test_kind.py, the chart with real containers (--long: all of tests/kind,
#                ComputeDomains, the chart's fleet mode, Kueue and the operator-shaped Prometheus on
#                kind too); in CI or with FAKEPLUGIN_KIND=1, else skipped
#     versions   the seed lab's Kubernetes line (1.35; every tier before runs the default, the newest
#                minor with a release): its binaries (built in the background during `local`), then
#                SEED_K8S_TESTS on it, through its alpha gates (--long: SEED_K8S_LONG too;
#                docs/kubernetes-versions.md; every other minor: hack/matrix.sh)
#
# Reports in $FAKEPLUGIN_REPORTS (default reports/): JUnit XML per pytest tier (<tier>.xml), the background
# builds' logs (build-<name>.log) and tiers.txt, each tier's result and wall time; pytest prints its 20
# slowest tests per tier. Ctrl-C or SIGTERM stops the builds it started and, through pytest, any cluster.
# FAKEPLUGIN_SKIP_BUILD=1: no builds (tests that need them skip, or fail when CI=true).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# No release binary is downloaded here (fakeplugin/cluster/downloads.py: no request at all): CI's machines
# reach only package registries, and traffic to dl.k8s.io, github.com or get.helm.sh is flagged there; the
# binaries are built (hack/build-k8s.sh, from the Go module proxy) and the download path is tested against
# a mirror on 127.0.0.1 (tests/test_downloads.py).
export FAKEPLUGIN_OFFLINE=1

FAST_ONLY=0
LONG=0
case "${1:-}" in
  --fast) FAST_ONLY=1 && shift ;;
  --long) LONG=1 && shift ;;
esac
PYTEST_ARGS=("$@")
REPORTS="${FAKEPLUGIN_REPORTS:-reports}"
mkdir -p "$REPORTS"
: >"$REPORTS/tiers.txt"
# The seed lab's line on every run (the default is the newest minor): claims, templates and MIG through
# its scheduler and kubelet, and the DRA features alpha there that `cluster up` turns on (device taints
# through v1alpha3 DeviceTaintRules, the nvidia.com/gpu extended resource, admin access, consumable
# capacity); --long adds the seed-lab demo, the chart and the faults.
SEED_K8S_TESTS=(
  tests/e2e/test_dra.py tests/e2e/test_mig.py tests/e2e/test_extended_resource.py
  tests/e2e/test_admin_access.py tests/e2e/test_consumable_shares.py tests/e2e/test_numa.py
)
SEED_K8S_LONG=(
  tests/e2e/test_demo.py tests/e2e/test_chart_install.py tests/e2e/test_chart_install_rbac.py
  tests/e2e/test_faults.py
)
KIND_TESTS=(tests/kind/test_upgrade.py tests/kind/test_kind.py)
# Left out of the local tier but with --long: GPU-utilisation autoscaling through KEDA, whose build costs
# about 6 minutes on 2 cores (docs/hpa.md); --long builds it after Kueue.
LONG_LOCAL_TESTS=(tests/e2e/test_hpa.py tests/test_keda.py::test_keda_manifests_from_its_module tests/e2e/test_ray.py)
ADDONS=kueue,karpenter,actionlint  # actionlint: the workflow linter of the build tier (tests/test_workflows.py)
LOCAL_ARGS=()
for t in "${LONG_LOCAL_TESTS[@]}"; do LOCAL_ARGS+=("--deselect=$t"); done
if ((LONG)); then
  ADDONS=kueue,karpenter,actionlint,keda
  LOCAL_ARGS=()
  SEED_K8S_TESTS+=("${SEED_K8S_LONG[@]}")
  KIND_TESTS=(tests/kind)
fi

T_START=$SECONDS
SETUP_NEEDS_GO=$((1 - FAST_ONLY)) source hack/setup.sh
say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---- background builds: each in a process group of its own (setsid), stopped on failure or interrupt
declare -A BG_PID=()
background() {  # background NAME COMMAND...: start COMMAND, its output in $REPORTS/build-NAME.log
  local name="$1"
  shift
  say "builds: $name started in the background (log: $REPORTS/build-$name.log)"
  setsid "$@" >"$REPORTS/build-$name.log" 2>&1 &
  BG_PID[$name]=$!
}
await() {  # await NAME: wait for a background build; its log's tail when it failed
  local name="$1" t0=$SECONDS rc=0
  [[ -n "${BG_PID[$name]:-}" ]] || return 0
  say "builds: waiting for $name"
  wait "${BG_PID[$name]}" || rc=$?
  unset "BG_PID[$name]"
  if ((rc)); then
    tail -40 "$REPORTS/build-$name.log" >&2
    say "builds: $name failed (exit $rc; log: $REPORTS/build-$name.log)"
    return "$rc"
  fi
  say "builds: $name done (waited $((SECONDS - t0)) s)"
}
stop_background() {
  local name
  for name in "${!BG_PID[@]}"; do
    kill -TERM -- "-${BG_PID[$name]}" 2>/dev/null || true
  done
}
STARTED_DOCKERD=0
cleanup() {
  stop_background
  if ((STARTED_DOCKERD)); then hack/kind/dockerd.sh stop || true; fi
}
# pytest runs in the background and is waited for, so that a signal reaches this script at once; an
# asynchronous command ignores SIGINT, so pytest is told with SIGTERM, which our pytest plugin turns into
# an interrupt (teardown: its clusters go down).
PYTEST_PID=""
interrupted() {
  say "interrupted: stopping pytest and the builds"
  if [[ -n "$PYTEST_PID" ]]; then
    kill -TERM "$PYTEST_PID" 2>/dev/null || true
    wait "$PYTEST_PID" || true
  fi
  exit 130
}
trap cleanup EXIT
trap interrupted INT TERM

# ---- tiers
CURRENT=""
tier() {  # tier NAME: the next tier begins
  CURRENT="$1"
  TIER_T0=$SECONDS
  say "== tier $CURRENT"
}
passed() {
  printf '%-9s passed  %4d s\n' "$CURRENT" "$((SECONDS - TIER_T0))" | tee -a "$REPORTS/tiers.txt" >&2
}
failed() {
  printf '%-9s FAILED  %4d s\n' "$CURRENT" "$((SECONDS - TIER_T0))" | tee -a "$REPORTS/tiers.txt" >&2
  say "tier $CURRENT failed; later tiers did not run (reports: $REPORTS/)"
  exit 1
}
run_pytest() {  # run_pytest TIER-REPORT PYTEST-ARGS...
  local report="$1" rc=0
  shift
  .venv/bin/python -m pytest --junitxml="$REPORTS/$report.xml" --durations=20 "$@" "${PYTEST_ARGS[@]}" &
  PYTEST_PID=$!
  wait "$PYTEST_PID" || rc=$?
  PYTEST_PID=""
  return "$rc"
}

tier lint
.venv/bin/ruff check . || failed
.venv/bin/ruff format --check . || failed
# Every tracked shell script: a sh or bash shebang on its first line (links are checked as their target).
shebang='^#!.*(/|env )(ba|da)?sh([[:space:]]|$)'
scripts=()
while IFS= read -r -d '' f; do
  first=""
  [[ -L "$f" ]] || IFS= read -r first <"$f" || true
  if [[ "$first" =~ $shebang ]]; then scripts+=("$f"); fi
done < <(git grep -lzIE "$shebang")
if command -v shellcheck >/dev/null; then
  shellcheck "${scripts[@]}" || failed # options: .shellcheckrc
elif [[ "${CI:-}" == true ]]; then
  say "shellcheck is missing (hack/setup.sh installs it when root)" && failed
else
  say "shellcheck is missing (hack/setup.sh installs it when root): skipped"
fi
passed

BUILD=1
[[ "${FAKEPLUGIN_SKIP_BUILD:-}" == 1 || $FAST_ONLY == 1 ]] && BUILD=0
if ((BUILD)); then  # the default minor's binaries, Kueue, Karpenter, actionlint (--long: KEDA too), while the fast tier runs
  background k8s bash -c "hack/build-k8s.sh && hack/build-k8s.sh --only $ADDONS"
fi

tier fast
run_pytest fast || failed
passed
if ((FAST_ONLY)); then
  say "fast tier done in $((SECONDS - T_START)) s (every tier: hack/test.sh)"
  exit 0
fi

KIND=0
[[ "${CI:-}" == true || "${FAKEPLUGIN_KIND:-}" == 1 ]] && KIND=1
SEED_K8S="$(python3 fakeplugin/cluster/versions.py seed)"
tier builds
await k8s || failed
if ((KIND)); then
  hack/kind/dockerd.sh status >/dev/null 2>&1 || STARTED_DOCKERD=1
  hack/kind/dockerd.sh start >/dev/null || failed
fi
if ((BUILD)); then  # what the later tiers need, while `local` runs
  if ((KIND)); then
    # The kind tier's images and what it installs: a release of HEAD (tests/kind/conftest.py) and the prior
    # release's image (tests/kind/test_upgrade.py: its own call then finds it in docker's build cache).
    rm -rf "$REPORTS/kind-release" "$REPORTS/prior-release"
    background kind-images hack/kind/tier-builds.sh "$REPORTS/prior-release" "$REPORTS/kind-release"
  fi
  # What a local cluster runs (no helm: no chart test on this minor but with --long).
  seed_only=(--only "$(.venv/bin/python -c 'from fakeplugin.cluster.binaries import CLUSTER_BINARIES as B; print(",".join(B))')")
  ((LONG)) && seed_only=()
  background seed-k8s env FAKEPLUGIN_K8S_VERSION="$SEED_K8S" nice -n 5 hack/build-k8s.sh "${seed_only[@]}"
fi
passed

tier local
run_pytest local -m "build or cluster" "${LOCAL_ARGS[@]}" || failed
passed

tier kind
if ((KIND)); then
  await kind-images || failed
  # Made by the background build above; without it (FAKEPLUGIN_SKIP_BUILD=1) the kind session makes its own.
  if [[ -f "$REPORTS/kind-release/SHA256SUMS" ]]; then
    FAKEPLUGIN_KIND_RELEASE="$(cd "$REPORTS/kind-release" && pwd)"
    export FAKEPLUGIN_KIND_RELEASE
  fi
  run_pytest kind -m kind "${KIND_TESTS[@]}" || failed
  passed
else
  say "kind: skipped (runs in CI, or with FAKEPLUGIN_KIND=1)"
fi

tier versions
await seed-k8s || failed
FAKEPLUGIN_K8S_VERSION="$SEED_K8S" run_pytest versions "${SEED_K8S_TESTS[@]}" || failed
passed
say "every tier passed in $((SECONDS - T_START)) s (reports: $REPORTS/)"
