#!/usr/bin/env bash
# kvferry's store beside Mooncake's, in one run (issue 18: 1 MiB put and get
# from one client >= 2x Mooncake's store; issue 38: >= 0.8x the one-stream
# floor). Mooncake's rows run when its binaries are given; nothing here
# builds or fetches Mooncake:
#
#   MOONCAKE_MASTER=/path/mooncake_master \
#   MOONCAKE_STORE_LIB=/path/libmooncake_store.so bench/store_mooncake.sh
#   bench/store_mooncake.sh     # kvferry's rows and the floor alone
#
# (bench/store.sh calls it when both are set.) MOONCAKE_STORE_LIB is a
# library exporting Mooncake's store_c.h: Mooncake's own, built with
# -DWITH_STORE_C_SHARED=ON -DBUILD_SHARED_LIBS=OFF.
#
# Both systems run the same program, bench/store_c_bench.c, which dlopens
# the library (libkvferry.so or libmooncake_store.so) and uses only
# store_c.h: per system a master process (kvferry-master or
# mooncake_master), a holder process lending HOLDER_BYTES to the store, and
# a client lending nothing that put_from()s STORE_OPS values of SIZE bytes from a
# registered buffer under fresh keys and get_into()s them back (each value
# checked), after one untimed pass. Rows: kvferry over TCP (MC_FORCE_TCP=1
# on the client), kvferry with its default transport selection (the
# same-host path between the two processes), Mooncake (TCP: its only
# transport here; MOONCAKE_ENV is set for its processes, by default its TCP
# connection pool on), and kvferry over TCP with speculative gets off
# (KVFERRY_STORE_SPECULATIVE_GETS=0: the gets read keys the same client
# put, which by default read their replica during the master round trip;
# store/client spec.go). Each trial runs the four back to back, starting
# with a different one each trial, so that they see the same load; the
# table gives the medians and kvferry / Mooncake.
#
# Before the rows, the floor of each value size (bench/pingpong.c between
# two processes, spinning and blocking reads): one TCP stream carrying the
# value one way and 8 bytes back (a put's shape) or 16 bytes out and the
# value back (a get's), one round trip per operation with no master call.
# An operation over TCP cannot beat it; the line also gives what 2x
# Mooncake's p50 asks for against it.
#
# Then the transfer alone (kvferry-bench between two processes, TCP, batch
# 1, one thread, also measured before each trial): a put's write into the
# holder and a get's read from it without the master, so that what an
# operation takes beyond it (the commit or the lookup, and three processes
# sharing the CPUs) shows in the same run.
#
# Environment: SIZES (bytes, default "1048576"), STORE_OPS (operations per phase
# at 1 MiB, scaled to the same bytes at other sizes; default 400), TRIALS
# (default 3), HOLDER_BYTES (default 1 GiB), MOONCAKE_ENV (default
# "MC_TCP_ENABLE_CONNECTION_POOL=1"), KVFERRY_LIB (default this tree's
# build/lib/libkvferry.so, built by make lib), RT_PRIO (as root: every
# process of the rows under chrt -r RT_PRIO).
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_MC=1
if [ -z "${MOONCAKE_MASTER:-}" ] || [ -z "${MOONCAKE_STORE_LIB:-}" ]; then
  echo "MOONCAKE_MASTER and MOONCAKE_STORE_LIB not both set: kvferry's rows and the floor only" >&2
  WITH_MC=
fi
SIZES="${SIZES:-1048576}"
STORE_OPS="${STORE_OPS:-400}"
TRIALS="${TRIALS:-3}"
HOLDER_BYTES="${HOLDER_BYTES:-$((1 << 30))}"
. bench/mooncake_side.sh

if [ -z "${KVFERRY_LIB:-}" ]; then
  make -s lib >/dev/null # always this tree's code
  KVFERRY_LIB="$PWD/build/lib/libkvferry.so"
fi
go build -o "$T/kvferry-master" ./cmd/kvferry-master
cc -O2 -Wall -std=gnu11 -Iinclude -o "$T/store_c_bench" bench/store_c_bench.c -ldl
cc -O2 -o "$T/pingpong" bench/pingpong.c
go build -o "$T/kvferry-bench" ./cmd/kvferry-bench
FLOORS="$T/floors"
: > "$FLOORS"
# floor SIZE: one measurement of each shape and mode, appended to FLOORS.
floor() {
  local n=$((200 * 1048576 / $1)) shape
  [ "$n" -le 20000 ] || n=20000
  for shape in "put $1 8" "get 16 $1"; do
    set -- $shape
    echo "$1 ${2}x$3 spin $("${PRIO[@]}" "$T/pingpong" -s -q "$2" -r "$3" -n "$n" -w 50)" >> "$FLOORS"
    echo "$1 ${2}x$3 block $("${PRIO[@]}" "$T/pingpong" -q "$2" -r "$3" -n "$n" -w 50)" >> "$FLOORS"
  done
}
# transfer SIZE: one TE batch-1 write and read of SIZE bytes against the
# kvferry-bench target, appended to TRANSFERS.
TRANSFERS="$T/transfers"
: > "$TRANSFERS"
transfer() {
  local op
  for op in write read; do
    echo "$op $1 $(MC_FORCE_TCP=1 "${PRIO[@]}" "$T/kvferry-bench" --mode=initiator --protocol=tcp --segment_id="$TE_SEG" \
      --operation=$op --batch_size=1 --block_size="$1" --threads=1 --duration=2 --buffer_size=$((64 << 20)) --json --quiet)" >> "$TRANSFERS"
  done
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(load)

# kvferry's master. Leases of 500 ms: a forced remove of a leased object
# frees its space only when the lease ends (seen here: without this, the
# second run's puts returned 0 and their objects were gone by the get).
"${PRIO[@]}" "$T/kvferry-master" --port=0 --rpc_address=127.0.0.1 --enable_metric_reporting=false --default_kv_lease_ttl=500 \
  > "$T/kv_master.out" 2> "$T/kv_master.err" &
pids+=($!)
for _ in $(seq 1 100); do grep -q '^listening on' "$T/kv_master.out" 2>/dev/null && break; sleep 0.1; done
KV_MASTER=$(awk '/^listening on/ {print $3}' "$T/kv_master.out")
[ -n "$KV_MASTER" ] || { echo "kvferry-master did not start" >&2; cat "$T/kv_master.err" >&2; exit 1; }

# Mooncake's master.
if [ -n "$WITH_MC" ]; then
MC_PORT=$(free_port)
env "${MC_ENV[@]}" "${PRIO[@]}" "$MOONCAKE_MASTER" --port="$MC_PORT" --rpc_address=127.0.0.1 --enable_metric_reporting=false \
  --metrics_port="$(free_port)" > "$T/mc_master.out" 2> "$T/mc_master.err" &
pids+=($!)
MC_MASTER=127.0.0.1:$MC_PORT
for _ in $(seq 1 100); do
  python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2)' "$MC_PORT" 2>/dev/null && break
  sleep 0.1
done
fi

# The transfer engine's target for the transfer-alone rows.
MC_FORCE_TCP=1 "${PRIO[@]}" "$T/kvferry-bench" --mode=target --protocol=tcp --buffer_size=$((64 << 20)) --ready_file="$T/te.ready" \
  > "$T/te_target.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -s "$T/te.ready" ] && break; sleep 0.1; done
TE_SEG=$(cat "$T/te.ready" 2>/dev/null) || { echo "kvferry-bench target did not start" >&2; cat "$T/te_target.log" >&2; exit 1; }

# start_holder NAME LIB MASTER [ENV...]: a holder lending HOLDER_BYTES.
start_holder() {
  local name=$1 lib=$2 master=$3
  shift 3
  mkfifo "$T/$name.in"
  env "$@" "${PRIO[@]}" "$T/store_c_bench" holder "$lib" "$master" "$HOLDER_BYTES" < "$T/$name.in" > "$T/$name.out" 2> "$T/$name.err" &
  pids+=($!)
  sleep 1000000 > "$T/$name.in" & # keeps the holder's stdin open
  pids+=($!)
  for _ in $(seq 1 300); do grep -q '^ready' "$T/$name.out" 2>/dev/null && break; sleep 0.1; done
  grep -q '^ready' "$T/$name.out" || { echo "$name holder did not start" >&2; tail -20 "$T/$name.err" >&2; exit 1; }
}
start_holder kv_holder "$KVFERRY_LIB" "$KV_MASTER"
[ -z "$WITH_MC" ] || start_holder mc_holder "$MOONCAKE_STORE_LIB" "$MC_MASTER" "${MC_ENV[@]}"

# client SYSTEM SIZE OPS TAG: one store_c_bench run of SYSTEM.
client() {
  case $1 in
    kvferry_tcp) env MC_FORCE_TCP=1 "${PRIO[@]}" timeout 300 "$T/store_c_bench" run "$KVFERRY_LIB" "$KV_MASTER" "$2" "$3" "$4" ;;
    kvferry_tcp_nospec) env MC_FORCE_TCP=1 KVFERRY_STORE_SPECULATIVE_GETS=0 "${PRIO[@]}" timeout 300 "$T/store_c_bench" run "$KVFERRY_LIB" "$KV_MASTER" "$2" "$3" "$4" ;;
    kvferry_auto) "${PRIO[@]}" timeout 300 "$T/store_c_bench" run "$KVFERRY_LIB" "$KV_MASTER" "$2" "$3" "$4" ;;
    mooncake) env "${MC_ENV[@]}" "${PRIO[@]}" timeout 300 "$T/store_c_bench" run "$MOONCAKE_STORE_LIB" "$MC_MASTER" "$2" "$3" "$4" ;;
  esac
}

R="$T/results"
mkdir -p "$R"
systems=(kvferry_tcp kvferry_auto mooncake kvferry_tcp_nospec)
[ -n "$WITH_MC" ] || systems=(kvferry_tcp kvferry_auto kvferry_tcp_nospec)
for size in $SIZES; do
  ops=$((STORE_OPS * 1048576 / size))
  [ "$ops" -ge 1 ] || ops=1
  for trial in $(seq 1 "$TRIALS"); do
    floor "$size" # beside each trial: the floor moves with the machine's load
    transfer "$size"
    for k in "${!systems[@]}"; do
      s=${systems[$(((trial - 1 + k) % ${#systems[@]}))]}
      client "$s" "$size" "$ops" "$s-$size-$trial" > "$R/${size}_${trial}.$s.json" 2> "$R/${size}_${trial}.$s.err" ||
        { echo "$s client failed (size $size, trial $trial):" >&2; tail -20 "$R/${size}_${trial}.$s.err" >&2; exit 1; }
      sleep 1 # removed objects' leases (kvferry-master: 500 ms) expire and free their space
    done
  done
done

python3 - "$R" "$TRIALS" "$SIZES" "$LOAD_START" "$(load)" "$(nproc)" "${MOONCAKE_ENV-MC_TCP_ENABLE_CONNECTION_POOL=1}" "${RT_PRIO:-}" "$FLOORS" "$WITH_MC" "$TRANSFERS" <<'PY'
import json, statistics, sys
R, trials, sizes, load0, load1, ncpu, mcenv, prio, floors, with_mc, transfers = sys.argv[1:12]
floor = {}  # (op, size) -> {mode: [p50 us of each trial]}
for line in open(floors):
    op, shape, mode, js = line.split(" ", 3)
    size = max(int(v) for v in shape.split("x"))
    floor.setdefault((op, size), {}).setdefault(mode, []).append(json.loads(js)["p50_us"])
te = {}  # (op, size) -> [p50 us of each trial]: put's write, get's read alone
for line in open(transfers):
    op, size, js = line.split(" ", 2)
    te.setdefault(({"write": "put", "read": "get"}[op], int(size)), []).append(json.loads(js)["p50_batch_latency_us"])
trials = int(trials)
med = statistics.median
systems = ("kvferry_tcp", "kvferry_auto", "mooncake", "kvferry_tcp_nospec") if with_mc else \
    ("kvferry_tcp", "kvferry_auto", "kvferry_tcp_nospec")
print("Store: one client (lends nothing), holder in another process, master in a third; put_from / get_into of a "
      "registered buffer through store_c.h (bench/store_c_bench.c), the same loop for both libraries; medians of "
      f"{trials} trials, systems alternating:")
print()
if not with_mc:
    print("(Mooncake not given: its columns are empty and the ratios are against the floor below.)")
    print()
print("| op | value | Mooncake GB/s | p50 us | kvferry TCP GB/s | p50 us | vs Mooncake | kvferry same-host GB/s | p50 us | vs Mooncake | range of trial ratios (TCP; same-host) |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
errs = []
floor_lines = []
te_lines = []
nospec_lines = []
for size in map(int, sizes.split()):
    runs = {s: [json.load(open(f"{R}/{size}_{t}.{s}.json")) for t in range(1, trials + 1)] for s in systems}
    for s in systems:
        for t, r in enumerate(runs[s], 1):
            n = r["warm_errors"] + r["put_errors"] + r["get_errors"]
            if n:
                errs.append(f"{s} trial {t}: {n} errors")
    for op in ("put", "get"):
        gb = {s: med(r[op + "_gb_per_s"] for r in runs[s]) for s in systems}
        p50 = {s: med(r[op + "_p50_us"] for r in runs[s]) for s in systems}
        f = {m: med(v) for m, v in floor[(op, size)].items()}
        best = min(f.values())
        ft = floor[(op, size)]
        floor_lines.append(f"- {op} {size >> 10} KiB: one-stream floor p50 {f['spin']:.0f} us spinning, {f['block']:.0f} us "
                           f"blocking (medians of the trials; trials {min(min(v) for v in ft.values()):.0f}-"
                           f"{max(max(v) for v in ft.values()):.0f} us; {size / best / 1e3:.2f} GB/s at best); kvferry TCP p50 {p50['kvferry_tcp'] / best:.2f}x it "
                           f"({gb['kvferry_tcp'] / (size / best / 1e3):.2f}x its throughput)" +
                           (f", Mooncake {p50['mooncake'] / best:.2f}x; 2x Mooncake's p50 is {p50['mooncake'] / 2:.0f} us = "
                            f"{p50['mooncake'] / 2 / best:.2f}x the floor" if with_mc else ""))
        if (op, size) in te:
            t = med(te[(op, size)])
            what = "write into the holder" if op == "put" else "read from the holder"
            te_lines.append(f"- {op} {size >> 10} KiB: the {what} alone p50 {t:.0f} us (trials {min(te[(op, size)]):.0f}-"
                            f"{max(te[(op, size)]):.0f}), {t / best:.2f}x the floor; the {op}'s p50 over TCP {p50['kvferry_tcp']:.0f} us is "
                            f"{p50['kvferry_tcp'] - t:+.0f} us beside it (the "
                            f"{'commit at the master' if op == 'put' else 'master lookup, overlapped with the read when speculative'}"
                            f", and three processes sharing the CPUs)")
        if not with_mc:  # a row of kvferry alone, its ratios against the floor's best throughput
            fl = size / best / 1e3
            rt = [a[op + "_gb_per_s"] / fl for a in runs["kvferry_tcp"]]
            v = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
            print(f"| {op} | {v} | | | {gb['kvferry_tcp']:.2f} | {p50['kvferry_tcp']:.0f} | (floor) **{gb['kvferry_tcp'] / fl:.2f}x** | "
                  f"{gb['kvferry_auto']:.2f} | {p50['kvferry_auto']:.0f} | (floor) {gb['kvferry_auto'] / fl:.2f}x | {min(rt):.2f}-{max(rt):.2f} |")
            if op == "get":
                nospec_lines.append(f"- get {v}: {gb['kvferry_tcp_nospec']:.2f} GB/s, p50 {p50['kvferry_tcp_nospec']:.0f} us")
            continue
        rt = [a[op + "_gb_per_s"] / m[op + "_gb_per_s"] for a, m in zip(runs["kvferry_tcp"], runs["mooncake"])]
        ra = [a[op + "_gb_per_s"] / m[op + "_gb_per_s"] for a, m in zip(runs["kvferry_auto"], runs["mooncake"])]
        v = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        if op == "get":
            rn = [a[op + "_gb_per_s"] / m[op + "_gb_per_s"] for a, m in zip(runs["kvferry_tcp_nospec"], runs["mooncake"])]
            nospec_lines.append(f"- get {v}: {gb['kvferry_tcp_nospec']:.2f} GB/s, p50 {p50['kvferry_tcp_nospec']:.0f} us, "
                                f"**{gb['kvferry_tcp_nospec'] / gb['mooncake']:.2f}x** Mooncake (trials {min(rn):.2f}-{max(rn):.2f})")
        print(f"| {op} | {v} | {gb['mooncake']:.2f} | {p50['mooncake']:.0f} | {gb['kvferry_tcp']:.2f} | {p50['kvferry_tcp']:.0f} | "
              f"**{gb['kvferry_tcp'] / gb['mooncake']:.2f}x** | {gb['kvferry_auto']:.2f} | {p50['kvferry_auto']:.0f} | "
              f"**{gb['kvferry_auto'] / gb['mooncake']:.2f}x** | {min(rt):.2f}-{max(rt):.2f}; {min(ra):.2f}-{max(ra):.2f} |")
print()
print("kvferry TCP with speculative gets off (KVFERRY_STORE_SPECULATIVE_GETS=0; the gets above read keys the same "
      "client put, so by default they read the replica during the master round trip):")
for line in nospec_lines:
    print(line)
print()
print("Floor (bench/pingpong.c, one TCP stream between two processes, one round trip per operation, no master call, "
      "measured before each trial):")
for line in floor_lines:
    print(line)
print()
print("The transfer alone (kvferry-bench, TE batch 1 over TCP between two processes, one thread, no master; measured before "
      "each trial):")
for line in te_lines:
    print(line)
print()
for e in errs:
    print("ERRORS:", e)
if with_mc:
    print(f"Mooncake processes' environment: {mcenv or '(none)'}")
print(f"RT priority: {prio or 'none'}")
print(f"machine: {ncpu} CPUs, load {load0} at start, {load1} at end")
PY
