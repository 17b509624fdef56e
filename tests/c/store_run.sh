#!/usr/bin/env bash
# Store C API tests, called by tests/c/run.sh with its scratch directory:
# a kvferry-master, a holder process lending memory, and the test client,
# all on 127.0.0.1; then a single process with an embedded master.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-$(mktemp -d)}"
LIB="${KVFERRY_LIB_DIR:-$PWD/build/lib}/libkvferry.so"
MASTER_BIN="${KVFERRY_BIN_DIR:-$PWD/build/bin}/kvferry-master"
CFLAGS="-O2 -g -Wall -Wextra -Werror -std=gnu11 -Iinclude -Itests/c ${KVFERRY_SAN_CFLAGS:-}"
gcc $CFLAGS -o "$OUT/store_test" tests/c/store_test.c -ldl

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

wait_file() { # file seconds
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "timed out waiting for $1" >&2; return 1
}

echo "--- store C API: master + holder + client"
"$MASTER_BIN" --port=0 --rpc_address=127.0.0.1 --enable_metric_reporting=false \
  > "$OUT/master.out" 2> "$OUT/master.err" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on' "$OUT/master.out" 2>/dev/null && break; sleep 0.1; done
MASTER=$(awk '/^listening on/ {print $3}' "$OUT/master.out")
[ -n "$MASTER" ] || { echo "master did not start" >&2; cat "$OUT/master.err" >&2; exit 1; }

mkfifo "$OUT/holder.in"
"$OUT/store_test" holder "$LIB" "$MASTER" "$OUT/holder.ready" < "$OUT/holder.in" &
pids+=($!)
exec 7> "$OUT/holder.in" # keeps the holder's stdin open
wait_file "$OUT/holder.ready" 30
HOLDER=$(cat "$OUT/holder.ready")
timeout 120 "$OUT/store_test" client "$LIB" "$MASTER" "$HOLDER"
exec 7>&- # the holder sees EOF and exits

echo "--- store C API: embedded master"
timeout 60 "$OUT/store_test" embedded "$LIB"
