#!/usr/bin/env bash
# staticcheck (honnef.co/go/tools, pinned below; `go run` fetches it through
# the Go module proxy on a fresh machine) over the whole module, tests
# included, with its default checks; any finding fails. scripts/test.sh runs
# it. About 1 min of CPU with warm caches (4.5 min of wall time on a 2-core
# machine at load average 22); a cold cache adds the build of staticcheck
# and the analysis of every dependency.
#
#   ./scripts/staticcheck.sh
set -euo pipefail
cd "$(dirname "$0")/.."

version=v0.8.2 # honnef.co/go/tools (staticcheck 2026.2.2)
go run "honnef.co/go/tools/cmd/staticcheck@$version" ./...
echo "staticcheck.sh: no finding"
