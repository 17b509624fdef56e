#!/usr/bin/env bash
# libfabric benchmark: kvferry-bench over the efa transport beside a plain
# libfabric program on the same provider, WRITE and READ at 64 KiB, 1 MiB
# and 4 MiB, with the ratio printed (target: >= 0.9x the baseline at
# >= 64 KiB). The baseline is bench/fi_rma_base.c (two processes, the same
# hints, WINDOW operations in flight), built here with cc -lfabric where
# libfabric-dev is installed, since Debian ships no fabtests' fi_rma_bw;
# where fi_rma_bw is on PATH it is printed too. On this machine the
# provider is software (tcp;ofi_rxm over loopback): the figures measure it,
# not EFA. On AWS run it with PROVIDER=efa.
#
#   PROVIDER="tcp;ofi_rxm" DURATION=5 WINDOW=32 bench/efa.sh
#   PROVIDER=efa bench/efa.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PROVIDER="${PROVIDER:-tcp;ofi_rxm}"
DURATION="${DURATION:-5}"
THREADS="${THREADS:-2}"
BATCH="${BATCH:-16}"
WINDOW="${WINDOW:-$((THREADS * BATCH))}" # the baseline's operations in flight, as kvferry's
SIZES="${SIZES:-65536 1048576 4194304}"
BUF=$((256 << 20))
BIN="${KVFERRY_BENCH:-build/bin/kvferry-bench}"
[ -x "$BIN" ] || go build -o "$BIN" ./cmd/kvferry-bench
BASE=build/bin/fi_rma_base
if [ ! -x "$BASE" ] || [ bench/fi_rma_base.c -nt "$BASE" ]; then
  if [ -f /usr/include/rdma/fabric.h ]; then
    mkdir -p build/bin && ${CC:-cc} -O2 $(printf -- "-include rdma/%s.h " fabric fi_cm fi_domain fi_endpoint fi_errno fi_rma) -o "$BASE" bench/fi_rma_base.c -lfabric
  else
    echo "libfabric-dev is not installed: no baseline (apt-get install libfabric-dev)"
  fi
fi
T="$(mktemp -d)"
cleanup() { [ -s "$T/target.pid" ] && kill "$(cat "$T/target.pid")" 2>/dev/null; kill $(jobs -p) 2>/dev/null || true; }
trap 'cleanup; rm -rf "$T"' EXIT
export KVFERRY_LIBFABRIC_PROVIDER="$PROVIDER"

"$BIN" --mode=target --protocol=efa --buffer_size=$BUF --ready_file="$T/ready" --local_server_name=127.0.0.1 \
  >"$T/target.log" 2>&1 &
echo $! >"$T/target.pid"
for _ in $(seq 1 300); do [ -s "$T/ready" ] && break; sleep 0.1; done
[ -s "$T/ready" ] || { cat "$T/target.log"; echo "target did not start"; exit 1; }
SEG="$(cat "$T/ready")"

base_bw() { # op size -> GB/s or "-"
  [ -x "$BASE" ] || { echo "-"; return; }
  timeout $((DURATION + 60)) "$BASE" "$PROVIDER" "$1" "$2" "$DURATION" "$WINDOW" 2>/dev/null | awk '{print $3} END {if (!NR) print "-"}'
}

rma_bw() { # op size -> GB/s or "-"
  command -v fi_rma_bw >/dev/null || { echo "-"; return; }
  local port=$((20000 + RANDOM % 10000))
  fi_rma_bw -p "$PROVIDER" -o "$1" -S "$2" -I 200 -B "$port" >/dev/null 2>&1 &
  sleep 1
  fi_rma_bw -p "$PROVIDER" -o "$1" -S "$2" -I 200 -B "$port" 127.0.0.1 2>/dev/null |
    awk '$1 ~ /[0-9]/ && $0 ~ /MB\/sec/ {for (i = 1; i <= NF; i++) if ($(i+1) == "MB/sec") v = $i} END {print v ? v / 1000 : "-"}'
  wait 2>/dev/null || true
}

echo "provider $PROVIDER, libfabric $(fi_info --version 2>/dev/null | awk '/libfabric:/ {print $2}'), $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
echo "baseline: fi_rma_base, $WINDOW in flight; kvferry: $THREADS threads x batch $BATCH"
printf "| op | block | kvferry GB/s | fi_rma_base GB/s | ratio | fi_rma_bw GB/s |\n|---|---|---|---|---|---|\n"
for op in write read; do
  for bs in $SIZES; do
    out="$("$BIN" --mode=initiator --protocol=efa --segment_id="$SEG" --operation="$op" --block_size="$bs" \
      --batch_size="$BATCH" --threads="$THREADS" --duration="$DURATION" --buffer_size=$BUF --json)"
    base="$(base_bw "$op" "$bs")"
    fab="$(rma_bw "$op" "$bs")"
    python3 - "$op" "$bs" "$out" "$base" "$fab" <<'PY'
import json, sys
op, bs, out, base, fab = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4], sys.argv[5]
ratio = "-" if base in ("-", "") or float(base) == 0 else f"{out['gb_per_s'] / float(base):.2f}"
print(f"| {op} | {bs >> 10} KiB | {out['gb_per_s']:.3f} | {base} | {ratio} | {fab} |")
PY
  done
done
