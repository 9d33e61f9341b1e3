#!/usr/bin/env bash
# The version a release tag names, checked against the package's: tag `vX.Y.Z` releases version X.Y.Z,
# which must be fakeplugin.__version__ (the one version of the package, the chart and the image,
# docs/support.md). Prints the version, and writes `version=X.Y.Z` to $GITHUB_OUTPUT when set (the
# release workflow's first step, .github/workflows/release.yaml).
#
#   hack/release-version.sh TAG    e.g. hack/release-version.sh v0.2.0
#
# Reads fakeplugin/__init__.py of this checkout (no install needed); $PYTHON (default python3) runs it.
set -euo pipefail
[[ $# -eq 1 ]] || { echo "usage: $0 TAG (e.g. v0.2.0)" >&2; exit 2; }
tag="$1"
[[ "$tag" =~ ^v[0-9]+\.[0-9]+\.[0-9]+([-+].*)?$ ]] ||
  { echo "release tag $tag: not v followed by a version (vMAJOR.MINOR.PATCH)" >&2; exit 1; }
version="${tag#v}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
"${PYTHON:-python3}" -c '
import sys

import fakeplugin

tag, version = sys.argv[1:]
if version != fakeplugin.__version__:
    sys.exit(f"release tag {tag} is version {version}, but fakeplugin.__version__ is {fakeplugin.__version__}")
' "$tag" "$version"
if [[ -n "${GITHUB_OUTPUT:-}" ]]; then echo "version=$version" >>"$GITHUB_OUTPUT"; fi
echo "$version"
