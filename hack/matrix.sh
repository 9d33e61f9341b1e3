#!/usr/bin/env bash
# The Kubernetes version matrix on this machine: for each version, build (or find cached) its binaries,
# run the seed-lab demo, the e2e suite (chart install and MIG included) against a local cluster of that
# version, and print one results table (markdown, for docs/kubernetes-versions.md).
#
#   hack/matrix.sh [VERSION...]              default: the newest patch of every minor (versions.py matrix)
#   MATRIX_TESTS="tests/e2e/test_mig.py" hack/matrix.sh v1.37.2     a subset of the e2e suite
#
# A cold build is ~12 minutes or more per version on 2 cores (run at nice 10); logs of every step in
# $MATRIX_LOGS (default /tmp/fakeplugin-matrix). Exit status: 0 only when every cell passed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source hack/setup.sh

VERSIONS=("$@")
[[ ${#VERSIONS[@]} -gt 0 ]] || mapfile -t VERSIONS < <(python3 fakeplugin/cluster/versions.py matrix)
TESTS="${MATRIX_TESTS:-tests/e2e}"
read -r -a TEST_PATHS <<<"$TESTS"  # one pytest argument per space-separated path
LOGS="${MATRIX_LOGS:-/tmp/fakeplugin-matrix}"
mkdir -p "$LOGS"
say() { printf '[matrix %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# pytest's summary line, e.g. "41 passed, 1 skipped in 300.12s", without the time.
summary() { grep -E '[0-9]+ (passed|failed|error).* in [0-9.]+s' "$1" | tail -1 | sed -E 's/^=+ //; s/ in [0-9.]+s.*//' || true; }

ROWS=()
FAILED=0
for v in "${VERSIONS[@]}"; do
  t0=$SECONDS
  say "$v: building or finding binaries"
  if K8S_VERSION="$v" nice -n 10 hack/build-k8s.sh >"$LOGS/$v-build.log" 2>&1; then
    build="ok ($((SECONDS - t0)) s)"
  else
    ROWS+=("| $v | FAILED (see $LOGS/$v-build.log) | – | – | – | – |")
    FAILED=1
    continue
  fi

  say "$v: fakeplugin demo"
  if .venv/bin/fakeplugin demo --kubernetes-version "$v" --state-dir "$LOGS/demo-$v" >"$LOGS/$v-demo.log" 2>&1; then
    demo="ok"
  else
    demo="FAILED"
    FAILED=1
  fi

  say "$v: pytest $TESTS"
  export FAKEPLUGIN_K8S_VERSION="$v"
  rc=0
  # --ignore test_demo.py: the demo column above ran the same command.
  .venv/bin/python -m pytest -q -p no:cacheprovider -rfE --junitxml="$LOGS/$v-e2e.xml" \
    --ignore=tests/e2e/test_demo.py "${TEST_PATHS[@]}" \
    >"$LOGS/$v-e2e.log" 2>&1 || rc=$?
  unset FAKEPLUGIN_K8S_VERSION
  [[ $rc -eq 0 ]] || FAILED=1
  e2e="$(summary "$LOGS/$v-e2e.log")"
  # The chart install (test_chart_install*.py) and MIG modules' own counts, from the JUnit report.
  cell() {
    python3 - "$LOGS/$v-e2e.xml" "$1" <<'EOF'
import sys
import xml.etree.ElementTree as ET

try:
    # a module named like sys.argv[2] or beginning with it (test_chart_install: test_chart_install_rbac too)
    cases = [
        c
        for c in ET.parse(sys.argv[1]).iter("testcase")
        if any(part.startswith(sys.argv[2]) for part in c.get("classname", "").split("."))
    ]
except (OSError, ET.ParseError):
    cases = []
bad = [c for c in cases if c.find("failure") is not None or c.find("error") is not None]
skipped = [c for c in cases if c.find("skipped") is not None]
ok = len(cases) - len(bad) - len(skipped)
print("not run" if not cases else f"{ok} passed" + (f", {len(bad)} FAILED" if bad else "") + (f", {len(skipped)} skipped" if skipped else ""))
EOF
  }
  ROWS+=("| $v | $build | $demo | ${e2e:-no summary (see $LOGS/$v-e2e.log)} | $(cell test_chart_install) | $(cell test_mig) |")
  say "$v: done in $((SECONDS - t0)) s"
done

echo
echo "| Kubernetes | build | demo | e2e ($TESTS) | chart install | MIG e2e |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${ROWS[@]}"
exit $FAILED
