#!/usr/bin/env bash
# kvferry's transfer engine beside Mooncake's over TCP, in one run (issue 18:
# 4 KiB batch-1 latency, one thread, read and write, <= 0.6x Mooncake's
# pooled figure). Runs only with Mooncake's binary given; nothing here
# builds or fetches Mooncake:
#
#   MOONCAKE_TE_BENCH=/path/transfer_engine_bench bench/te_mooncake.sh
#
# (bench/latency.sh's tcp section, and so bench/tcp.sh, call it when it is
# set.) Two targets, kvferry-bench and transfer_engine_bench, each lending
# BUF bytes over P2P handshake on 127.0.0.1; then for each row the two
# initiators with the same flags (kvferry-bench takes transfer_engine_bench's
# flags), PAIRS times, alternating which goes first. transfer_engine_bench
# prints only its batch count over the duration, so the figure compared is
# the mean batch latency (duration / batches per thread: allocate, submit,
# wait for every request, free); kvferry's p50 and p99 are shown beside it.
# Mooncake's processes get MOONCAKE_ENV (default its TCP connection pool on:
# MC_TCP_ENABLE_CONNECTION_POOL=1; MOONCAKE_ENV= for none); kvferry's run
# with their defaults (MC_FORCE_TCP=1: the TCP transport, not the same-host
# path). transfer_engine_bench counts only whole batches, so large rows
# need a DURATION of many batches (10 s or more at 1 MiB x 128).
#
# Environment: ROWS (block:batch:threads list, default "4096:1:1"; e.g.
# "4096:1:1 1048576:128:4 4194304:128:4" adds large rows), TE_OPS ("read
# write"), DURATION (seconds per run, default 3), PAIRS (default 3), BUF
# (bytes per target, default 1 GiB), RT_PRIO (as root: the targets and the
# initiators under chrt -r RT_PRIO).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MOONCAKE_TE_BENCH:?set MOONCAKE_TE_BENCH to the Mooncake transfer_engine_bench binary}"
ROWS="${ROWS:-4096:1:1}"
TE_OPS="${TE_OPS:-read write}"
DURATION="${DURATION:-3}"
PAIRS="${PAIRS:-3}"
BUF="${BUF:-$((1 << 30))}"
. bench/mooncake_side.sh
go build -o "$T/kvferry-bench" ./cmd/kvferry-bench # always this tree's code
load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(load)

MC_MEAN_RE='Test completed: duration ([0-9.]+), batch count ([0-9]+), throughput ([0-9.]+)'
COMMON=(--metadata_server=P2PHANDSHAKE --local_server_name=127.0.0.1 --protocol=tcp --buffer_size="$BUF")

MC_FORCE_TCP=1 "${PRIO[@]}" "$T/kvferry-bench" --mode=target "${COMMON[@]}" --ready_file="$T/kv.ready" > "$T/kv_target.log" 2>&1 &
pids+=($!)
env "${MC_ENV[@]}" GLOG_logtostderr=1 "${PRIO[@]}" "$MOONCAKE_TE_BENCH" --mode=target "${COMMON[@]}" > "$T/mc_target.log" 2>&1 &
pids+=($!)
KV_SEG= MC_SEG=
for _ in $(seq 1 300); do
  [ -s "$T/kv.ready" ] && KV_SEG=$(cat "$T/kv.ready")
  MC_SEG=$(sed -n 's/.*listening on \([^ ,]*:[0-9]*\).*/\1/p' "$T/mc_target.log" | head -1)
  [ -n "$KV_SEG" ] && [ -n "$MC_SEG" ] && break
  sleep 0.1
done
[ -n "$KV_SEG" ] || { echo "kvferry-bench target did not start" >&2; tail "$T/kv_target.log" >&2; exit 1; }
[ -n "$MC_SEG" ] || { echo "transfer_engine_bench target did not start" >&2; tail "$T/mc_target.log" >&2; exit 1; }
sleep 1 # the Mooncake target registers its buffers after it listens

R="$T/results"
mkdir -p "$R"
for row in $ROWS; do
  IFS=: read -r bs batch th <<< "$row"
  for op in $TE_OPS; do
    flags=(--mode=initiator "${COMMON[@]}" --operation="$op" --block_size="$bs" --batch_size="$batch" --threads="$th"
      --duration="$DURATION")
    for i in $(seq 1 "$PAIRS"); do
      for side in kv mc; do
        # Alternate which side goes first.
        if [ $((i % 2)) = 0 ]; then side=$([ "$side" = kv ] && echo mc || echo kv); fi
        if [ "$side" = kv ]; then
          MC_FORCE_TCP=1 "${PRIO[@]}" timeout $((DURATION + 60)) "$T/kvferry-bench" "${flags[@]}" --segment_id="$KV_SEG" --json --quiet \
            > "$R/$row.$op.$i.kv.json" 2> "$R/$row.$op.$i.kv.err" ||
            { echo "kvferry-bench $row $op failed:" >&2; tail "$R/$row.$op.$i.kv.err" >&2; exit 1; }
        else
          env "${MC_ENV[@]}" GLOG_logtostderr=1 "${PRIO[@]}" timeout $((DURATION + 60)) "$MOONCAKE_TE_BENCH" "${flags[@]}" \
            --segment_id="$MC_SEG" > "$R/$row.$op.$i.mc.log" 2>&1 ||
            { echo "transfer_engine_bench $row $op failed:" >&2; tail "$R/$row.$op.$i.mc.log" >&2; exit 1; }
          if ! [[ "$(cat "$R/$row.$op.$i.mc.log")" =~ $MC_MEAN_RE ]]; then
            echo "transfer_engine_bench $row $op: no summary line" >&2
            tail "$R/$row.$op.$i.mc.log" >&2
            exit 1
          fi
          echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]}" > "$R/$row.$op.$i.mc.txt"
        fi
      done
    done
  done
done

python3 - "$R" "$ROWS" "$TE_OPS" "$PAIRS" "$LOAD_START" "$(load)" "$(nproc)" "${MOONCAKE_ENV-MC_TCP_ENABLE_CONNECTION_POOL=1}" "${RT_PRIO:-}" <<'PY'
import json, statistics, sys
R, rows, ops, pairs, load0, load1, ncpu, mcenv, prio = sys.argv[1:10]
pairs = int(pairs)
med = statistics.median
print("Transfer engine over TCP, kvferry-bench beside Mooncake's transfer_engine_bench (same flags, P2P handshake, loopback; "
      f"medians of {pairs} alternating pairs; mean batch latency = duration / batches per thread):")
print()
print("| op | block | batch | threads | Mooncake mean us | GB/s | kvferry mean us | p50 us | p99 us | GB/s | kvferry / Mooncake (mean latency) | range | GB/s kvferry / Mooncake |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for row in rows.split():
    bs, batch, th = map(int, row.split(":"))
    for op in ops.split():
        kv = [json.load(open(f"{R}/{row}.{op}.{i}.kv.json")) for i in range(1, pairs + 1)]
        mc = []
        for i in range(1, pairs + 1):
            d, n = open(f"{R}/{row}.{op}.{i}.mc.txt").read().split()
            d, n = float(d), int(n)
            mc.append({"mean": d * 1e6 * th / n, "gb": n * batch * bs / d / 1e9})
        ratios = [k["avg_batch_latency_us"] / m["mean"] for k, m in zip(kv, mc)]
        fail = sum(k.get("failed_batches", 0) for k in kv)
        size = f"{bs >> 10} KiB" if bs < 1 << 20 else f"{bs >> 20} MiB"
        print(f"| {op}{f' ({fail} FAILED)' if fail else ''} | {size} | {batch} | {th} | {med(m['mean'] for m in mc):.1f} | "
              f"{med(m['gb'] for m in mc):.3f} | {med(k['avg_batch_latency_us'] for k in kv):.1f} | "
              f"{med(k['p50_batch_latency_us'] for k in kv):.1f} | {med(k['p99_batch_latency_us'] for k in kv):.1f} | "
              f"{med(k['gb_per_s'] for k in kv):.3f} | **{med(ratios):.2f}x** | {min(ratios):.2f}-{max(ratios):.2f} | "
              f"{med(k['gb_per_s'] / m['gb'] for k, m in zip(kv, mc)):.2f}x |")
print()
print(f"Mooncake processes' environment: {mcenv or '(none)'}; RT priority: {prio or 'none'}")
print(f"machine: {ncpu} CPUs, load {load0} at start, {load1} at end")
PY
