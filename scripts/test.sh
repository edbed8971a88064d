#!/usr/bin/env bash
# The whole test suite, from a fresh machine: start MariaDB and Redis if they
# are stopped, create the test database, then vet and run every test with the
# race detector. This is the command the README names and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."

export KS_TEST_MYSQL_DSN="${KS_TEST_MYSQL_DSN:-root@tcp(127.0.0.1:3306)/ks_test?parseTime=true&loc=UTC&charset=utf8mb4}"
export KS_TEST_REDIS_URL="${KS_TEST_REDIS_URL:-redis://127.0.0.1:6379/15}"

# Progress: each step is announced with the time so far, and a ticker prints
# the current step once a minute while a step is silent (go test prints
# nothing while it compiles). The ticker ends with this script.
started=$(date +%s)
step_file=$(mktemp)
elapsed() { local s=$(($(date +%s) - started)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }
step() { echo "$*" >"$step_file"; echo "test.sh: [$(elapsed)] $*"; }
(
  while sleep 60 </dev/null >/dev/null 2>&1 && kill -0 $$ 2>/dev/null; do
    echo "test.sh: [$(elapsed)] still running: $(cat "$step_file" 2>/dev/null)"
  done
) &
ticker=$!
stop_ticker() { kill "$ticker" 2>/dev/null || true; rm -f "$step_file"; }
trap stop_ticker EXIT
step "starting services"

wait_for() { # name, probe command...
  local name=$1; shift
  for _ in $(seq 1 60); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  echo "test.sh: $name did not come up" >&2; return 1
}

if ! mariadb-admin -uroot -h127.0.0.1 ping >/dev/null 2>&1; then
  echo "test.sh: starting MariaDB"
  if command -v start-stop-daemon >/dev/null 2>&1 && [ -x /usr/sbin/mariadbd ]; then
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld 2>/dev/null || true
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  else
    service mariadb start
  fi
  wait_for MariaDB mariadb-admin -uroot -h127.0.0.1 ping
fi
if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
  echo "test.sh: starting Redis"
  mkdir -p /var/lib/redis /var/log/redis
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping
fi

step "Redis Cluster and Sentinel set"
# A throwaway Redis Cluster (3 primaries + 3 replicas) and Sentinel set on free
# loopback ports for the scale tests (test/scale_*_test.go), torn down on exit;
# their URLs are exported in KS_TEST_REDIS_CLUSTER_URL and
# KS_TEST_REDIS_SENTINEL_URL (with CI=true the tests fail when these are unset).
# shellcheck source=scripts/redis-topologies.sh
. scripts/redis-topologies.sh
trap 'ks_topo_down; stop_ticker' EXIT # the topologies' own trap, and the ticker's

step "tools the tests run, installed when missing; npm ci in test/mcpjs"
# promtool (Debian package prometheus) unit-tests the alert rules in
# deploy/prometheus. Installed when missing; only when apt is unavailable does
# the Go test skip (it says so), and with CI=true a failed install fails it.
if ! command -v promtool >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; fi
    echo "test.sh: installing promtool (apt-get install prometheus)"
    if ! { timeout 300 $SUDO apt-get update -qq &&
           DEBIAN_FRONTEND=noninteractive timeout 600 $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }; then
      echo "test.sh: could not install promtool; the alert-rule test fails with CI=true" >&2
    fi
  else
    export KS_PROMTOOL_UNAVAILABLE="apt-get is not available on this machine"
    echo "test.sh: promtool is missing and apt-get is unavailable: the alert-rule unit test will be skipped" >&2
  fi
fi

# python3 runs the non-Go client example (examples/python); with CI=true its
# test fails when python3 is missing.
if ! command -v python3 >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "test.sh: installing python3"
  { timeout 300 ${SUDO:-} apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 ${SUDO:-} apt-get install -y -qq --no-install-recommends python3 >/dev/null; } ||
    echo "test.sh: could not install python3; the Python example's test fails with CI=true" >&2
fi

# jq runs the demo walkthrough's audit line over the file `demo --audit`
# writes (TestDemoAudit); with CI=true that test fails when jq is missing.
if ! command -v jq >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "test.sh: installing jq"
  { timeout 300 ${SUDO:-} apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 ${SUDO:-} apt-get install -y -qq --no-install-recommends jq >/dev/null; } ||
    echo "test.sh: could not install jq; the demo audit test fails with CI=true" >&2
fi

# node runs the official MCP TypeScript SDK client and the MCP Inspector CLI
# against the remote MCP endpoint (cmd/knowledge-sidecar/mcp_remote_clients_test.go),
# at the exact versions of test/mcpjs/package-lock.json (npm ci); with CI=true
# that test fails when they are missing.
if ! command -v npm >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  echo "test.sh: installing nodejs and npm"
  { timeout 300 ${SUDO:-} apt-get update -qq && DEBIAN_FRONTEND=noninteractive timeout 600 ${SUDO:-} apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null; } ||
    echo "test.sh: could not install nodejs; the MCP client tests fail with CI=true" >&2
fi
if command -v npm >/dev/null 2>&1; then
  (cd test/mcpjs && timeout 600 npm ci --no-audit --no-fund --loglevel=error >/dev/null) ||
    echo "test.sh: npm ci in test/mcpjs failed; the MCP client tests fail with CI=true" >&2
fi

# The base test database. Tests that mutate data create their own databases
# (ks_test_<random>) next to it and drop them when they finish.
mariadb -uroot -h127.0.0.1 -e "CREATE DATABASE IF NOT EXISTS ks_test CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"

step "go mod download, go vet"
go mod download
go vet ./...
# No function that nothing reaches (deadcode -test; an allowlist for the
# few kept on purpose): about a minute on a loaded 2-core machine.
step "deadcode"
./scripts/deadcode.sh
# staticcheck, pinned in the script, tests included: no finding.
step "staticcheck"
./scripts/staticcheck.sh
step "go test -race ./..."
go test -race -count=1 -timeout 20m ./... "$@"
# Every benchmark once: they are the performance evidence (docs/performance.md),
# and one whose setup broke would otherwise only be found by the next person
# to measure (BenchmarkServiceRead answered 409 for a while).
step "every benchmark once"
go test -run '^$' -bench . -benchtime 1x ./...
# A short run of every fuzz target (2 s each: 14 targets took 35-60 s on a
# loaded 2-core machine); a finding fails the suite. Longer sessions:
# ./scripts/fuzz.sh [duration] (docs/reliability.md, "Fuzzing").
step "fuzz targets, ${KS_FUZZ_TIME:-2s} each"
./scripts/fuzz.sh "${KS_FUZZ_TIME:-2s}"
echo "test.sh: [$(elapsed)] all passed"
