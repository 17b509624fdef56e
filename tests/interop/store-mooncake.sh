#!/usr/bin/env bash
# Mixed store clusters (issue 36): Mooncake's store client and kvferry's,
# each through the store C API (store_mooncake.c beside this file, loaded
# with dlopen, so the same driver runs on either library), against
# kvferry-master and against mooncake_master. Pairings (client@master):
#
#   mc@kv     Mooncake's client on kvferry-master: put/get 1 KiB..64 MiB,
#             size, batch put/get, exist, batch exist, remove, regex
#             remove, remove all (one process)
#   mc+kv@kv  one Mooncake and one kvferry client on one kvferry-master,
#             each putting 1 KiB..64 MiB and getting the other's objects,
#             byte for byte: replicas land on either client's segment, so
#             bytes cross the TE's Mooncake-compatible TCP both ways
#   mc+mc@kv  two Mooncake clients on kvferry-master, the same exchange
#   mc@mc     Mooncake's client on mooncake_master (the control)
#   mc+mc@mc  two Mooncake clients on mooncake_master (the control)
#   kv@mc     kvferry's client on mooncake_master: the checks of mc@kv.
#             The client finds out by itself that the master speaks only
#             coro_rpc (no mux answer, a ServiceReady answer) and calls it
#             with Mooncake's protocol (store/client moonmaster.go)
#   kv+mc@mc  one kvferry and one Mooncake client on mooncake_master,
#             getting each other's objects 1 KiB..64 MiB byte for byte:
#             segments are published as Mooncake's client does (name and
#             te_endpoint "ip:port", found by the P2P handshake)
#   kv+kv@mc  two kvferry clients on mooncake_master
#
# For the pairs, the master's /query_key (kvferry-master's and
# mooncake_master's admin HTTP) shows whether objects crossed segments.
#
# Runs only with a Mooncake build given; nothing here builds or fetches
# Mooncake:
#
#   MOONCAKE_MASTER=/path/mooncake_master \
#   MOONCAKE_STORE_LIB=/path/libmooncake_store.so tests/interop/store-mooncake.sh
#
# Environment: KVFERRY_LIB_DIR (kvferry's build/lib, default this tree's),
# KVFERRY_MASTER (default build/bin/kvferry-master), PAIRS (default
# "mc@kv mc+kv@kv mc+mc@kv mc@mc mc+mc@mc kv@mc kv+mc@mc kv+kv@mc"),
# SEGMENT_MB (each client's
# segment, default 256), LOGS (a directory that keeps every log).
set -uo pipefail
cd "$(dirname "$0")/../.."
PAIRS="${PAIRS:-mc@kv mc+kv@kv mc+mc@kv mc@mc mc+mc@mc kv@mc kv+mc@mc kv+kv@mc}"
. tests/interop/store-lib.sh
mpid=""
cleanup() { [ -n "$mpid" ] && kill "$mpid" 2>/dev/null; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

# start_master KIND PORT LOG: runs kvferry-master or mooncake_master on
# loopback and waits (deadline 20 s) until its port answers.
start_master() {
  local kind=$1 port=$2 log=$3
  if [ "$kind" = kv ]; then
    mport=$(free_port)
    "$KV_MASTER" --rpc_address=127.0.0.1 --rpc_port="$port" --metrics_port="$mport" >"$log" 2>&1 &
  else
    mport=$(free_port)
    "$MOONCAKE_MASTER" --rpc_port="$port" --rpc_address=127.0.0.1 --enable_http_metadata_server=false \
      --metrics_port="$mport" >"$log" 2>&1 &
  fi
  mpid=$!
  await_port "$kind" "$port"
}

# placement DIR A B: once both drivers have read each other's objects,
# asks the master's admin HTTP (/query_key, kvferry-master's and
# mooncake_master's) where each object's replica lies; a
# putter whose objects lie on two segments wrote one into the other
# client's segment over the TE. Placement is the master's random choice,
# so no crossing is a note, not a failure. Then releases the drivers.
placement() {
  local dir=$1 ends=""
  for _ in $(seq 1200); do [ -f "$dir/$2.done" ] && [ -f "$dir/$3.done" ] && break; sleep 0.1; done
  local crossed=0
  for who in "$2" "$3"; do
    ends=$(for s in 1024 65536 1048576 8388608 67108864; do
      curl -s --max-time 5 "http://127.0.0.1:$mport/query_key?key=$who-$s"
      echo; done | python3 -c 'import json,sys
eps=set()
for l in sys.stdin:
    l=l.strip()
    if l:
        for r in json.loads(l).get("data",[]): eps.add(r["transport_endpoint_"])
print(len(eps))')
    echo "  $pair: $who's objects lie on $ends segment(s)"
    [ "$ends" = 2 ] && crossed=1
  done
  if [ "$crossed" = 1 ]; then
    echo "ok $pair-cross-segment" >>"$LOGDIR/$pair.placement.out"
  else
    echo "  $pair: note: every object lay on its putter's segment (random placement): no TE crossing this run"
  fi
  touch "$dir/release"
}

for pair in $PAIRS; do
  clients=${pair%@*} master=${pair#*@}
  port=$(free_port)
  start_master "$master" "$port" "$LOGDIR/$pair.master.log" || { failed=$((failed + 1)); continue; }
  if [ "${clients#*+}" = "$clients" ]; then
    timeout 300 "$DRV" "$(lib_of "$clients")" "127.0.0.1:$port" "127.0.0.1:$(free_port)" self \
      >"$LOGDIR/$pair.out" 2>"$LOGDIR/$pair.err"
    rc=$?
    count "$LOGDIR/$pair.out"
    [ "$rc" -ge 100 ] && { echo "  $pair: driver exit $rc" >&2; failed=$((failed + 1)); }
  else
    a=${clients%+*} b=${clients#*+}
    sync="$T/sync-$pair"
    mkdir -p "$sync"

    hold=(env PAIR_HOLD=1)
    timeout 300 "${hold[@]}" "$DRV" "$(lib_of "$a")" "127.0.0.1:$port" "127.0.0.1:$(free_port)" pair "$a"1 "$b"2 "$sync" \
      >"$LOGDIR/$pair.a.out" 2>"$LOGDIR/$pair.a.err" &
    apid=$!
    timeout 300 "${hold[@]}" "$DRV" "$(lib_of "$b")" "127.0.0.1:$port" "127.0.0.1:$(free_port)" pair "$b"2 "$a"1 "$sync" \
      >"$LOGDIR/$pair.b.out" 2>"$LOGDIR/$pair.b.err" &
    bpid=$!
    placement "$sync" "$a"1 "$b"2
    wait "$bpid"
    rcb=$?
    wait "$apid"
    rca=$?
    count "$LOGDIR/$pair.a.out"
    count "$LOGDIR/$pair.b.out"
    [ -f "$LOGDIR/$pair.placement.out" ] && count "$LOGDIR/$pair.placement.out"
    for rc in $rca $rcb; do
      [ "$rc" -ge 100 ] && { echo "  $pair: driver exit $rc" >&2; failed=$((failed + 1)); }
    done
  fi
  echo "store-mooncake: $pair done ($passed passed, $failed failed so far)"
  kill "$mpid" 2>/dev/null
  wait "$mpid" 2>/dev/null
  mpid=""
done
echo "store-mooncake: $passed passed, $failed failed (pairings: $PAIRS; Mooncake: $MOONCAKE_MASTER)"
[ "$failed" -eq 0 ]
