#!/usr/bin/env bash
# Regenerates cmd/knowledge-sidecar/default.pgo, the profile `go build`
# uses for the sidecar by default (-pgo=auto), from CPU profiles the load
# tool takes of the sidecar under its cpu section's loads: pass-through
# 1 KiB and 64 KiB (32 connections), search, the 32 KiB read and the 10 KiB
# on_demand turn (8 connections), over the SQL catalog on the MariaDB of
# KS_TEST_MYSQL_DSN like every run of the tool. The profiles are merged with
# `go tool pprof -proto`. The profiled binary is the load tool itself,
# built without PGO; its proxy, knowledge, coreclient and net/http code is
# the sidecar's.
#
#   scripts/pgo.sh                # about 2 minutes: five 10 s profiles plus short rounds
#   scripts/pgo.sh --measure      # then the gain: PGO build vs -pgo=off, interleaved (about 4 more minutes)
#   PGO_PROFILE_DUR=20s scripts/pgo.sh
#
# Everything listens on 127.0.0.1; the tool is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/.."
measure=false
if [ "${1:-}" = "--measure" ]; then
  measure=true
  shift
fi
dur="${PGO_PROFILE_DUR:-10s}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
go build -pgo=off -o "$work/bench" ./test/bench
start=$(date +%s)
"$work/bench" --only cpu --nginx=false --pairs 5 --warmup 200ms --cpu-dur 300ms \
  --profile "$work/prof" --profile-dur "$dur" "$@" >"$work/profile-run.txt"
shopt -s nullglob
profiles=("$work"/prof/cpu-sidecar-*.pprof)
if [ "${#profiles[@]}" -lt 5 ]; then
  echo "pgo: expected 5 sidecar profiles, got ${#profiles[@]} (see the run above)" >&2
  exit 1
fi
go tool pprof -proto "${profiles[@]}" >"$work/merged.pgo"
mv "$work/merged.pgo" cmd/knowledge-sidecar/default.pgo
echo "pgo: wrote cmd/knowledge-sidecar/default.pgo from ${#profiles[@]} profiles ($(($(date +%s) - start)) s)"
if $measure; then
  go build -pgo=cmd/knowledge-sidecar/default.pgo -o "$work/bench-pgo" ./test/bench
  "$work/bench" --only cpu --pairs 6 --cpu-dur 1500ms --cpu-variant "pgo=bin:$work/bench-pgo" "$@"
fi
