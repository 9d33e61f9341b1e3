#!/usr/bin/env bash
# What hack/test.sh's kind tier needs, built in the background during the local tier:
#
#   hack/kind/tier-builds.sh PRIOR_OUT RELEASE_OUT
#
# the base images (hack/kind/images.sh --bases), then side by side: the rest of the kind images (the node
# image: the long part on a cold machine) and, one after the other, the prior release's image and chart
# into PRIOR_OUT (hack/kind/prior-release.sh, for tests/kind/test_upgrade.py) and a release of HEAD into
# RELEASE_OUT (hack/release.sh --local, with the image repository of tests/harness/kind.py; the kind
# session installs it). Fails when either side fails, after both ended.
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ $# == 2 ]] || die "usage: hack/kind/tier-builds.sh PRIOR_OUT RELEASE_OUT"
HACK="$KIND_REPO/hack"
"$HACK/kind/images.sh" --bases >/dev/null
"$HACK/kind/images.sh" >/dev/null &
images=$!
releases=0
"$HACK/kind/prior-release.sh" "$1" >/dev/null &&
  "$HACK/release.sh" --local --allow-dirty --out "$2" --image-repository fakeplugin.local/fakeplugin >/dev/null ||
  releases=$?
rc=0
wait "$images" || rc=$?
((rc == 0)) || die "hack/kind/images.sh failed (exit $rc)"
((releases == 0)) || die "the releases failed (exit $releases)"
say "kind images and releases built"
