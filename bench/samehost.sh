#!/usr/bin/env bash
# Same-host throughput (issue 8): in one run, for block sizes 64 KiB, 1 MiB
# and 16 MiB,
#   - C memcpy between two 256 MiB buffers, one thread (the baseline),
#   - kvferry between two processes, path chosen by the selector (auto),
#   - kvferry between the same two processes, TCP forced,
# WRITE and READ, and each as a ratio to memcpy. The three are measured back
# to back in every trial (TRIALS, default 3) so that they see the same load;
# the table gives medians and, in brackets, the per-trial ratio range.
#
#   bench/samehost.sh                 # defaults
#   TRIALS=5 DURATION=3 bench/samehost.sh
#   KVFERRY_BENCH=build/bin/kvferry-bench bench/samehost.sh
#
# PAGES selects the memory of all buffers (memcpy's and both processes'):
# "4k" (plain anonymous memory), "thp" (madvise MADV_HUGEPAGE) or "both"
# (default; one table each). Cross-memory attach pins the peer's pages one
# 4 KiB page at a time, so it is markedly faster on huge pages; memcpy is
# not.
#
# Environment: TRIALS, DURATION (seconds per measurement, default 2),
# THREADS (initiator submission threads, default 2), KVFERRY_BENCH (a built
# kvferry-bench; otherwise it is built into a temporary directory), and the
# library's own variables (KVFERRY_SAMEHOST_WORKERS, KVFERRY_SHM_*, ...) for
# both processes. Set KVFERRY_TRANSPORT=shm to measure shm as "auto".
set -euo pipefail
cd "$(dirname "$0")/.."

TRIALS=${TRIALS:-3}
DURATION=${DURATION:-2}
THREADS=${THREADS:-2}
PAGES=${PAGES:-both}
BUF=$((256 << 20))
SIZES=(65536 1048576 16777216)

work=$(mktemp -d)
target_pid=""
cleanup() {
  if [[ -n "$target_pid" ]]; then kill "$target_pid" 2>/dev/null || true; wait "$target_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

bench=${KVFERRY_BENCH:-}
if [[ -z "$bench" ]]; then
  bench=$work/kvferry-bench
  go build -o "$bench" ./cmd/kvferry-bench
fi

# The target serves both the auto and the TCP initiators; KVFERRY_TRANSPORT
# only matters on the initiator side.
start_target() {
  rm -f "$work/ready"
  env -u KVFERRY_TRANSPORT -u MC_FORCE_TCP "$bench" --mode=target --buffer_size=$BUF $hp \
    --ready_file="$work/ready" >"$work/target.log" 2>&1 &
  target_pid=$!
  for _ in $(seq 200); do
    [[ -s "$work/ready" ]] && break
    if ! kill -0 "$target_pid" 2>/dev/null; then cat "$work/target.log" >&2; echo "target died" >&2; exit 1; fi
    sleep 0.05
  done
  [[ -s "$work/ready" ]] || { echo "target not ready after 10 s" >&2; exit 1; }
  segment=$(head -n1 "$work/ready")
}

batch_for() { # keep about 16-128 MiB in flight per batch round
  case $1 in
    65536) echo 128 ;;
    1048576) echo 32 ;;
    *) echo 4 ;;
  esac
}

run_init() { # protocol op size -> JSON line
  local proto=$1 op=$2 size=$3 out
  if ! out=$(timeout $((DURATION + 60)) "$bench" --mode=initiator --segment_id="$segment" --protocol="$proto" \
      --operation="$op" --block_size="$size" --batch_size="$(batch_for "$size")" --threads="$THREADS" \
      --buffer_size=$BUF $hp --duration="$DURATION" --json 2>"$work/init.err"); then
    cat "$work/init.err" >&2
    echo "{\"operation\":\"$op\",\"block_size\":$size,\"gb_per_s\":0,\"transport\":\"error\",\"failed_batches\":1}"
    return
  fi
  echo "$out"
}

measure() { # page mode -> table
  local mode=$1
  hp=""
  [[ $mode == thp ]] && hp=--hugepages
  start_target
  echo "# $mode pages: $(date -u '+%F %T') UTC, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
  : >"$work/results.jsonl"
  for trial in $(seq "$TRIALS"); do
    for size in "${SIZES[@]}"; do
      m=$("$bench" --mode=memcpy --block_size="$size" --buffer_size=$BUF $hp --duration="$DURATION" --json)
      echo "{\"trial\":$trial,\"kind\":\"memcpy\",\"r\":$m}" >>"$work/results.jsonl"
      for op in write read; do
        for proto in auto tcp; do
          r=$(run_init "$proto" "$op" "$size")
          echo "{\"trial\":$trial,\"kind\":\"$proto-$op\",\"r\":$r}" >>"$work/results.jsonl"
        done
      done
      echo "  $mode pages, trial $trial, block $size done (load $(cut -d' ' -f1 /proc/loadavg))" >&2
    done
  done
  kill "$target_pid" 2>/dev/null || true
  wait "$target_pid" 2>/dev/null || true
  target_pid=""
  echo
  echo "### $mode pages ($TRIALS trials of ${DURATION}s, $THREADS submit threads, load after: $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  summarize "$work/results.jsonl"
}

summarize() {
python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
sizes = sorted({r["r"]["block_size"] for r in rows})
kinds = ["auto-write", "auto-read", "tcp-write", "tcp-read"]
def get(kind, size):
    return {r["trial"]: r["r"] for r in rows if r["kind"] == kind and r["r"]["block_size"] == size}
def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"
failed = 0
paths = set()
print("| block | memcpy GB/s | " + " | ".join(f"{k} GB/s (x memcpy)" for k in kinds) + " |")
print("|---" * (2 + len(kinds)) + "|")
for s in sizes:
    mc = get("memcpy", s)
    mcv = statistics.median(v["gb_per_s"] for v in mc.values())
    cells = [human(s), f"{mcv:.2f}"]
    for k in kinds:
        d = get(k, s)
        failed += sum(v.get("failed_batches", 0) for v in d.values())
        paths.update(v["transport"] for v in d.values() if k.startswith("auto"))
        med = statistics.median(v["gb_per_s"] for v in d.values())
        ratios = [d[t]["gb_per_s"] / mc[t]["gb_per_s"] for t in d if t in mc and mc[t]["gb_per_s"] > 0]
        rng = f" [{min(ratios):.2f}-{max(ratios):.2f}]" if ratios else ""
        cells.append(f"{med:.2f} ({med / mcv:.2f}x{rng})")
    print("| " + " | ".join(cells) + " |")
print()
print(f"auto path chosen: {', '.join(sorted(paths))}; failed batches: {failed}")
sys.exit(1 if failed else 0)
PY
}

status=0
case $PAGES in
  4k | thp) measure "$PAGES" || status=1 ;;
  both) measure 4k || status=1; measure thp || status=1 ;;
  *) echo "PAGES must be 4k, thp or both" >&2; exit 2 ;;
esac
# Batch-1 latency of the same-host path against the round-trip floor (LATENCY=0: skip).
if [[ "${LATENCY:-1}" = 1 ]]; then echo; bench/latency.sh cma || status=1; fi
exit $status
