#!/usr/bin/env bash
# Multi-buffer store calls (batch_put_from_multi_buffers,
# batch_get_into_multi_buffers) against the single-buffer calls for the same
# bytes, through the Python binding, in one run: see bench/store_multi.py.
#   bench/store_multi.sh            (TRIALS, BATCHES, KEYS, SHAPES, ALIGN tune it)
set -euo pipefail
cd "$(dirname "$0")/.."
T="$(mktemp -d)"
pid=""
cleanup() { [ -z "$pid" ] || kill "$pid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
make -s lib >/dev/null
go build -o "$T/kvferry-master" ./cmd/kvferry-master
"$T/kvferry-master" --port=0 --rpc_address=127.0.0.1 --enable_metric_reporting=false --default_kv_lease_ttl=1000 \
  > "$T/master.out" 2> "$T/master.err" &
pid=$!
for _ in $(seq 1 100); do grep -q '^listening on' "$T/master.out" 2>/dev/null && break; sleep 0.1; done
MASTER=$(awk '/^listening on/ {print $3}' "$T/master.out")
[ -n "$MASTER" ] || { echo "master did not start" >&2; cat "$T/master.err" >&2; exit 1; }
MASTER="$MASTER" KVFERRY_LIB_DIR="$PWD/build/lib" /usr/bin/python3 bench/store_multi.py
