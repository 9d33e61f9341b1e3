#!/usr/bin/env bash
# Sourced by hack/demo.sh and hack/test.sh: everything a fresh clone needs before the first command runs.
#   - host tools the local cluster uses (unshare, openssl), from Debian's packages when root and missing;
#   - likewise the tests' tools: the shells and awks the fake nvidia-smi is tested under (dash, mawk,
#     busybox, gawk: tests/smi_shells.py), shellcheck (hack/test.sh), chromium and its chromedriver (the
#     fleet view's browser test, tests/e2e/test_fleet_view.py); without them those tests skip,
#     or fail when CI=true (installing gawk makes it Debian's default awk; the tests name each awk);
#   - Go >= 1.25 present (it builds the real Kubernetes binaries; checked, not installed; not for the
#     fast tier, SETUP_NEEDS_GO=0);
#   - .venv with fakeplugin (editable) and its test dependencies.
# Idempotent and quiet when everything is already there.

say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# command:package of each host tool; the first two the local cluster cannot do without.
missing=()
for tool in unshare:util-linux openssl:openssl dash:dash mawk:mawk busybox:busybox gawk:gawk \
  shellcheck:shellcheck chromium:chromium chromedriver:chromium-driver; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]} (apt-get)"
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  elif ! command -v unshare >/dev/null || ! command -v openssl >/dev/null; then
    say "the local cluster needs unshare (util-linux) and openssl: install them" && exit 1
  else
    say "tests that need ${missing[*]} skip (CI=true: fail): install them"
  fi
fi
# The fast tier (hack/test.sh --fast) builds nothing: SETUP_NEEDS_GO=0 there.
if [[ "${SETUP_NEEDS_GO:-1}" == 1 ]] && ! command -v go >/dev/null; then
  say "building the Kubernetes binaries needs Go >= 1.25 on PATH"
  exit 1
fi

if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  python3 -m venv .venv
fi
say "installing fakeplugin and test dependencies into .venv"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev]'
