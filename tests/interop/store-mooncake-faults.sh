#!/usr/bin/env bash
# Store faults in mixed clusters (issue 36), beside store-mooncake.sh and
# through the same C driver (store_mooncake.c, dlopen of either library).
# Cases (case:clients@master):
#
#   kill:C@M     two clients of library C on master M: the victim puts small
#                objects (on its own segment), then loops over 64 MiB puts
#                and is SIGKILLed mid-loop; the survivor checks the object
#                being put is missing or whole, never half-written, that its
#                own puts and gets keep working, that the victim's objects
#                go once its client TTL ran out (segment reclaimed), and
#                that the interrupted key can be put again (on kvferry-master
#                within REPUT_S of the objects going, as the client's expiry
#                frees it; mooncake_master frees it after its discard timeout)
#   restart:C@M  one client of library C puts objects, the master is
#                SIGKILLed and restarted on the same port; the client must
#                reconnect (remount) and put and get again. kvferry-master
#                runs with --oplog_dir, so its objects must survive
#                (EXPECT_KEEP); mooncake_master 3b5a594 persists nothing
#                by default (its snapshots are periodic and off), so there
#                only reconnection and new puts are checked
#
# C is mc (Mooncake's libmooncake_store.so) or kv (libkvferry.so), or for
# kill V+S the victim's and the survivor's (kill:mc+kv@kv: a Mooncake
# client dies, a kvferry client survives); M is kv
# (kvferry-master) or mc (mooncake_master). kv@mc is not here: kvferry's
# client does not speak coro_rpc yet.
#
#   MOONCAKE_MASTER=/path/mooncake_master \
#   MOONCAKE_STORE_LIB=/path/libmooncake_store.so tests/interop/store-mooncake-faults.sh
#
# Environment: KVFERRY_LIB_DIR, KVFERRY_MASTER, SEGMENT_MB, LOGS as in
# store-mooncake.sh; CASES (default all seven); CLIENT_TTL (seconds, default 3);
# PUT_DISCARD_S (--put_start_discard_timeout_sec, default the masters' 30 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
CASES="${CASES:-kill:mc@kv kill:kv@kv kill:mc+kv@kv kill:mc@mc restart:mc@kv restart:kv@kv restart:mc@mc}"
TTL="${CLIENT_TTL:-3}"
# --put_start_discard_timeout_sec, when given (both masters default to
# 30 s: how long a put started and never ended blocks its key).
DISCARD="${PUT_DISCARD_S:-}"
export RECLAIM_S=$((TTL * 4 + 30))
. tests/interop/store-lib.sh
mpid="" pids=()
cleanup() {
  for p in "${pids[@]}" $mpid; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
wait_for() { # wait_for PATH SECONDS
  for _ in $(seq $(($2 * 10))); do [ -e "$1" ] && return 0; sleep 0.1; done
  return 1
}

# start_master KIND PORT LOG [OPLOG]: runs a master on loopback with the
# client TTL and waits (deadline 20 s) until its port answers.
start_master() {
  local kind=$1 port=$2 log=$3 oplog=${4:-}
  if [ "$kind" = kv ]; then
    "$KV_MASTER" --rpc_address=127.0.0.1 --rpc_port="$port" --metrics_port="$(free_port)" \
      --client_ttl="$TTL" ${DISCARD:+--put_start_discard_timeout_sec="$DISCARD"} ${oplog:+--oplog_dir="$oplog"} >>"$log" 2>&1 &
  else
    "$MOONCAKE_MASTER" --rpc_port="$port" --rpc_address=127.0.0.1 --enable_http_metadata_server=false \
      --metrics_port="$(free_port)" --client_ttl="$TTL" ${DISCARD:+--put_start_discard_timeout_sec="$DISCARD"} >>"$log" 2>&1 &
  fi
  mpid=$!
  await_port "$kind" "$port"
}
stop_master() { [ -n "$mpid" ] && { kill -9 "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null; }; mpid=""; }

fail() { echo "  $1" >&2; failed=$((failed + 1)); }
drv() { # drv NAME LIB PORT MODE DIR: a driver in the background (pid in $!)
  timeout 300 "$DRV" "$2" "127.0.0.1:$3" "127.0.0.1:$(free_port)" "$4" "$5" >"$LOGDIR/$1.out" 2>"$LOGDIR/$1.err" &
}

run_kill() {
  local c=$1 m=$2 name=$3 dir="$T/$3" port
  mkdir -p "$dir"
  port=$(free_port)
  start_master "$m" "$port" "$LOGDIR/$name.master.log" || { fail "$name: no master"; return; }
  # No timeout(1) around the victim: SIGKILL must reach the driver itself
  # (it stops on its own after 300 s).
  # kvferry-master frees the key of a dead client's unfinished put when
  # the client expires; mooncake_master only after the discard timeout.
  if [ "$m" = kv ]; then export REPUT_S=$((TTL * 3 + 10)); else unset REPUT_S; fi
  "$DRV" "$(lib_of "${c%+*}")" "127.0.0.1:$port" "127.0.0.1:$(free_port)" victim "$dir" \
    >"$LOGDIR/$name.victim.out" 2>"$LOGDIR/$name.victim.err" &
  local vpid=$!
  pids+=("$vpid")
  wait_for "$dir/V.ready" 60 || { fail "$name: victim not ready"; kill -9 "$vpid"; return; }
  drv "$name.survivor" "$(lib_of "${c#*+}")" "$port" survivor "$dir"
  local spid=$!
  pids+=("$spid")
  wait_for "$dir/S.ready" 60 || fail "$name: survivor not ready"
  touch "$dir/go"
  # Let two puts finish, then kill during the loop (mostly inside a put).
  for _ in $(seq 600); do [ "$(cat "$dir/V.putting" 2>/dev/null || echo 0)" -ge 2 ] && break; sleep 0.1; done
  sleep 0.0$((RANDOM % 9 + 1))
  kill -9 "$vpid"
  local idx
  idx=$(cat "$dir/V.putting" 2>/dev/null || echo -1)
  echo "$idx" >"$dir/killed.tmp" && mv "$dir/killed.tmp" "$dir/killed"
  wait "$vpid" 2>/dev/null
  echo "  $name: victim SIGKILLed while on V-big-$idx"
  wait "$spid"
  local rc=$?
  count "$LOGDIR/$name.victim.out"
  count "$LOGDIR/$name.survivor.out"
  [ "$rc" -ge 100 ] && fail "$name: survivor exit $rc"
  stop_master
}

run_restart() {
  local c=$1 m=$2 name=$3 dir="$T/$3" port oplog=""
  mkdir -p "$dir"
  port=$(free_port)
  [ "$m" = kv ] && { oplog="$T/$name.oplog"; mkdir -p "$oplog"; }
  start_master "$m" "$port" "$LOGDIR/$name.master.log" "$oplog" || { fail "$name: no master"; return; }
  if [ "$m" = kv ]; then export EXPECT_KEEP=1; else unset EXPECT_KEEP; fi
  drv "$name.client" "$(lib_of "$c")" "$port" restart "$dir"
  local cpid=$!
  pids+=("$cpid")
  wait_for "$dir/R.ready" 60 || fail "$name: client not ready"
  stop_master
  echo "--- restart" >>"$LOGDIR/$name.master.log"
  sleep 1
  start_master "$m" "$port" "$LOGDIR/$name.master.log" "$oplog" || { fail "$name: master did not restart"; kill -9 "$cpid"; return; }
  touch "$dir/restarted"
  wait "$cpid"
  local rc=$?
  unset EXPECT_KEEP
  count "$LOGDIR/$name.client.out"
  [ "$rc" -ge 100 ] && fail "$name: client exit $rc"
  stop_master
}

for cs in $CASES; do
  kind=${cs%%:*} rest=${cs#*:}
  c=${rest%@*} m=${rest#*@}
  name="$kind-$c@$m"
  case $kind in
    kill) run_kill "$c" "$m" "$name" ;;
    restart) run_restart "$c" "$m" "$name" ;;
    *) fail "unknown case $cs" ;;
  esac
  echo "store-mooncake-faults: $cs done ($passed passed, $failed failed so far)"
done
echo "store-mooncake-faults: $passed passed, $failed failed (cases: $CASES; Mooncake: $MOONCAKE_MASTER)"
[ "$failed" -eq 0 ]
