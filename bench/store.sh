#!/usr/bin/env bash
# Store benchmark on loopback, in one run: kvferry put/get of 1 MiB and 4 MiB
# values with 1 and 4 clients against redis-server + redis-benchmark SET/GET
# of the same sizes and client counts, then the latency of a 4 KiB put and of
# one master round trip.
#
# What is measured, and how the two sides compare:
#   redis:    redis-benchmark -t set,get -d SIZE -n OPS -c CLIENTS: CLIENTS
#             connections, each with one request in flight (no pipelining,
#             -P 1), one key, value bytes through loopback TCP both ways
#             (the issue's yardstick). redis-server runs without
#             persistence. At 1 MiB redis-benchmark's own client is slow on
#             GET (p50 latency ~0.17 ms, yet ~0.7 ms per request), so the
#             same workload also runs through kvferry-bench store's RESP client
#             (-mode=redis: the kvferry harness, one connection and one key
#             per client, writev, reads into a preallocated buffer): the
#             "redis (same client)" column, about 1.3x redis-benchmark. The
#             ratios against both are printed.
#   kvferry remote: a client process (CLIENTS goroutines, one request in
#             flight each, sharing one connection to the master) puts into /
#             gets from a holder process that lends 4 GiB to the store,
#             through a kvferry-master process. A put is PutStart (master
#             round trip), the copy into the holder's memory, PutEnd (master
#             round trip; the object is readable by others when put
#             returns); a get is one master round trip (replica list and
#             read lease) and the copy. The bytes move between the processes
#             with the transfer engine's same-host path (cma:
#             process_vm_readv/writev, one copy, no socket); the table's
#             footnote shows the transports the runs used. The client's
#             buffers are registered (put_from / get_into, as SGLang and
#             vLLM use the store) and on 4 KiB pages; the holder's segment
#             is on transparent huge pages (the store's default). Each put
#             phase is preceded by one untimed pass (pages and connections
#             warm), as redis-benchmark's SET overwrites one warm key.
#   kvferry embedded: one process with the in-process master and its own
#             segment (kvferry's single-host default): memcpy, no socket.
# Every cell is measured TRIALS times, the systems back to back in each
# trial so that they see the same load; the table gives medians. The ratio
# is kvferry / redis of the medians.
#
#   bench/store.sh
#   OPS=2000 TRIALS=5 bench/store.sh
#   BASELINE_BIN=/tmp/old/bin bench/store.sh   # also an older build
#   MOONCAKE_MASTER=.../mooncake_master MOONCAKE_STORE_LIB=.../libmooncake_store.so bench/store.sh
#                                               # also Mooncake's store (bench/store_mooncake.sh)
#
# Environment: OPS (operations per phase at 1 MiB, a quarter at 4 MiB: OPS
# MiB per phase; default 1000), TRIALS (default 3), BASELINE_BIN (a
# directory holding kvferry-master and kvferry-bench (or storebench) built from another
# commit: its remote numbers are measured in the same trials and shown
# beside ours). Memory: each holder lends 4 GiB, the embedded run 2 GiB.
set -euo pipefail
cd "$(dirname "$0")/.."
OPS="${OPS:-1000}"
TRIALS="${TRIALS:-3}"
BASELINE_BIN="${BASELINE_BIN:-}"
T="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT
command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
  { echo "redis-server / redis-benchmark missing (Debian package redis-server, redis-tools)" >&2; exit 1; }

# Always this tree's code (a build/bin left by an older make would be stale).
mkdir -p "$T/bin"
go build -o "$T/bin/kvferry-master" ./cmd/kvferry-master
go build -o "$T/bin/kvferry-bench" ./cmd/kvferry-bench

# bench_store DIR ARGS: the store benchmark of the build in DIR (a baseline
# from before kvferry-bench store holds storebench).
bench_store() {
  local bin=$1
  shift
  if [ -x "$bin/storebench" ]; then "$bin/storebench" "$@"; else "$bin/kvferry-bench" store "$@"; fi
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(load)

# start_remote NAME BINDIR: a master and a holder (lends 4 GiB); sets
# MASTER_<NAME>.
start_remote() {
  local name=$1 bin=$2 d="$T/$1"
  mkdir -p "$d"
  # Leases of 2 s (default 10 s): each trial's objects, removed after
  # being read, free their space before the next trial needs it.
  "$bin/kvferry-master" --port=0 --rpc_address=127.0.0.1 --enable_metric_reporting=false --default_kv_lease_ttl=2000 \
    > "$d/master.out" 2> "$d/master.err" &
  pids+=($!)
  for _ in $(seq 1 100); do grep -q '^listening on' "$d/master.out" 2>/dev/null && break; sleep 0.1; done
  local addr
  addr=$(awk '/^listening on/ {print $3}' "$d/master.out")
  [ -n "$addr" ] || { echo "$name master did not start" >&2; cat "$d/master.err" >&2; exit 1; }
  mkfifo "$d/holder.in"
  bench_store "$bin" -mode=holder -master="$addr" -segment=$((4 << 30)) < "$d/holder.in" > "$d/holder.out" 2> "$d/holder.err" &
  pids+=($!)
  # Keep the holder's stdin open (it serves until stdin closes).
  sleep 1000000 > "$d/holder.in" &
  pids+=($!)
  for _ in $(seq 1 300); do grep -q '^ready' "$d/holder.out" 2>/dev/null && break; sleep 0.1; done
  grep -q '^ready' "$d/holder.out" || { echo "$name holder did not start" >&2; cat "$d/holder.err" >&2; exit 1; }
  printf -v "MASTER_$name" '%s' "$addr"
}
start_remote new "$T/bin"
[ -z "$BASELINE_BIN" ] || start_remote base "$BASELINE_BIN"

# redis: no persistence, no memory limit.
RPORT=$(free_port)
redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --protected-mode no \
  --proto-max-bulk-len 64mb > "$T/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

R="$T/results"
mkdir -p "$R"
for size in 1048576 4194304; do
  ops=$((OPS * 1048576 / size)) # the same bytes (OPS MiB) per phase at every size
  for th in 1 4; do
    for trial in $(seq 1 "$TRIALS"); do
      cell="$R/${size}_${th}_${trial}"
      redis-benchmark -p "$RPORT" -t set,get -d "$size" -n "$ops" -c "$th" --csv > "$cell.redis.csv" 2>/dev/null
      "$T/bin/kvferry-bench" store -mode=redis -redis=127.0.0.1:"$RPORT" -size=$size -threads=$th -ops=$ops > "$cell.redisgo.json"
      "$T/bin/kvferry-bench" store -mode=run -master="$MASTER_new" -op=both -size=$size -threads=$th -ops=$ops > "$cell.remote.json"
      if [ -n "$BASELINE_BIN" ]; then
        bench_store "$BASELINE_BIN" -mode=run -master="$MASTER_base" -op=both -size=$size -threads=$th -ops=$ops \
          > "$cell.base.json"
      fi
      "$T/bin/kvferry-bench" store -mode=run -master=embedded -local_segment=$((2 << 30)) -op=both -size=$size -threads=$th \
        -ops=$ops > "$cell.embedded.json"
    done
  done
done

for trial in $(seq 1 "$TRIALS"); do
  "$T/bin/kvferry-bench" store -mode=latency -master="$MASTER_new" -size=4096 -ops=2000 > "$R/lat_mux_$trial.json"
  "$T/bin/kvferry-bench" store -mode=latency -master="$MASTER_new" -master_rpc=grpc -size=4096 -ops=2000 > "$R/lat_grpc_$trial.json"
  if [ -n "$BASELINE_BIN" ]; then
    bench_store "$BASELINE_BIN" -mode=latency -master="$MASTER_base" -size=4096 -ops=2000 > "$R/lat_base_$trial.json"
  fi
  "$T/bin/kvferry-bench" store -mode=latency -master=embedded -local_segment=$((256 << 20)) -size=4096 -ops=2000 \
    > "$R/lat_embedded_$trial.json"
done

python3 - "$R" "$TRIALS" "$BASELINE_BIN" "$LOAD_START" "$(load)" "$(nproc)" <<'PY'
import csv, glob, json, os, statistics, sys
R, trials, base, load0, load1, ncpu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
med = statistics.median
def kv(path):
    return {r["op"]: r for r in map(json.loads, open(path))}
def redis(path):
    out = {}
    for row in csv.reader(open(path)):
        if row and row[0] in ("SET", "GET"):
            out[row[0]] = float(row[1])
    return out
systems = ["remote"] + (["base"] if base else []) + ["embedded"]
head = ("| op | value | clients | redis-benchmark GB/s | ops/s | redis (same client) GB/s |"
        " kvferry remote GB/s | ops/s | vs redis-benchmark | vs redis (same client) |")
sep = "|---|---|---|---|---|---|---|---|---|---|"
if base:
    head += " baseline remote GB/s | vs redis-benchmark |"
    sep += "---|---|"
head += " kvferry embedded GB/s | vs redis-benchmark |"
sep += "---|---|"
print(head)
print(sep)
transports, errors = {}, {}
for size in (1048576, 4194304):
    for th in (1, 4):
        runs = {s: [kv(f"{R}/{size}_{th}_{t}.{s}.json") for t in range(1, trials + 1)] for s in systems}
        reds = [redis(f"{R}/{size}_{th}_{t}.redis.csv") for t in range(1, trials + 1)]
        redgo = [kv(f"{R}/{size}_{th}_{t}.redisgo.json") for t in range(1, trials + 1)]
        for op, rname in (("put", "SET"), ("get", "GET")):
            rops = med([r.get(rname, 0.0) for r in reds])
            rgb = rops * size / 1e9
            ggb = med([r[op]["gb_per_s"] for r in redgo])
            row = f"| {op} | {size >> 20} MiB | {th} | {rgb:.2f} | {rops:.0f} | {ggb:.2f} |"
            for s in systems:
                gb = med([r[op]["gb_per_s"] for r in runs[s]])
                ops = med([r[op]["ops_per_s"] for r in runs[s]])
                ratio = gb / rgb if rgb else float("nan")
                errs = sum(r[op]["errors"] for r in runs[s])
                if errs:
                    errors[(s, op, size, th)] = errs
                for r in runs[s]:
                    if "transports" not in r[op]:
                        transports.setdefault(s, None)
                        continue
                    for k, v in r[op]["transports"].items():
                        transports.setdefault(s, {}).setdefault(k, 0)
                        transports[s][k] += v
                if s == "remote":
                    row += f" {gb:.2f} | {ops:.0f} | {ratio:.1f}x | {gb / ggb if ggb else float('nan'):.1f}x |"
                else:
                    row += f" {gb:.2f} | {ratio:.1f}x |"
            print(row)
print()
for s in systems:
    t = transports.get(s, {})
    if t is None:
        print(f"{s}: engine slices by transport: not reported by this build")
        continue
    print(f"{s}: engine slices by transport: " + (", ".join(f"{k} {v}" for k, v in sorted(t.items())) or "none (all local)"))
for k, v in errors.items():
    print(f"ERRORS: {k}: {v}")
print()
print("| 4 KiB, 2000 ops, median of trials | put p50 | put p99 | master round trip p50 | p99 | get p50 | get p99 |")
print("|---|---|---|---|---|---|---|")
rows = [("remote, master over mux (default)", "mux"), ("remote, master over gRPC", "grpc")]
if base:
    rows.append(("baseline remote", "base"))
rows.append(("embedded (in-process master)", "embedded"))
for name, tag in rows:
    rs = [json.load(open(p)) for p in sorted(glob.glob(f"{R}/lat_{tag}_*.json"))]
    m = {k: med([r[k] for r in rs]) for k in ("put_p50_us", "put_p99_us", "rpc_p50_us", "rpc_p99_us", "get_p50_us", "get_p99_us")}
    print(f"| {name} | {m['put_p50_us']:.0f} us | {m['put_p99_us']:.0f} us | {m['rpc_p50_us']:.0f} us | "
          f"{m['rpc_p99_us']:.0f} us | {m['get_p50_us']:.0f} us | {m['get_p99_us']:.0f} us |")
print()
print(f"machine: {ncpu} CPUs, load {load0} at start, {load1} at end, {trials} trials")
PY
# Mooncake's store beside kvferry's, when its binaries are given (nothing here builds it).
if [ -n "${MOONCAKE_MASTER:-}" ] && [ -n "${MOONCAKE_STORE_LIB:-}" ]; then echo; bench/store_mooncake.sh; fi
# 4 KiB single operations against the round-trip floor and redis-benchmark -c 1 (LATENCY=0: skip).
if [ "${LATENCY:-1}" = 1 ]; then echo; bench/latency.sh store; fi
