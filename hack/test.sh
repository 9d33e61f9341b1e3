#!/usr/bin/env bash
# The one command that runs every test: sets up the Python environment, builds (or finds cached)
# Kubernetes binaries, lints, then runs pytest — unit, contract and end-to-end on a real cluster.
# In CI (CI=true) or with FAKEPLUGIN_KIND=1 it also starts our Docker engine (hack/kind/dockerd.sh,
# stopped at the end when it started it) and builds or finds the kind images (hack/kind/images.sh)
# for the kind e2e (tests/kind).
#
#   hack/test.sh [pytest args...]
#
# FAKEPLUGIN_SKIP_BUILD=1 skips building binaries and images (cluster tests then skip, or fail when CI=true).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source hack/setup.sh
say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ "${FAKEPLUGIN_SKIP_BUILD:-}" != "1" ]]; then
  say "building or finding Kubernetes binaries (cold build: tens of minutes on 2 cores)"
  hack/build-k8s.sh >/dev/null
  say "building or finding Kueue (tests/e2e/test_kueue.py; cold: about 6 minutes)"
  hack/build-k8s.sh --only kueue >/dev/null
fi

say "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

# Every tracked shell script: a sh or bash shebang on its first line (links are checked as their target).
say "shellcheck"
shebang='^#!.*(/|env )(ba|da)?sh([[:space:]]|$)'
scripts=()
while IFS= read -r -d '' f; do
  first=""
  [[ -L "$f" ]] || IFS= read -r first <"$f" || true
  if [[ "$first" =~ $shebang ]]; then scripts+=("$f"); fi
done < <(git grep -lzIE "$shebang")
if command -v shellcheck >/dev/null; then
  shellcheck "${scripts[@]}"  # options: .shellcheckrc
elif [[ "${CI:-}" == true ]]; then
  say "shellcheck is missing (hack/setup.sh installs it when root)" && exit 1
else
  say "shellcheck is missing (hack/setup.sh installs it when root): skipped"
fi

started_dockerd=0
if [[ "${CI:-}" == true || "${FAKEPLUGIN_KIND:-}" == 1 ]]; then
  hack/kind/dockerd.sh status 2>/dev/null || started_dockerd=1
  say "kind e2e: our Docker engine (hack/kind/dockerd.sh)"
  hack/kind/dockerd.sh start >/dev/null
  if ((started_dockerd)); then
    trap 'hack/kind/dockerd.sh stop' EXIT
  fi
  if [[ "${FAKEPLUGIN_SKIP_BUILD:-}" != "1" ]]; then
    say "kind e2e: building or finding the images (hack/kind/images.sh; cold: about 20 minutes)"
    hack/kind/images.sh >/dev/null
  fi
fi

say "pytest"
rc=0
.venv/bin/python -m pytest "$@" || rc=$?
exit "$rc"
