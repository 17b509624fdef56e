#!/usr/bin/env bash
# Small-operation latency against the machine's round-trip floor (issue 18),
# in one run: the floor first (bench/floor.sh: a C ping-pong of a 4 KiB
# request and an 8-byte answer between two processes, blocking and
# spinning), then, between two processes of this host,
#   tcp     transfer engine over TCP, 4 KiB, batch 1, one thread, read and
#           write (kvferry-bench, p50 and p99 of whole batches: allocate,
#           submit, wait, free);
#   notify  notifications over the socket RPC: one sent until the peer's
#           application sees it (the target's measure), and round trips
#           (ping, the peer sees it and answers, the pong is seen);
#   cma     the same-host path (process_vm_readv/writev), 4 KiB, batch 1;
#   store   4 KiB put and get from a client without a segment to a holder
#           in another process through a kvferry-master process, p50/p99
#           and one-client ops/s, beside redis-benchmark -c 1 SET/GET of
#           4 KiB on redis-server in the same run;
#   allocs  allocations per operation of the same small operations (issue 38
#           target 2: 0 after warm-up): go test -benchmem rows of a batch-1
#           4 KiB TCP read/write and a store 4 KiB put/get, both sides in
#           the test's process, and the AllocsPerRun tests that fail on
#           any allocation (TestTransferAllocs4K, TestStoreAllocs4K);
#   footprint  an idle engine with 1 GiB registered (bench/footprint.sh:
#           RSS beyond the buffer, threads, goroutines; Mooncake's target
#           beside it with MOONCAKE_TE_BENCH), run last, alone;
# each with spinning as configured (KVFERRY_SPIN_US, default 50 µs) and
# with it off (KVFERRY_SPIN_US=0 on every process of the row), and each
# figure as a multiple of the spinning and of the blocking floor. Last, the
# CPU that every server process of the run uses while idle (from
# /proc/PID/stat over IDLE_SECS after the traffic stopped): spinning is
# bounded, so it should be about zero.
#
#   bench/latency.sh                  # every section
#   bench/latency.sh tcp notify       # some
#   DURATION=5 OPS=20000 bench/latency.sh
#   MOONCAKE_TE_BENCH=.../transfer_engine_bench bench/latency.sh tcp
#                                     # also Mooncake beside it (bench/te_mooncake.sh)
#
# Environment: SPIN_ALT (a second spin budget in µs, e.g. 200: the TCP and
# notify rows run with it too, beside the configured one and off; the
# batch-1 tail is a cliff where a poll runs out of budget, so this shows
# what a longer one buys), DURATION (seconds per transfer row, default 3), OPS (store
# operations per row, default 5000), IDLE_SECS (default 2), FLOOR_ITERS,
# RT_PRIO (as root: run the floor's and every row's processes, not the
# builds, under SCHED_RR priority RT_PRIO with chrt, so that on a
# machine others load they see about what a quiet one gives; the kernel
# keeps 5% of each CPU for the others). Round-robin, not FIFO: a FIFO
# thread that polls holding its CPU never lets another of the same
# priority run there, and the TCP rows then livelocked for minutes
# (seen: two processes at 94% each, none finishing).
# Latency on a loaded 2-vCPU machine means little: the load is printed with
# the floor and at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-3}"
OPS="${OPS:-5000}"
IDLE_SECS="${IDLE_SECS:-2}"
SECTIONS=("$@")
[ ${#SECTIONS[@]} -gt 0 ] || SECTIONS=(tcp notify cma store allocs footprint)
want() { local s; for s in "${SECTIONS[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

T="$(mktemp -d)"
pids=()
# stop_pids stops every background process of the run so far.
stop_pids() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
cleanup() { stop_pids; rm -rf "$T"; }
trap cleanup EXIT
mkdir -p build/bin
BIN="$T/kvferry-bench"
go build -o "$BIN" ./cmd/kvferry-bench # always this tree's code
go build -o "$T/kvferry-master" ./cmd/kvferry-master
PRIO=()
[ -z "${RT_PRIO:-}" ] || PRIO=(chrt -r "$RT_PRIO")
source bench/floor.sh
floor_measure
echo "$FLOOR_LINE"
echo

BUF=$((64 << 20))
servers=() # "name pid" of the long-lived processes, for the idle CPU

wait_ready() { for _ in $(seq 1 200); do [ -s "$1" ] && break; sleep 0.05; done; [ -s "$1" ] || { echo "not ready: $1" >&2; exit 1; }; cat "$1"; }

# start_target NAME SPIN PROTOCOL: a kvferry-bench target; sets SEG_<NAME>.
start_target() {
  local env=(KVFERRY_SPIN_US="$2")
  [ "$3" = tcp ] && env+=(MC_FORCE_TCP=1)
  env "${env[@]}" "${PRIO[@]}" "$BIN" --mode=target --protocol="$3" --buffer_size=$BUF --ready_file="$T/ready_$1" >"$T/$1.log" 2>&1 &
  pids+=($!)
  servers+=("target-$1 $!")
  printf -v "PID_$1" '%s' "$!"
  printf -v "SEG_$1" '%s' "$(wait_ready "$T/ready_$1")"
}

# row LABEL SPIN JSON [KIND]: one table row from a kvferry-bench JSON
# result; KIND deliver takes a notify run's delivery times (one
# notification sent until the peer's application sees it; no mean).
row() {
  python3 - "$1" "$2" "$3" "$FLOOR_SPIN_US" "$FLOOR_BLOCK_US" "${4:-batch}" <<'PY'
import json, sys
label, spin, r = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
fs, fb, kind = float(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
p50, p99 = r[f"p50_{kind}_latency_us"], r[f"p99_{kind}_latency_us"]
mean = f"{r['avg_batch_latency_us']:.1f}" if kind == "batch" else ""
sp = "off" if spin == "0" else (spin + " us")
fail = f" ({r['failed_batches']} FAILED)" if r.get("failed_batches") else ""
print(f"| {label}{fail} | {sp} | {p50:.1f} | {p99:.1f} | {p99 / p50:.1f} | {mean} | "
      f"**{p50 / fs:.1f}x** / {p50 / fb:.2f}x | {r['ops_per_s']:.0f} |")
PY
}

SPIN_ON="${KVFERRY_SPIN_US:-50}"
HEAD="| row | spin | p50 us | p99 us | p99/p50 | mean us | p50 vs floor (spinning / blocking) | ops/s |
|---|---|---|---|---|---|---|---|"

if want tcp || want notify; then
  start_target tcp_on "$SPIN_ON" tcp
  start_target tcp_off 0 tcp
  [ -z "${SPIN_ALT:-}" ] || start_target tcp_alt "$SPIN_ALT" tcp
fi
if want tcp; then
  declare -A awaited
  cwait=()
  tail3=()
  echo "Transfer engine over TCP, 4 KiB, batch 1, 1 thread (kvferry-bench; p99/p50 target <= 3, p50 <= 3x the spinning floor):"
  echo
  echo "$HEAD"
  python3 -c 'import sys; p50, p99 = map(float, sys.argv[1:]); print(f"| floor, spinning (bench/pingpong.c) | | {p50:.1f} | {p99:.1f} | {p99 / p50:.1f} | | 1.0x | |")' \
    "$FLOOR_SPIN_US" "$FLOOR_SPIN_P99_US"
  python3 -c 'import sys; p50, p99, fs = map(float, sys.argv[1:]); print(f"| floor, spinning, Go runtime (bench/gofloor) | | {p50:.1f} | {p99:.1f} | {p99 / p50:.1f} | | {p50 / fs:.1f}x | |")' \
    "$FLOOR_GO_SPIN_US" "$FLOOR_GO_SPIN_P99_US" "$FLOOR_SPIN_US"
  for op in read write; do
    for spin in "$SPIN_ON" ${SPIN_ALT:-} 0; do
      seg=SEG_tcp_on; [ "$spin" = 0 ] && seg=SEG_tcp_off; [ "$spin" = "${SPIN_ALT:-}" ] && seg=SEG_tcp_alt
      out=$(KVFERRY_SPIN_US=$spin MC_FORCE_TCP=1 "${PRIO[@]}" "$BIN" --mode=initiator --protocol=tcp --segment_id="${!seg}" --operation=$op \
        --block_size=4096 --batch_size=1 --threads=1 --duration="$DURATION" --buffer_size=$BUF --json --quiet)
      row "tcp $op 4 KiB" "$spin" "$out"
      [ "$spin" != "$SPIN_ON" ] || tail3+=("$(python3 - "$op" "$out" "$FLOOR_GO_SPIN_US" "$FLOOR_GO_SPIN_P99_US" <<'PY'
import json, sys
op, r, g50, g99 = sys.argv[1], json.loads(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
p50, p99 = r["p50_batch_latency_us"], r["p99_batch_latency_us"]
x = (p99 / p50) / (g99 / g50)
print(f"| {op} | {p50:.1f} / {p99:.1f} | {p99 / p50:.2f} | {g50:.1f} / {g99:.1f} = {g99 / g50:.2f} | **{x:.2f}x** | {'yes' if x <= 1.25 else 'no'} |")
PY
)")
    done
    # The synchronous calls' way (Python's transfer_sync_*, C callers that
    # declare the batch awaited): the waiter reads the answer itself, from a
    # goroutine locked to its thread as a C caller's is.
    out=$(KVFERRY_SPIN_US=$SPIN_ON MC_FORCE_TCP=1 "${PRIO[@]}" "$BIN" --mode=initiator --protocol=tcp --segment_id="$SEG_tcp_on" --operation=$op \
      --block_size=4096 --batch_size=1 --threads=1 --duration="$DURATION" --buffer_size=$BUF --json --quiet --await --locked)
    row "tcp $op 4 KiB, awaited, locked waiter" "$SPIN_ON" "$out"
    awaited[$op]=$out
    # C callers that do not declare the batch awaited (issue 38, target 4:
    # within 1.5x the awaited row, p50 and p99): kvferry_batch_wait from a
    # locked thread, and a getTransferStatus loop from one.
    for how in "kvferry_batch_wait:" "getTransferStatus loop:--poll_status"; do
      out=$(KVFERRY_SPIN_US=$SPIN_ON MC_FORCE_TCP=1 "${PRIO[@]}" "$BIN" --mode=initiator --protocol=tcp --segment_id="$SEG_tcp_on" --operation=$op \
        --block_size=4096 --batch_size=1 --threads=1 --duration="$DURATION" --buffer_size=$BUF --json --quiet --locked ${how#*:})
      row "tcp $op 4 KiB, not awaited, locked, ${how%%:*}" "$SPIN_ON" "$out"
      cwait+=("$(python3 - "$op" "${how%%:*}" "${awaited[$op]}" "$out" <<'PY'
import json, sys
op, how, a, r = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), json.loads(sys.argv[4])
ap50, ap99 = a["p50_batch_latency_us"], a["p99_batch_latency_us"]
p50, p99 = r["p50_batch_latency_us"], r["p99_batch_latency_us"]
met = "yes" if p50 <= 1.5 * ap50 and p99 <= 1.5 * ap99 else "no"
print(f"| {op} | {how} | {p50:.1f} / {p99:.1f} | {ap50:.1f} / {ap99:.1f} | **{p50 / ap50:.2f}x** / **{p99 / ap99:.2f}x** | {met} |")
PY
)")
    done
  done
  echo
  echo "C waiters without await against the awaited, locked waiter of the same run (target: <= 1.5x, p50 and p99):"
  echo
  echo "| op | wait | p50 / p99 us | awaited p50 / p99 us | ratio p50 / p99 | met |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${cwait[@]}"
  echo
  echo "The tail against the Go floor's of the same run (target 3: TE p99/p50 <= 1.25x the Go floor's, spin $SPIN_ON us, default GOMAXPROCS):"
  echo
  echo "| op | p50 / p99 us | p99/p50 | Go floor p50 / p99 us = p99/p50 | ratio of the two | met |"
  echo "|---|---|---|---|---|---|"
  printf '%s\n' "${tail3[@]}"
  echo
  # Mooncake's transfer_engine_bench beside kvferry-bench, when it is given.
  if [ -n "${MOONCAKE_TE_BENCH:-}" ]; then bench/te_mooncake.sh; echo; fi
fi
# proc_usage PID: "CPU_TICKS VOLUNTARY INVOLUNTARY" of PID, all its threads.
proc_usage() {
  echo "$(awk '{print $14 + $15}' "/proc/$1/stat") $(cat /proc/"$1"/task/*/status 2>/dev/null |
    awk '/^voluntary_ctxt/ {v += $2} /^nonvoluntary_ctxt/ {n += $2} END {print v + 0, n + 0}')"
}

# notify_cost SPIN JSON BEFORE AFTER: one line of a notify row's cost.
notify_cost() {
  python3 - "$@" "$(getconf CLK_TCK)" <<'PY'
import json, sys
spin, r = sys.argv[1], json.loads(sys.argv[2])
b, a, tck = list(map(int, sys.argv[3].split())), list(map(int, sys.argv[4].split())), int(sys.argv[5])
n = r["batch_count"] + 200
cpu_t = (a[0] - b[0]) / tck * 1e6 / n
sp = "off" if spin == "0" else spin + " us"
print(f"- spin {sp}: mean round trip {r['avg_batch_latency_us']:.1f} us; CPU initiator {r['cpu_us_per_op']:.1f} us + target {cpu_t:.1f} us; "
      f"context switches initiator {r.get('ctx_switches_per_op', 0):.2f}, target {(a[1] - b[1]) / n:.2f} voluntary + {(a[2] - b[2]) / n:.2f} involuntary")
PY
}

if want notify; then
  cost=()
  echo "Notifications over the socket RPC (target: sent until the peer's application sees it <= 3x the spinning floor). Two rows a run:"
  echo "'notify sent -> seen' is one notification, from the sender's Notify call until the peer's getNotifs has seen it (the ping's"
  echo "send time in its message, the host's monotonic clock read again by the peer); 'notify call' is the sender's Notify call, until"
  echo "the peer's acceptance came back; 'notify round trip' is ping and pong, each delivered and seen (twice the first, plus the answer):"
  echo
  echo "$HEAD"
  for spin in "$SPIN_ON" ${SPIN_ALT:-} 0; do
    seg=SEG_tcp_on; [ "$spin" = 0 ] && seg=SEG_tcp_off; [ "$spin" = "${SPIN_ALT:-}" ] && seg=SEG_tcp_alt
    pid=PID_${seg#SEG_}
    before=$(proc_usage "${!pid}")
    out=$(KVFERRY_SPIN_US=$spin "${PRIO[@]}" "$BIN" --mode=initiator --operation=notify --segment_id="${!seg}" --duration="$DURATION" \
      --buffer_size=$BUF --json --quiet)
    row "notify sent -> seen" "$spin" "$out" deliver
    row "notify call (sent -> accepted)" "$spin" "$out" accept
    [ "$spin" != "$SPIN_ON" ] || call5=$(python3 - "$out" "$FLOOR_SPIN_US" <<'PY'
import json, sys
p, f = json.loads(sys.argv[1])["p50_accept_latency_us"], float(sys.argv[2])
print(f"{p:.1f} us against the spinning floor's {f:.1f} us: **{p / f:.1f}x** (target 5: <= 2x; {'met' if p <= 2 * f else 'not met'})")
PY
)
    row "notify round trip" "$spin" "$out"
    cost+=("$(notify_cost "$spin" "$out" "$before" "$(proc_usage "${!pid}")")")
  done
  echo
  # What a round trip costs the two processes: the machine has two vCPUs, so
  # CPU near twice the mean round trip means both are busy (the polls), and
  # every context switch is a thread woken or a CPU handed over.
  echo "The sender's notify call, p50, spin $SPIN_ON us: $call5"
  echo
  echo "CPU and context switches per round trip (initiator: its timed loop, getrusage; target: the whole run with its 200 untimed round trips, /proc):"
  echo
  printf '%s\n' "${cost[@]}"
  echo
fi
if want cma; then
  start_target cma_on "$SPIN_ON" auto
  start_target cma_off 0 auto
  echo "Same host (cma), 4 KiB, batch 1, 1 thread (target <= 2x the spinning floor):"
  echo
  echo "$HEAD"
  for op in read write; do
    for spin in "$SPIN_ON" 0; do
      seg=SEG_cma_on; [ "$spin" = 0 ] && seg=SEG_cma_off
      # (error level: a forced protocol warns that other hosts would take tcp)
      out=$(KVFERRY_LOG_LEVEL=error KVFERRY_SPIN_US=$spin "${PRIO[@]}" "$BIN" --mode=initiator --protocol=cma --segment_id="${!seg}" --operation=$op \
        --block_size=4096 --batch_size=1 --threads=1 --duration="$DURATION" --buffer_size=$BUF --json --quiet)
      row "cma $op 4 KiB" "$spin" "$out"
    done
  done
  echo
fi

if want store; then
  command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null ||
    { echo "redis-server / redis-benchmark missing (Debian package redis-server, redis-tools)" >&2; exit 1; }
  # start_store NAME SPIN: a kvferry-master and a holder lending 1 GiB; sets MASTER_<NAME>.
  start_store() {
    local d="$T/store_$1"
    mkdir -p "$d"
    KVFERRY_SPIN_US="$2" "${PRIO[@]}" "$T/kvferry-master" --port=0 --rpc_address=127.0.0.1 --enable_metric_reporting=false \
      --default_kv_lease_ttl=1000 >"$d/master.out" 2>"$d/master.err" &
    pids+=($!)
    servers+=("master-$1 $!")
    for _ in $(seq 1 100); do grep -q '^listening on' "$d/master.out" 2>/dev/null && break; sleep 0.1; done
    local addr
    addr=$(awk '/^listening on/ {print $3}' "$d/master.out")
    [ -n "$addr" ] || { echo "master did not start" >&2; cat "$d/master.err" >&2; exit 1; }
    mkfifo "$d/holder.in"
    KVFERRY_SPIN_US="$2" "${PRIO[@]}" "$BIN" store -mode=holder -master="$addr" -segment=$((1 << 30)) <"$d/holder.in" >"$d/holder.out" 2>"$d/holder.err" &
    pids+=($!)
    servers+=("holder-$1 $!")
    sleep 1000000 >"$d/holder.in" &
    pids+=($!)
    for _ in $(seq 1 300); do grep -q '^ready' "$d/holder.out" 2>/dev/null && break; sleep 0.1; done
    grep -q '^ready' "$d/holder.out" || { echo "holder did not start" >&2; cat "$d/holder.err" >&2; exit 1; }
    printf -v "MASTER_$1" '%s' "$addr"
  }
  start_store on "$SPIN_ON"
  start_store off 0
  RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  "${PRIO[@]}" redis-server --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --protected-mode no >"$T/redis.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis=$("${PRIO[@]}" redis-benchmark -p "$RPORT" -t set,get -d 4096 -n "$OPS" -c 1 --csv 2>/dev/null)
  echo "Store, 4 KiB, one client without a segment, holder in another process, master in a third (targets: get <= 5x, put <= 6x the spinning floor; ops/s >= redis-benchmark -c 1):"
  echo
  echo "| op | spin | p50 us | p99 us | p99/p50 | p50 vs floor (spinning / blocking) | one-client ops/s | redis-benchmark -c 1 ops/s | vs redis |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for spin in "$SPIN_ON" 0; do
    m=MASTER_on; [ "$spin" = 0 ] && m=MASTER_off
    lat=$(KVFERRY_SPIN_US=$spin "${PRIO[@]}" "$BIN" store -mode=latency -master="${!m}" -size=4096 -ops="$OPS" -quiet)
    run=$(KVFERRY_SPIN_US=$spin "${PRIO[@]}" "$BIN" store -mode=run -master="${!m}" -op=both -size=4096 -threads=1 -ops="$OPS" -quiet)
    python3 - "$spin" "$lat" "$run" "$redis" "$FLOOR_SPIN_US" "$FLOOR_BLOCK_US" <<'PY'
import csv, io, json, sys
spin, lat = sys.argv[1], json.loads(sys.argv[2])
run = {r["op"]: r for r in map(json.loads, sys.argv[3].splitlines())}
red = {row[0]: float(row[1]) for row in csv.reader(io.StringIO(sys.argv[4])) if row and row[0] in ("SET", "GET")}
fs, fb = float(sys.argv[5]), float(sys.argv[6])
sp = "off" if spin == "0" else spin + " us"
for op, rname in (("put", "SET"), ("get", "GET")):
    p50, p99 = lat[op + "_p50_us"], lat[op + "_p99_us"]
    ops = run[op]["ops_per_s"]
    errs = lat[op + "_errors"] + run[op]["errors"]
    fail = f" ({errs} errors)" if errs else ""
    print(f"| {op}{fail} | {sp} | {p50:.1f} | {p99:.1f} | {p99 / p50:.1f} | **{p50 / fs:.1f}x** / {p50 / fb:.2f}x | "
          f"{ops:.0f} | {red.get(rname, 0):.0f} | {ops / red[rname] if red.get(rname) else float('nan'):.2f}x |")
print(f"| master round trip (ExistKey) | {sp} | {lat['rpc_p50_us']:.1f} | {lat['rpc_p99_us']:.1f} | "
      f"{lat['rpc_p99_us'] / lat['rpc_p50_us']:.1f} | {lat['rpc_p50_us'] / fs:.1f}x / {lat['rpc_p50_us'] / fb:.2f}x | | | |")
PY
  done
  echo
fi

if want allocs; then
  # The -benchmem rows: both ends of each operation run in the test's
  # process, so each count is initiator and target (client, holder and
  # master for the store) together.
  echo "Allocations per operation after warm-up, both ends in one process (target 2: 0 B and 0 allocs; go test -benchmem):"
  echo
  echo "| row | B/op | allocs/op | target | AllocsPerRun test (fails on any allocation) |"
  echo "|---|---|---|---|---|"
  # allocrows PKG TEST BENCH BENCHTIME: one go test of PKG running the
  # AllocsPerRun test and the -benchmem rows; a row per benchmark line.
  allocrows() {
    local verdict="$2 passed"
    go test "$1" -count=1 -run "^$2\$" -bench "$3" -benchmem -benchtime="$4" >"$T/$2.log" 2>&1 ||
      verdict="$2 **FAILED** ($(grep -m1 -E 'allocs|FAIL' "$T/$2.log"))"
    awk -v v="$verdict" '/allocs\/op/ {print "| " $1 " | " $(NF-3) " | " $(NF-1) " | 0 / 0 | " v " |"}' "$T/$2.log"
  }
  allocrows ./engine TestTransferAllocs4K 'TCPAllocs4K' 3000x
  allocrows ./store/client TestStoreAllocs4K 'RemoteOps/(put|get)$' 5000x
  echo
  echo "(The store's put row counts the benchmark's RemoveAll every 1024 puts; TestStoreAllocs4K allows a put of a fresh key"
  echo "the 2 allocations the master keeps for the new object, its key and its record: docs/reports/allocs.md.)"
  echo
fi

# Idle CPU: every server process, after the traffic stopped.
if [ ${#servers[@]} -gt 0 ]; then
  sleep 0.5
  declare -A before
  for s in "${servers[@]}"; do
    set -- $s
    before[$1]=$(awk '{print $14 + $15}' "/proc/$2/stat")
  done
  sleep "$IDLE_SECS"
  tck=$(getconf CLK_TCK)
  line="Idle CPU over ${IDLE_SECS} s after the traffic (percent of one core, /proc/PID/stat):"
  for s in "${servers[@]}"; do
    set -- $s
    now=$(awk '{print $14 + $15}' "/proc/$2/stat")
    line+=" $1 $(python3 -c "print(f'{($now - ${before[$1]}) / $tck / $IDLE_SECS * 100:.1f}%')")"
  done
  echo "$line"
  echo
fi
if want footprint; then
  # Last, with the rows' processes stopped, so that each footprint process
  # has the machine to itself.
  stop_pids
  bench/footprint.sh | sed '/^machine:/d'
fi
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
