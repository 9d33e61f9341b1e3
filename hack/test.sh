#!/usr/bin/env bash
# The one command that runs every test: sets up the Python environment, builds (or finds cached)
# Kubernetes binaries, lints, then runs pytest — unit, contract and end-to-end on a real cluster.
#
#   hack/test.sh [pytest args...]
#
# FAKEPLUGIN_SKIP_BUILD=1 skips building binaries (cluster tests then skip, or fail when CI=true).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

source hack/setup.sh
say() { printf '[test %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

if [[ "${FAKEPLUGIN_SKIP_BUILD:-}" != "1" ]]; then
  say "building or finding Kubernetes binaries (cold build: tens of minutes on 2 cores)"
  hack/build-k8s.sh >/dev/null
fi

say "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .

say "pytest"
exec .venv/bin/python -m pytest "$@"
