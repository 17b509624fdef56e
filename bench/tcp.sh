#!/usr/bin/env bash
# Loopback TCP benchmark: iperf3 (one stream) as the baseline, then
# kvferry-bench over the TCP transport at 4 KiB, 64 KiB, 1 MiB and 4 MiB,
# batch 1 and 128, read and write, between two processes. Each row runs
# twice in the same run: without a cluster key and with one
# (KVFERRY_AUTH_KEY_FILE: every connection authenticated), against two
# targets started side by side (AUTH=0: plain only): PAIRS pairs per row
# of a plain and an authenticated initiator running at the same time, so
# both see the same load. Prints a markdown table with each figure's ratio
# to iperf3 and the median ratio of authenticated to plain, measured in
# the same run, then
# what the per-request metrics cost: 4 KiB batch 128 write and read with
# metrics on and off (KVFERRY_METRICS=off on both sides), PAIRS alternating
# pairs, medians compared: throughput, and the initiator's CPU time per
# request (which other load on the machine disturbs less).
#   DURATION=3 THREADS=12 bench/tcp.sh
#   ONLY=overhead PAIRS=5 bench/tcp.sh     # just the metrics cost
#   bench/latency.sh tcp notify           # just the batch-1 latency rows (run last here)
#   ONLY=lanes PAIRS=3 bench/tcp.sh       # just the many-streams rows
#   ONLY=ab BASE=12ff1a8 PAIRS=4 bench/tcp.sh  # the large-batch rows against another commit
# Against another commit (issue 38 target 8: no regression beyond noise):
# ONLY=ab builds kvferry-bench at BASE in a temporary worktree, starts a
# target of each build, and runs each row of AB_ROWS (block:batch:threads,
# default "1048576:128:1 1048576:128:4 4194304:128:1"), write and read, as
# PAIRS alternating pairs (the first of each pair alternates too); each
# row prints both medians, the median of the per-pair ratios and their
# range, which is the noise a difference must exceed.
# Many streams (issue 38 target 6): for each N of LANES (default "1 2 4"),
# PAIRS alternating rounds of `iperf3 -P N` and a kvferry initiator with
# N lanes (MC_TCP_LANES_PER_PEER=N) moving batches of 128 x 1 MiB, write
# and read, LANE_THREADS (default 1) submitting threads; each row prints
# the medians, the median of the per-round ratios to iperf3 and their range.
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-3}"
ONLY="${ONLY:-}"
PAIRS="${PAIRS:-3}"
THREADS="${THREADS:-12}"
BUF=$((1 << 30))
BIN=build/bin/kvferry-bench
mkdir -p build/bin
go build -o "$BIN" ./cmd/kvferry-bench  # always this tree's code
command -v iperf3 >/dev/null || { echo "iperf3 missing (apt-get install iperf3)"; exit 1; }
T="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; { cat "$T"/*.log 2>/dev/null | tail -5 >&2; } || true; rm -rf "$T"' EXIT

wait_ready() { for _ in $(seq 1 100); do [ -s "$1" ] && break; sleep 0.1; done; cat "$1"; }

# overhead: 4 KiB batch 128 with metrics on and off (both sides), alternating.
overhead() {
  local small=$((64 << 20)) on off op i
  MC_FORCE_TCP=1 "$BIN" --mode=target --protocol=tcp --buffer_size=$small --ready_file="$T/ready_on" >/dev/null &
  KVFERRY_METRICS=off MC_FORCE_TCP=1 "$BIN" --mode=target --protocol=tcp --buffer_size=$small --ready_file="$T/ready_off" >/dev/null &
  on=$(wait_ready "$T/ready_on")
  off=$(wait_ready "$T/ready_off")
  echo
  echo "Metrics cost at 4 KiB, batch 128, $THREADS threads ($PAIRS alternating pairs of ${DURATION} s each; medians):"
  echo
  printf "| op | metrics on (ops/s) | metrics off (ops/s) | on / off | initiator CPU per request on | off | on / off |\n|---|---|---|---|---|---|---|\n"
  for op in write read; do
    : > "$T/on.$op"
    : > "$T/off.$op"
    for i in $(seq 1 "$PAIRS"); do
      KVFERRY_LOG_LEVEL=warn KVFERRY_LOG_FILE="$T/on.log" MC_FORCE_TCP=1 "$BIN" --mode=initiator --protocol=tcp --segment_id="$on" --operation=$op --block_size=4096 \
        --batch_size=128 --threads="$THREADS" --duration="$DURATION" --buffer_size=$small --json --quiet >> "$T/on.$op"
      KVFERRY_LOG_LEVEL=warn KVFERRY_LOG_FILE="$T/off.log" KVFERRY_METRICS=off MC_FORCE_TCP=1 "$BIN" --mode=initiator --protocol=tcp --segment_id="$off" --operation=$op \
        --block_size=4096 --batch_size=128 --threads="$THREADS" --duration="$DURATION" --buffer_size=$small --json --quiet >> "$T/off.$op"
    done
    python3 -c '
import json, statistics, sys
med = lambda p, k: statistics.median(json.loads(l)[k] for l in open(p) if l.strip())
a, b = med(sys.argv[2], "ops_per_s"), med(sys.argv[3], "ops_per_s")
c, d = med(sys.argv[2], "cpu_us_per_op"), med(sys.argv[3], "cpu_us_per_op")
print(f"| {sys.argv[1]} | {a:.0f} | {b:.0f} | {a / b:.3f} | {c:.3f} us | {d:.3f} us | {c / d:.3f} |")' "$op" "$T/on.$op" "$T/off.$op"
  done
}
# lanes: 128 x 1 MiB batches with N lanes against iperf3 -P N, alternating.
lanes() {
  local n i op lt="${LANE_THREADS:-1}" seg port=5299 lbuf
  lbuf=$(( ${LANE_THREADS:-1} * (128 << 20) )) # one batch per thread: less to touch per start
  MC_FORCE_TCP=1 "$BIN" --mode=target --protocol=tcp --buffer_size=$lbuf --ready_file="$T/ready_lanes" >/dev/null &
  seg=$(wait_ready "$T/ready_lanes")
  echo
  echo "Many streams: batches of 128 x 1 MiB, $lt thread(s), N lanes vs iperf3 -P N ($PAIRS alternating rounds of ${DURATION} s; medians, per-round ratio range):"
  echo
  printf "| N | iperf3 -P N GB/s | write GB/s | write / iperf3 | range | read GB/s | read / iperf3 | range | load |\n|---|---|---|---|---|---|---|---|---|\n"
  for n in ${LANES:-1 2 4}; do
    : > "$T/lanes.$n"
    for i in $(seq 1 "$PAIRS"); do
      iperf3 -s -B 127.0.0.1 -p $port -1 >/dev/null 2>&1 &
      local ip=$!
      sleep 0.3
      local g
      g=$(iperf3 -c 127.0.0.1 -p $port -t "$DURATION" -P "$n" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)')
      wait "$ip" || true
      local line="$g"
      for op in write read; do
        line+=" $(MC_TCP_LANES_PER_PEER=$n MC_FORCE_TCP=1 "$BIN" --mode=initiator --protocol=tcp --segment_id="$seg" --operation=$op \
          --block_size=1048576 --batch_size=128 --threads="$lt" --duration="$DURATION" --buffer_size=$lbuf --json --quiet |
          python3 -c 'import json,sys; print(json.load(sys.stdin)["gb_per_s"])')"
      done
      echo "$line" >> "$T/lanes.$n"
    done
    python3 - "$n" "$T/lanes.$n" "$(cut -d' ' -f1 /proc/loadavg)" <<'PY'
import statistics, sys
rows = [[float(x) for x in l.split()] for l in open(sys.argv[2]) if l.strip()]
med = lambda k: statistics.median(r[k] for r in rows)
def ratio(k):
    rs = [r[k] / r[0] for r in rows]
    return f"{statistics.median(rs):.2f} | {min(rs):.2f}-{max(rs):.2f}"
print(f"| {sys.argv[1]} | {med(0):.2f} | {med(1):.2f} | {ratio(1)} | {med(2):.2f} | {ratio(2)} | {sys.argv[3]} |")
PY
  done
}
# ab: AB_ROWS of this tree's build against BASE's, PAIRS alternating pairs.
ab() {
  [ -n "${BASE:-}" ] || { echo "ONLY=ab needs BASE (a commit)" >&2; exit 1; }
  local wt="$T/base-tree" bin_base="$T/kvferry-bench-base" abuf=$((512 << 20)) seg_new seg_base row bs batch th op i
  git worktree add --detach -q "$wt" "$BASE"
  (cd "$wt" && go build -o "$bin_base" ./cmd/kvferry-bench) || { git worktree remove --force "$wt"; exit 1; }
  git worktree remove --force "$wt"
  MC_FORCE_TCP=1 "$BIN" --mode=target --protocol=tcp --buffer_size=$abuf --ready_file="$T/ready_ab_new" >/dev/null &
  MC_FORCE_TCP=1 "$bin_base" --mode=target --protocol=tcp --buffer_size=$abuf --ready_file="$T/ready_ab_base" >/dev/null &
  seg_new=$(wait_ready "$T/ready_ab_new")
  seg_base=$(wait_ready "$T/ready_ab_base")
  echo
  echo "This tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . || echo ', with changes')) against $BASE: $PAIRS alternating pairs of ${DURATION} s per row (medians; per-pair ratio range):"
  echo
  printf "| op | block | batch | threads | %s GB/s | this tree GB/s | this / base (median of pairs) | range |\n|---|---|---|---|---|---|---|---|\n" "$BASE"
  for row in ${AB_ROWS:-1048576:128:1 1048576:128:4 4194304:128:1}; do
    IFS=: read -r bs batch th <<< "$row"
    for op in write read; do
      : > "$T/ab"
      for i in $(seq 1 "$PAIRS"); do
        local order=(base new) b n
        [ $((i % 2)) = 0 ] && order=(new base)
        for who in "${order[@]}"; do
          local bin=$BIN seg=$seg_new
          [ "$who" = base ] && bin=$bin_base && seg=$seg_base
          local gb
          gb=$(MC_FORCE_TCP=1 "$bin" --mode=initiator --protocol=tcp --segment_id="$seg" --operation=$op --block_size="$bs" \
            --batch_size="$batch" --threads="$th" --duration="$DURATION" --buffer_size=$abuf --json --quiet |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["gb_per_s"])')
          if [ "$who" = base ]; then b=$gb; else n=$gb; fi
        done
        echo "$b $n" >> "$T/ab"
      done
      python3 - "$op" "$bs" "$batch" "$th" "$T/ab" <<'PY'
import statistics, sys
op, bs, batch, th, f = sys.argv[1:6]
rows = [[float(x) for x in l.split()] for l in open(f) if l.strip()]
rs = [n / b for b, n in rows]
bs = int(bs)
size = f"{bs // 1024} KiB" if bs < 1 << 20 else f"{bs >> 20} MiB"
med = statistics.median
print(f"| {op} | {size} | {batch} | {th} | {med(r[0] for r in rows):.2f} | {med(r[1] for r in rows):.2f} | "
      f"**{med(rs):.2f}x** | {min(rs):.2f}-{max(rs):.2f} |")
PY
    done
  done
}
if [ "$ONLY" = ab ]; then
  ab
  echo
  echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
  exit 0
fi
if [ "$ONLY" = lanes ]; then
  lanes
  echo
  echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
  exit 0
fi
if [ "$ONLY" = overhead ]; then
  overhead
  echo
  echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
  exit 0
fi

iperf3 -s -B 127.0.0.1 -p 5299 -1 >/dev/null 2>&1 &
sleep 0.5
IPERF=$(iperf3 -c 127.0.0.1 -p 5299 -t "$DURATION" -J | python3 -c 'import json,sys; print(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9)')
wait || true

AUTH="${AUTH:-1}"
KEY="$T/cluster.key"
head -c 32 /dev/urandom | base64 > "$KEY"
chmod 600 "$KEY"
MC_FORCE_TCP=1 "$BIN" --mode=target --protocol=tcp --buffer_size=$BUF --ready_file="$T/ready" >/dev/null &
SEG=$(wait_ready "$T/ready")
SEG_AUTH=
if [ "$AUTH" = 1 ]; then
  KVFERRY_AUTH_KEY_FILE="$KEY" MC_FORCE_TCP=1 "$BIN" --mode=target --protocol=tcp --buffer_size=$BUF --ready_file="$T/ready_auth" >/dev/null &
  SEG_AUTH=$(wait_ready "$T/ready_auth")
fi

# run SEG KEYFILE OP BS BATCH THREADS prints one initiator run's JSON.
run() {
  local env=(MC_FORCE_TCP=1)
  [ -n "$2" ] && env+=(KVFERRY_AUTH_KEY_FILE="$2")
  env "${env[@]}" "$BIN" --mode=initiator --protocol=tcp --segment_id="$1" --operation="$3" \
    --block_size="$4" --batch_size="$5" --threads="$6" --duration="$DURATION" --buffer_size=$BUF --json --quiet
}

printf "| op | block | batch | threads | GB/s | ops/s | vs iperf3 | auth / plain (median) | range |\n|---|---|---|---|---|---|---|---|---|\n"
printf "| iperf3 (1 stream) | | | | %.2f | | 1.00 | | |\n" "$IPERF"
for op in write read; do
  for bs in 4096 65536 1048576 4194304; do
    for batch in 1 128; do
      th=$THREADS
      while [ $((bs * batch * th)) -gt $BUF ]; do th=$((th / 2)); done
      [ "$th" -lt 1 ] && th=1
      # The row's figures come from a plain run alone. The cost of
      # authentication comes from PAIRS pairs of a plain and an
      # authenticated initiator run at the same time, each with half the
      # threads: both see the same machine load, so their ratio holds on a
      # busy machine too (median of the pairs).
      out=$(run "$SEG" "" $op $bs $batch $th)
      : > "$T/ratios"
      if [ "$AUTH" = 1 ]; then
        half=$(( th > 1 ? th / 2 : 1 ))
        for _ in $(seq 1 "$PAIRS"); do
          run "$SEG" "" $op $bs $batch $half > "$T/p" &
          pp=$!
          run "$SEG_AUTH" "$KEY" $op $bs $batch $half > "$T/a" &
          pa=$!
          wait "$pp" "$pa"
          python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); a=json.load(open(sys.argv[2])); print(a["gb_per_s"]/p["gb_per_s"], a["gb_per_s"])' \
            "$T/p" "$T/a" >> "$T/ratios"
        done
      fi
      python3 - "$out" "$IPERF" "$op" "$bs" "$batch" "$th" "$T/ratios" <<'PY'
import json, statistics, sys
r = json.loads(sys.argv[1]); ip = float(sys.argv[2])
rows = [l.split() for l in open(sys.argv[7]) if l.strip()]
bs = int(sys.argv[4])
size = f"{bs // 1024} KiB" if bs < 1 << 20 else f"{bs >> 20} MiB"
auth = " | "
if rows:
    auth = f"{statistics.median(float(x[0]) for x in rows):.2f} | {min(float(x[0]) for x in rows):.2f}-{max(float(x[0]) for x in rows):.2f}"
print(f"| {sys.argv[3]} | {size} | {sys.argv[5]} | {sys.argv[6]} | {r['gb_per_s']:.2f} | {r['ops_per_s']:.0f} | {r['gb_per_s'] / ip:.2f} | {auth} |")
PY
    done
  done
done
lanes
overhead
echo
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
# Batch-1 latency and notifications against the round-trip floor (LATENCY=0: skip).
if [ "${LATENCY:-1}" = 1 ]; then echo; bench/latency.sh tcp notify; fi
