#!/usr/bin/env bash
# The container image's install steps, in one place: the Dockerfile runs them, and
# tests/test_image.py runs the Dockerfile's RUN lines (paths mapped to a temp dir) without Docker,
# so the two cannot drift.
#
#   hack/image-build-steps.sh wheels SRC WHEEL_DIR   regenerate SRC's gRPC stubs, build fakeplugin's wheel
#                                                    and its dependencies' wheels into WHEEL_DIR
#   hack/image-build-steps.sh install WHEEL_DIR VENV create VENV and install fakeplugin from WHEEL_DIR
#                                                    alone (no index), then drop pip from it
#   hack/image-build-steps.sh compiler               install Debian's gcc (apt-get) where there is no C
#                                                    compiler (the Python base images have none)
#   hack/image-build-steps.sh nvml VENV DIR          compile the mock NVML library (fakeplugin/nvml) with
#                                                    the C compiler into DIR/libnvidia-ml.so.1
#   hack/image-build-steps.sh smoke VENV [SRC]       run the installed command line, read the package data
#                                                    a scrape and the fleet view read; with SRC, fail
#                                                    naming each file of SRC/fakeplugin not installed
#
# Environment: PYTHON (default python3) creates the virtual environments.
set -euo pipefail

PYTHON="${PYTHON:-python3}"
say() { printf '[image-build-steps] %s\n' "$*" >&2; }
usage() { sed -n '2,18p' "${BASH_SOURCE[0]}" >&2; exit 2; }

wheels() {
  local src wheel_dir tools tools_req
  src="$(cd "$1" && pwd)"
  wheel_dir="$2"
  tools="$(mktemp -d)"
  # grpcio-tools at the version pyproject.toml pins for development, so stubs match the committed ones.
  tools_req="$("$PYTHON" -c 'import sys, tomllib
deps = tomllib.load(open(sys.argv[1], "rb"))["project"]["optional-dependencies"]["dev"]
print(next(d for d in deps if d.startswith("grpcio-tools")))' "$src/pyproject.toml")"
  say "build tools: $tools_req"
  "$PYTHON" -m venv "$tools"
  "$tools/bin/python" -m pip install --quiet "$tools_req"
  say "generating gRPC stubs from protos/"
  PATH="$tools/bin:$PATH" "$src/hack/gen-protos.sh" "$src"
  say "building wheels into $wheel_dir"
  "$tools/bin/python" -m pip wheel --quiet --wheel-dir "$wheel_dir" "$src"
  rm -rf "$tools"
}

install() {
  local wheel_dir="$1" venv="$2"
  say "installing fakeplugin from $wheel_dir into $venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --no-index --find-links "$wheel_dir" fakeplugin
  "$venv/bin/python" -m pip uninstall --quiet --yes pip
}

compiler() {
  if command -v "${CC:-cc}" >/dev/null; then
    say "C compiler: $(command -v "${CC:-cc}")"
    return
  fi
  say "no C compiler: installing Debian's gcc (apt-get)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null
  rm -rf /var/lib/apt/lists/*
}

nvml() {
  local venv="$1" dir="$2" cache built
  # fakeplugin.nvml.build compiles it (the flags and generated stubs the tests use) into a cache by source
  # hash; the image keeps one copy at a fixed path, the chart's --nvml-library.
  cache="$(mktemp -d)"
  built="$("$venv/bin/python" -I -c 'import pathlib, sys
from fakeplugin.nvml.build import build
print(build(pathlib.Path(sys.argv[1])))' "$cache")"
  mkdir -p "$dir"
  command install -m 0644 "$built" "$dir/libnvidia-ml.so.1"  # the program: install() above is a step
  rm -rf "$cache"
  say "mock NVML library: $dir/libnvidia-ml.so.1 ($(wc -c <"$dir/libnvidia-ml.so.1") bytes)"
}

smoke() {
  local venv="$1" src="${2:-}"
  "$venv/bin/fakeplugin" --help >/dev/null
  "$venv/bin/fakeplugin" profiles
  # -I: the installed package, never a fakeplugin/ in the working directory (the image builds in /src).
  # What every scrape of the telemetry endpoint reads (the XID messages), and the fleet view's files, by the
  # code paths that read them.
  "$venv/bin/python" -I -c 'from importlib import resources
from fakeplugin.telemetry.samples import xid_messages
from fakeplugin.view import server
static = resources.files(server.__package__).joinpath("static")
sizes = ", ".join(f"{n} {len(static.joinpath(n).read_bytes())} bytes" for n, _ in server.STATIC.values())
print(f"package data: {len(xid_messages())} XID messages; the view: {sizes}")'
  if [[ -n "$src" ]]; then
    # Every file below SRC/fakeplugin (links followed: the examples and build sources) is in the package:
    # a link whose target the build did not have (a Dockerfile COPY missing) fails here, named.
    "$venv/bin/python" -I -c 'import os, sys
import fakeplugin
src, installed = os.path.join(sys.argv[1], "fakeplugin"), os.path.dirname(fakeplugin.__file__)
missing = []
for top, dirs, files in os.walk(src, followlinks=True):
    dirs[:] = [d for d in dirs if d != "__pycache__"]
    for name in files:
        rel = os.path.relpath(os.path.join(top, name), src)
        if not name.endswith(".pyc") and not os.path.isfile(os.path.join(installed, rel)):
            missing.append(rel)
if missing:
    sys.exit(f"not installed from {src}: " + " ".join(sorted(missing)))
print(f"every file of {src} installed")' "$src"
  fi
}

[[ $# -ge 1 ]] || usage
step="$1"
shift
case "$step" in
  compiler) [[ $# -eq 0 ]] || usage; compiler ;;
  wheels) [[ $# -eq 2 ]] || usage; wheels "$@" ;;
  install) [[ $# -eq 2 ]] || usage; install "$@" ;;
  nvml) [[ $# -eq 2 ]] || usage; nvml "$@" ;;
  smoke) [[ $# -eq 1 || $# -eq 2 ]] || usage; smoke "$@" ;;
  *) usage ;;
esac
