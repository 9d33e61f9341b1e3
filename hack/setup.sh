#!/usr/bin/env bash
# Sourced by hack/demo.sh and hack/test.sh: everything a fresh clone needs before the first command runs.
#   - host tools the local cluster uses (unshare, openssl), from Debian's packages when root and missing;
#   - likewise the tests' tools: the shells and awks the fake nvidia-smi is tested under (dash, mawk,
#     busybox, gawk: tests/smi_shells.py), shellcheck (hack/test.sh), Debian's prometheus with its
#     promtool (`cluster up --with prometheus`, tests/test_prometheus.py, tests/e2e/test_prometheus.py),
#     chromium and its chromedriver (the fleet view's browser test, tests/e2e/test_fleet_view.py);
#     without them those tests skip, or fail when CI=true (installing gawk makes it Debian's default awk;
#     the tests name each awk);
#   - Go >= 1.25 present (it builds the real Kubernetes binaries; checked, not installed; not for the
#     fast tier, SETUP_NEEDS_GO=0);
#   - .venv with fakeplugin (editable) and its test dependencies.
# Idempotent and quiet when everything is already there.

say() { printf '[setup %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# command:package of each host tool; the first two the local cluster cannot do without.
missing=()
for tool in unshare:util-linux openssl:openssl dash:dash mawk:mawk busybox:busybox gawk:gawk \
  shellcheck:shellcheck prometheus:prometheus chromium:chromium chromedriver:chromium-driver; do
  command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    say "installing ${missing[*]} (apt-get)"
    # No daemon of these packages may start: Debian's prometheus would run its own service on :9090
    # (prometheus.service, /etc/init.d/prometheus), where `cluster up --with prometheus` runs a server of
    # its own. invoke-rc.d and deb-systemd-invoke ask /usr/sbin/policy-rc.d first; one that answers 101
    # (action forbidden, as Docker images ship it) stands while apt runs, then its service is disabled
    # for boot too. --no-install-recommends: not prometheus-node-exporter (another daemon) either.
    policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
      policy=/usr/sbin/policy-rc.d
      printf '#!/bin/sh\n# hack/setup.sh: no daemon starts while it installs\nexit 101\n' >"$policy"
      chmod 755 "$policy"
    fi
    installed=0
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || installed=$?
    [[ -z $policy ]] || rm -f "$policy"
    if [[ " ${missing[*]} " == *" prometheus "* ]] && command -v update-rc.d >/dev/null; then
      update-rc.d prometheus disable >/dev/null 2>&1 || true
      if [[ -d /run/systemd/system ]]; then systemctl disable --now prometheus.service >/dev/null 2>&1 || true; fi
    fi
    ((installed == 0)) || exit "$installed"
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
