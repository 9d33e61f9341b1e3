#!/usr/bin/env bash
# The first command from a fresh clone: sets up what is missing (hack/setup.sh), builds the Kubernetes
# binaries if they are not cached yet (about 12 minutes cold on 2 cores, with progress), then runs
# `fakeplugin demo`: the seed lab end to end on a real local cluster, cleaned up afterwards.
#
#   hack/demo.sh [--keep]    (arguments go to `fakeplugin demo`; see `fakeplugin demo --help`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source hack/setup.sh
exec .venv/bin/fakeplugin demo "$@"
