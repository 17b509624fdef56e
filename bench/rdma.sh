#!/usr/bin/env bash
# RDMA benchmark for hosts with RDMA NICs (none on the development machines:
# this script has not been run on hardware yet). In one run it measures
# perftest's ib_write_bw / ib_read_bw as the baseline, then kvferry-bench
# over the RDMA transport, per NIC and striped over all NICs, WRITE and READ
# at 64 KiB, 1 MiB and 4 MiB; then batch-1 latency (8 B and 64 KiB) beside
# ib_write_lat. It prints a markdown table with each figure's ratio to its
# baseline: targets are >= 0.95x ib_write_bw per NIC at >= 64 KiB, >= 0.9x
# N x one NIC striped over N NICs, <= 5 us batch-1 latency over one hop.
# With a GPU (GPU=<index>, default 0 when nvidia-smi lists one) it adds
# GPUDirect rows: GPU memory on both sides (kvferry-bench --use_vram, the
# NICs registering it through dma-bufs or peer memory) beside perftest's
# --use_cuda on the same NIC, and the ratio to the host-memory figure.
#
# Both sides run on this host, through the NICs (as perftest's loopback
# runs); for two hosts run `bench/rdma.sh target` on the peer and give
# PEER=<peer ip> here (perftest servers and the kvferry target start there).
#
#   NICS="mlx5_0 mlx5_1" GID_INDEX=3 DURATION=5 bench/rdma.sh
#   bench/rdma.sh --fake    # smoke run on the test suite's fake provider,
#                           # perftest included: checks the script and
#                           # compares both on one fixture, says nothing
#                           # of hardware
set -euo pipefail
cd "$(dirname "$0")/.."
DURATION="${DURATION:-5}"
THREADS="${THREADS:-8}"
BUF=$((1 << 30))
BIN="${KVFERRY_BENCH:-build/bin/kvferry-bench}" # built by make (make hw-check-build on another machine)
[ -x "$BIN" ] || go build -o "$BIN" ./cmd/kvferry-bench
T="$(mktemp -d)"
# The target runs in a command substitution: not one of our jobs, so it is
# stopped by its pid file.
cleanup() { [ -s "$T/target.pid" ] && kill "$(cat "$T/target.pid")" 2>/dev/null; kill $(jobs -p) 2>/dev/null || true; }
trap 'cleanup; rm -rf "$T"' EXIT

FAKE=0
if [ "${1:-}" = "--fake" ]; then
  FAKE=1
  DURATION="${DURATION_FAKE:-1}"
  THREADS=1
  BUF=$((128 << 20))
  lib=$(go run ./tests/rdma/fakeverbs/cmd/buildfake)
  trap 'cleanup; rm -rf "$T" "$(dirname "$lib")"' EXIT
  export KVFERRY_IBVERBS_LIB="$lib" FAKEVERBS_DIR="$T" FAKEVERBS_DEVICES="fake_mlx5_0,fake_mlx5_1"
  NICS="${NICS:-fake_mlx5_0 fake_mlx5_1}"
  # The fake libcuda for the GPU rows (device memory the CPU cannot touch).
  export KVFERRY_CUDA_LIB="$(tests/fakecuda/build.sh "$T/fakecuda")" FAKECUDA_ARENA_MB=$(((BUF >> 20) + 64))
  unset CUDA_VISIBLE_DEVICES # the fake honours it as the driver does
  GPU="${GPU:-0}"
fi
if [ -z "${NICS:-}" ]; then
  NICS=$(ls /sys/class/infiniband 2>/dev/null | tr '\n' ' ')
fi
[ -n "$NICS" ] || { echo "no RDMA NIC (/sys/class/infiniband is empty); see docs/guide/rdma.md"; exit 1; }
GIDARG=()
[ -n "${GID_INDEX:-}" ] && { GIDARG=(-x "$GID_INDEX"); export MC_GID_INDEX="$GID_INDEX"; }
PEER="${PEER:-}"
if [ -z "${GPU:-}" ] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  GPU=0
fi
VRAM=() # kvferry-bench flags for the buffer (set for the GPU rows)

start_target() { # $1: comma list of NICs -> prints the segment name
  rm -f "$T/ready"
  "$BIN" --mode=target --protocol=rdma --device_name="$1" --buffer_size=$BUF --ready_file="$T/ready" "${VRAM[@]}" \
    --local_server_name="${LOCAL_IP:-127.0.0.1}" >"$T/target.log" 2>&1 &
  echo $! >"$T/target.pid"
  for _ in $(seq 1 100); do [ -s "$T/ready" ] && break; sleep 0.1; done
  cat "$T/ready"
}
stop_target() { kill "$(cat "$T/target.pid")" 2>/dev/null || true; wait "$(cat "$T/target.pid")" 2>/dev/null || true; }

if [ "${1:-}" = "target" ]; then # the peer side of a two-host run
  for nic in $NICS; do
    echo "target for $nic: $(start_target "$nic")"
  done
  echo "striped target: $(start_target "$(echo $NICS | tr ' ' ',')")"
  while true; do for nic in $NICS; do ib_write_bw -d "$nic" "${GIDARG[@]}" >/dev/null 2>&1 || sleep 1; done; done
fi

perf() { # tool nic size [perftest flags...] -> GB/s (or usec for *_lat)
  local tool=$1 nic=$2 size=$3 host="${PEER:-127.0.0.1}"
  shift 3
  local args=(-d "$nic" "${GIDARG[@]}" "$@" -s "$size" -D "$DURATION")
  if ! command -v "$tool" >/dev/null; then echo "-"; return; fi
  if [ "$FAKE" = 1 ]; then
    # perftest itself on the fake provider (rdma-core's loader finds the
    # fake's libibverbs.so.1 first; GID 1 is its RoCE v2 entry; -F: no
    # check of the CPU frequency on a shared machine).
    tool="env LD_LIBRARY_PATH=$(dirname "$KVFERRY_IBVERBS_LIB") $tool"
    args+=(-x 1 -F)
  fi
  if [ -z "$PEER" ]; then $tool "${args[@]}" --report_gbits >/dev/null 2>&1 & sleep 1; fi
  if [[ $tool == *_lat ]]; then
    $tool "${args[@]}" "$host" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 4 {print (NF >= 6 ? $6 : $3); exit}' # t_avg: column 6, or 3 with -D
  else
    $tool "${args[@]}" --report_gbits "$host" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 4 {printf "%.3f\n", $4 / 8; exit}'
  fi
  wait 2>/dev/null || true
}

kvf() { # seg op bs batch threads -> json
  "$BIN" --mode=initiator --protocol=rdma --segment_id="$1" --operation="$2" --block_size="$3" --batch_size="$4" \
    --threads="$5" --duration="$DURATION" --buffer_size=$BUF --device_name="$6" --json "${VRAM[@]}"
}

row() { # label kvjson baseline(GB/s or "-") factor
  python3 - "$@" <<'PY'
import json, sys
label, out, base, factor = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], float(sys.argv[4])
ratio = "-" if base in ("-", "") else f"{out['gb_per_s'] / (float(base) * factor):.2f}"
print(f"| {label} | {out['gb_per_s']:.2f} | {out['avg_batch_latency_us']:.1f} | {base} | {ratio} |")
PY
}

printf "| case | kvferry GB/s | avg batch us | perftest GB/s | ratio |\n|---|---|---|---|---|\n"
declare -A ONE HOST1M
for nic in $NICS; do
  seg=$(start_target "$nic")
  for op in write read; do
    tool=ib_write_bw; [ $op = read ] && tool=ib_read_bw
    for bs in 65536 1048576 4194304; do
      base=$(perf $tool "$nic" $bs)
      [ $bs = 65536 ] && ONE[$op]=$base
      out=$(kvf "$seg" $op $bs 16 "$THREADS" "$nic")
      row "$nic $op $((bs >> 10)) KiB" "$out" "$base" 1
      [ $bs = 1048576 ] && [ -z "${HOST1M[$op]:-}" ] && HOST1M[$op]=$(python3 -c 'import json,sys; print("%.3f" % json.loads(sys.argv[1])["gb_per_s"])' "$out")
    done
  done
  # batch-1 latency over one hop
  for bs in 8 65536; do
    lat=$(perf ib_write_lat "$nic" $bs)
    out=$(kvf "$seg" write $bs 1 1 "$nic")
    python3 -c "import json,sys; r=json.loads(sys.argv[1]); print(f'| {sys.argv[2]} write batch-1 {sys.argv[3]} B | | {r[\"avg_batch_latency_us\"]:.1f} | ib_write_lat {sys.argv[4]} us | target <= 5 us |')" "$out" "$nic" "$bs" "$lat"
  done
  stop_target
done
n=$(echo $NICS | wc -w)
all=$(echo $NICS | tr ' ' ',')
seg=$(start_target "$all")
for op in write read; do
  out=$(kvf "$seg" $op 1048576 16 "$THREADS" "$all")
  row "striped x$n $op 1 MiB" "$out" "${ONE[$op]:--}" "$n"
done
stop_target
if [ -n "${GPU:-}" ]; then
  # GPUDirect: GPU memory on both sides over the first NIC.
  nic=$(echo $NICS | cut -d' ' -f1)
  VRAM=(--use_vram --gpu_id="$GPU")
  seg=$(start_target "$nic")
  grep -h -i 'gpudirect\|GPU memory' "$T/target.log" || true
  for op in write read; do
    tool=ib_write_bw; [ $op = read ] && tool=ib_read_bw
    base=$(perf $tool "$nic" 1048576 --use_cuda="$GPU")
    out=$(kvf "$seg" $op 1048576 16 "$THREADS" "$nic")
    row "$nic $op 1 MiB GPU$GPU<->GPU$GPU (perftest --use_cuda)" "$out" "$base" 1
    row "$nic $op 1 MiB GPU<->GPU vs kvferry host<->host" "$out" "${HOST1M[$op]:--}" 1
  done
  stop_target
  VRAM=()
fi
echo
echo "ratio: kvferry over perftest (striped: over N x one NIC's 64 KiB ib_*_bw; GPU rows: over perftest --use_cuda, and over kvferry's host-memory 1 MiB figure)."
echo "machine: $(nproc) CPUs, NICs: $NICS, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
[ "$FAKE" = 1 ] && echo "FAKE PROVIDER: a smoke run of this script; both columns measure the test fixture (perftest and kvferry on the same fake), not RDMA."
[ "$FAKE" = 1 ] && echo "The fake pays one unix-socket round trip per work request: perftest posts one per message, kvferry one per MC_SLICE_SIZE (64 KiB) slice, so only the 64 KiB rows compare like with like."
exit 0
