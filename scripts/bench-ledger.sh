#!/usr/bin/env bash
# The load tool's ledger section against a real Redis Cluster: starts a
# throwaway 3+3 cluster (and a Sentinel set) on free loopback ports through
# scripts/redis-topologies.sh, runs `go run ./test/bench --only ledger`
# against it and the single Redis of KS_TEST_REDIS_URL, and tears the
# topologies down on exit. Extra arguments go to the load tool, e.g.
#   scripts/bench-ledger.sh --ledger-rate 1000 --out /tmp/ledger.json
# Keys use a prefix unique to the run and are released (one-minute TTL
# besides); nothing is flushed.
set -euo pipefail
cd "$(dirname "$0")/.."
export KS_TEST_REDIS_URL="${KS_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"
# shellcheck source=scripts/redis-topologies.sh
source scripts/redis-topologies.sh
if [ -z "${KS_TEST_REDIS_CLUSTER_URL:-}" ]; then
  echo "bench-ledger: no Redis Cluster (redis-server and redis-cli are needed)" >&2
  exit 1
fi
# Not exec: the EXIT trap of redis-topologies.sh must run afterwards.
go run ./test/bench --only ledger "$@"
