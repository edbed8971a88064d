#!/usr/bin/env bash
# Fails when the module has a function nothing reaches from a main or a test
# (golang.org/x/tools/cmd/deadcode -test, pinned below; `go run` fetches it
# through the Go module proxy on a fresh machine). A function that must stay
# although deadcode finds it unreachable (kept for an Example test, a build
# tag, a debugger) is listed in scripts/deadcode.allow, one
# "path/to/file.go: unreachable func: Name" line each (positions are dropped
# so that edits above it do not break the list), with a comment saying why.
#
#   ./scripts/deadcode.sh     # scripts/test.sh runs it; ~20 s of CPU
set -euo pipefail
cd "$(dirname "$0")/.."

version=v0.52.0 # golang.org/x/tools
allow=scripts/deadcode.allow
found=$(go run "golang.org/x/tools/cmd/deadcode@$version" -test ./... | sed -E 's/:[0-9]+:[0-9]+:/:/' | sort)
new=$(comm -23 <(printf '%s\n' "$found" | sed '/^$/d') <(grep -v '^#' "$allow" | sed '/^$/d' | sort))
if [ -n "$new" ]; then
  printf 'deadcode.sh: unreachable code (remove it, or list it in %s with a reason):\n%s\n' "$allow" "$new" >&2
  exit 1
fi
echo "deadcode.sh: no unreachable function"
