#!/usr/bin/env bash
# The release notes of one version: its section of CHANGELOG.md (Keep a Changelog), the lines between its
# heading `## [VERSION] - DATE` and the next `## ` heading, without the heading and the blank lines around.
# The release workflow (.github/workflows/release.yaml) gives them to `gh release create`.
#
#   hack/changelog-section.sh VERSION [CHANGELOG]   e.g. hack/changelog-section.sh 0.2.0
#
# Fails, naming the version, when the changelog has no such section or it is empty.
set -euo pipefail
[[ $# -ge 1 && $# -le 2 && -n "$1" ]] || { echo "usage: $0 VERSION [CHANGELOG]" >&2; exit 2; }
version="$1"
changelog="${2:-$(dirname "${BASH_SOURCE[0]}")/../CHANGELOG.md}"
notes="$(awk -v heading="## [$version]" '
  index($0, "## ") == 1 { if (inside) exit; inside = (index($0, heading) == 1) ; next }
  inside { print }
' "$changelog")"
# $(...) drops trailing newlines; the leading blank lines go here.
notes="$(sed '/./,$!d' <<<"$notes")"
[[ -n "$notes" ]] || { echo "$changelog has no section for version $version (## [$version] ...)" >&2; exit 1; }
printf '%s\n' "$notes"
