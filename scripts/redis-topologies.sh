#!/usr/bin/env bash
# Starts a throwaway Redis Cluster (3 primaries + 3 replicas) and a Sentinel
# set (one primary, one replica, three sentinels) on free loopback ports, for
# the scale tests (test/scale_*_test.go), and exports their URLs:
#   KS_TEST_REDIS_CLUSTER_URL   redis://127.0.0.1:P1?addr=127.0.0.1:P2&addr=…
#   KS_TEST_REDIS_SENTINEL_URL  redis://127.0.0.1:S1?master_name=ksmaster&addr=…
# Source it (scripts/test.sh does); it tears everything down on exit (trap).
# Only Debian's redis-server and redis-cli are needed.

ks_topo_dir=$(mktemp -d /tmp/ks-redis-topo.XXXXXX)

# ks_topo_kill stops every server started so far and forgets their ports.
ks_topo_kill() {
  local f pids=()
  for f in "$ks_topo_dir"/*.pid; do
    [ -f "$f" ] && pids+=("$(cat "$f")")
  done
  [ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null
  # Wait (up to 5 s) for them to exit, so their ports are free again.
  local p alive
  for _ in $(seq 1 50); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break
    sleep 0.1
  done
  rm -rf "${ks_topo_dir:?}"/*
}

ks_topo_down() {
  ks_topo_kill
  rm -rf "$ks_topo_dir"
}
trap ks_topo_down EXIT

# A free port: a random port nothing answers on, nor on its cluster bus port
# (+10000), both below the kernel's ephemeral range. An outgoing connection
# holds its local port too, so a port in the ephemeral range can be "free" to
# a connect probe and still fail to bind (seen under load: "bind: Address
# already in use" three tries in a row).
ks_eph_low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
ks_free_port() {
  local p span=$(( ks_eph_low - 10000 - 12000 ))
  [ "$span" -lt 1000 ] && span=1000
  for _ in $(seq 1 200); do
    p=$(( 12000 + RANDOM % span ))
    if ! (exec 3<>/dev/tcp/127.0.0.1/$p) 2>/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/$((p + 10000))) 2>/dev/null &&
       ! grep -qw "$p" "$ks_topo_dir/ports" 2>/dev/null; then
      echo "$p" >>"$ks_topo_dir/ports"
      echo "$p"; return 0
    fi
  done
  echo "redis-topologies: no free port" >&2; return 1
}

ks_redis() { # port, extra args...
  local p=$1; shift
  mkdir -p "$ks_topo_dir/$p"
  # repl-diskless-sync-delay 0: a replica's first sync starts at once, not
  # after Redis's default 5 s wait for more replicas to share it.
  redis-server --port "$p" --bind 127.0.0.1 --daemonize yes --dir "$ks_topo_dir/$p" --save "" --appendonly no \
    --repl-diskless-sync-delay 0 --pidfile "$ks_topo_dir/$p.pid" --logfile "$ks_topo_dir/$p.log" "$@"
}

ks_wait() { # what, command...
  local what=$1; shift
  for _ in $(seq 1 100); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "redis-topologies: $what did not come up; last log lines:" >&2
  tail -n 3 "$ks_topo_dir"/*.log >&2 2>/dev/null || true
  return 1
}

ks_topo_up() {
  local ports=() p i addrs=""
  for i in 1 2 3 4 5 6; do p=$(ks_free_port) || return 1; ports+=("$p"); done
  for p in "${ports[@]}"; do
    ks_redis "$p" --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 || return 1
  done
  for p in "${ports[@]}"; do ks_wait "cluster node $p" redis-cli -p "$p" ping || return 1; done
  redis-cli --cluster create $(for p in "${ports[@]}"; do printf '127.0.0.1:%s ' "$p"; done) \
    --cluster-replicas 1 --cluster-yes >"$ks_topo_dir/cluster-create.log" 2>&1 || return 1
  for p in "${ports[@]}"; do
    ks_wait "cluster state on $p" sh -c "redis-cli -p $p cluster info | grep -q cluster_state:ok" || return 1
  done
  # Up means replicated, as every node sees it: CLUSTER SLOTS lists a
  # replica only once it has synced, and a client that loaded the topology
  # before then knows no replica at all (a test of CLUSTER FAILOVER then
  # fails over nothing); a test may start the moment this script returns.
  for p in "${ports[@]}"; do
    ks_wait "cluster replicas seen by $p" sh -c "[ \$(redis-cli -p $p cluster slots | grep -c '^127.0.0.1\$') -eq 6 ]" || return 1
  done
  for p in "${ports[@]:1}"; do addrs+="&addr=127.0.0.1:$p"; done
  export KS_TEST_REDIS_CLUSTER_URL="redis://127.0.0.1:${ports[0]}?${addrs#&}"

  local primary replica s sents=()
  primary=$(ks_free_port) || return 1; replica=$(ks_free_port) || return 1
  ks_redis "$primary" || return 1
  ks_redis "$replica" --replicaof 127.0.0.1 "$primary" || return 1
  ks_wait "sentinel primary" redis-cli -p "$primary" ping || return 1
  ks_wait "sentinel replica sync" sh -c "redis-cli -p $replica info replication | grep -q master_link_status:up" || return 1
  for i in 1 2 3; do
    s=$(ks_free_port) || return 1; sents+=("$s")
    cat >"$ks_topo_dir/sentinel-$s.conf" <<CONF
port $s
bind 127.0.0.1
daemonize yes
pidfile $ks_topo_dir/$s.pid
logfile $ks_topo_dir/$s.log
dir $ks_topo_dir
sentinel monitor ksmaster 127.0.0.1 $primary 2
sentinel down-after-milliseconds ksmaster 1000
sentinel failover-timeout ksmaster 5000
CONF
    redis-server "$ks_topo_dir/sentinel-$s.conf" --sentinel || return 1
  done
  for s in "${sents[@]}"; do
    ks_wait "sentinel $s" sh -c "redis-cli -p $s sentinel replicas ksmaster | grep -q $replica" || return 1
  done
  export KS_TEST_REDIS_SENTINEL_URL="redis://127.0.0.1:${sents[0]}?master_name=ksmaster&addr=127.0.0.1:${sents[1]}&addr=127.0.0.1:${sents[2]}"
}

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
  ks_topo_start=$(date +%s)
  # A random port can be taken between the check and the start: up to three
  # tries, each from scratch.
  ks_topo_try=1
  until ks_topo_up; do
    if [ "$ks_topo_try" -ge 3 ]; then
      echo "redis-topologies: giving up after $ks_topo_try tries" >&2; exit 1
    fi
    echo "redis-topologies: try $ks_topo_try failed; starting over" >&2
    ks_topo_kill; ks_topo_try=$((ks_topo_try + 1))
  done
  echo "redis-topologies: cluster and sentinel up in $(( $(date +%s) - ks_topo_start ))s"
else
  echo "redis-topologies: redis-server or redis-cli missing: the cluster and sentinel tests fail with CI=true" >&2
fi
