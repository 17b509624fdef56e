#!/usr/bin/env bash
# Store benchmark on loopback, in one run: kvferry put/get of 1 MiB and 4 MiB
# values (1 and 4 client threads) and redis-server with redis-benchmark
# SET/GET of the same sizes and client counts. kvferry runs two ways:
#   remote:   a client process puts into / gets from a holder process that
#             lends the memory, through a kvferry-master process (every
#             byte crosses loopback TCP, as with redis);
#   embedded: one process with the embedded master and its own segment
#             (kvferry's single-host default: memcpy, no master RPC socket).
# Prints a markdown table with GB/s, ops/s and the kvferry/redis ratios, then
# the latency of a 4 KiB put (p50/p99) and of one master round trip.
#   OPS=400 bench/store.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OPS="${OPS:-400}"
T="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
  { echo "redis-server / redis-benchmark missing (Debian package redis-server, redis-tools)" >&2; exit 1; }

MASTER_BIN=build/bin/kvferry-master
[ -x "$MASTER_BIN" ] || go build -o "$MASTER_BIN" ./cmd/kvferry-master
go build -o "$T/storebench" ./bench/storebench

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# kvferry: master, holder (lends 4 GiB), runner.
"$MASTER_BIN" --port=0 --rpc_address=127.0.0.1 --enable_metric_reporting=false > "$T/master.out" 2> "$T/master.err" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on' "$T/master.out" 2>/dev/null && break; sleep 0.1; done
MASTER=$(awk '/^listening on/ {print $3}' "$T/master.out")
mkfifo "$T/holder.in"
"$T/storebench" -mode=holder -master="$MASTER" -segment=$((4 << 30)) < "$T/holder.in" > "$T/holder.out" 2> "$T/holder.err" &
pids+=($!)
exec 7> "$T/holder.in"
for _ in $(seq 1 200); do grep -q '^ready' "$T/holder.out" 2>/dev/null && break; sleep 0.1; done
grep -q '^ready' "$T/holder.out" || { echo "holder did not start" >&2; cat "$T/holder.err" >&2; exit 1; }

# redis: no persistence, no memory limit.
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --protected-mode no \
  --proto-max-bulk-len 64mb > "$T/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

printf "| op | value | clients | redis GB/s | redis ops/s | kvferry remote GB/s | ops/s | vs redis | kvferry embedded GB/s | ops/s | vs redis |\n"
printf "|---|---|---|---|---|---|---|---|---|---|---|\n"
for size in 1048576 4194304; do
  ops=$OPS
  [ "$size" -gt 1048576 ] && ops=$((OPS / 2))
  for th in 1 4; do
    redis-benchmark -p "$RPORT" -t set,get -d "$size" -n "$ops" -c "$th" --csv > "$T/redis.csv" 2>/dev/null
    "$T/storebench" -mode=run -master="$MASTER" -op=both -size=$size -threads=$th -ops=$ops > "$T/kv.json"
    "$T/storebench" -mode=run -master=embedded -local_segment=$((2 << 30)) -op=both -size=$size -threads=$th \
      -ops=$ops > "$T/emb.json"
    python3 - "$T/kv.json" "$T/emb.json" "$T/redis.csv" "$size" "$th" <<'PY'
import csv, json, sys
kv = {r["op"]: r for r in map(json.loads, open(sys.argv[1]))}
emb = {r["op"]: r for r in map(json.loads, open(sys.argv[2]))}
red = {}
for row in csv.reader(open(sys.argv[3])):
    if row and row[0] in ("SET", "GET"):
        red[row[0]] = float(row[1])
size, th = int(sys.argv[4]), int(sys.argv[5])
def cell(k, rgb):
    err = f" ({k['errors']} errors)" if k["errors"] else ""
    ratio = k["gb_per_s"] / rgb if rgb else float("nan")
    return f"{k['gb_per_s']:.2f}{err} | {k['ops_per_s']:.0f} | {ratio:.1f}x"
for op, rname in (("put", "SET"), ("get", "GET")):
    rops = red.get(rname, 0.0)
    rgb = rops * size / 1e9
    print(f"| {op} | {size >> 20} MiB | {th} | {rgb:.2f} | {rops:.0f} | {cell(kv[op], rgb)} | {cell(emb[op], rgb)} |")
PY
  done
done

"$T/storebench" -mode=latency -master="$MASTER" -size=4096 -ops=2000 > "$T/lat.json"
"$T/storebench" -mode=latency -master=embedded -local_segment=$((256 << 20)) -size=4096 -ops=2000 > "$T/elat.json"
python3 - "$T/lat.json" "$T/elat.json" <<'PY'
import json, sys
print()
print("| 4 KiB, 2000 ops | put p50 | put p99 | master round trip p50 | p99 | get p50 | get p99 |")
print("|---|---|---|---|---|---|---|")
for name, path in (("remote (gRPC master, TCP holder)", sys.argv[1]), ("embedded (in-process)", sys.argv[2])):
    r = json.load(open(path))
    print(f"| {name} | {r['put_p50_us']:.0f} us | {r['put_p99_us']:.0f} us | {r['rpc_p50_us']:.0f} us | "
          f"{r['rpc_p99_us']:.0f} us | {r['get_p50_us']:.0f} us | {r['get_p99_us']:.0f} us |")
PY
exec 7>&-
