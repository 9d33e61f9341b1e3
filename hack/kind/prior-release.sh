#!/usr/bin/env bash
# The release before this one as its users have it, made from its commit, for the upgrade test
# (tests/kind/test_upgrade.py): 0.1.0, main at 52c2799 (CHANGELOG.md). Needs the repository's history.
#
#   hack/kind/prior-release.sh OUT_DIR
#
# Into OUT_DIR: tree/ (the commit's files, git archive), the chart packaged from its charts/fakeplugin
# (helm package). The image fakeplugin:<its appVersion>, the chart's default, is built from its own
# Dockerfile on the local Python base (hack/kind/images.sh --bases) with the host's network, as
# demo/kind/run.sh --local builds ours; docker's build cache makes a second build take seconds
# (hack/test.sh builds it in the background during the local tier). On stdout, lines to read (KEY=VALUE):
#   IMAGE=fakeplugin:0.1.0
#   CHART=OUT_DIR/fakeplugin-0.1.0.tgz
#   VALUES=OUT_DIR/tree/examples/seed-lab-values.yaml      the lab's values of that release
#   INVENTORY=OUT_DIR/tree/demo/kind/inventory.yaml        its kind inventory
set -euo pipefail
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0; }
[[ $# == 1 ]] || die "usage: hack/kind/prior-release.sh OUT_DIR"
COMMIT=52c27996b4fb69a18118be0ce4215d2722dd1dc9  # 0.1.0
use_our_docker
docker info >/dev/null 2>&1 || die "no Docker engine answers (start one: hack/kind/dockerd.sh start)"
command -v helm >/dev/null || PATH="$PATH:$K8S_BIN"
command -v helm >/dev/null || die "helm not found on PATH nor in $K8S_BIN (hack/build-k8s.sh --only helm)"

mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
rm -rf "$OUT/tree" && mkdir "$OUT/tree"
git -C "$KIND_REPO" cat-file -e "$COMMIT^{commit}" 2>/dev/null ||
  die "commit $COMMIT (release 0.1.0) is not in $KIND_REPO: the upgrade test needs the history (a full clone, not a shallow one)"
git -C "$KIND_REPO" archive "$COMMIT" | tar -x -C "$OUT/tree"
version="$(sed -nE 's/^appVersion: "?([^"]+)"?$/\1/p' "$OUT/tree/charts/fakeplugin/Chart.yaml")"
[[ -n "$version" ]] || die "no appVersion in $COMMIT's charts/fakeplugin/Chart.yaml"
image="fakeplugin:$version"
base="$("$KIND_REPO/hack/kind/images.sh" --bases | sed -n 's/^PYTHON_IMAGE=//p')"
[[ -n "$base" ]] || die "hack/kind/images.sh --bases printed no PYTHON_IMAGE"
say "$image from $COMMIT (base $base)"
t0=$SECONDS
nice -n 10 docker build -q --network host --build-arg "PYTHON_IMAGE=$base" -t "$image" "$OUT/tree" >/dev/null
say "built $image in $((SECONDS - t0)) s"
helm package "$OUT/tree/charts/fakeplugin" --destination "$OUT" >/dev/null
[[ -f "$OUT/fakeplugin-$version.tgz" ]] || die "helm package wrote no $OUT/fakeplugin-$version.tgz"
printf 'IMAGE=%s\nCHART=%s\nVALUES=%s\nINVENTORY=%s\n' "$image" "$OUT/fakeplugin-$version.tgz" \
  "$OUT/tree/examples/seed-lab-values.yaml" "$OUT/tree/demo/kind/inventory.yaml"
