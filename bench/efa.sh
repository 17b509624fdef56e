#!/usr/bin/env bash
# libfabric benchmark: kvferry-bench over the efa transport beside
# fabtests' fi_rma_bw on the same provider, WRITE and READ at 64 KiB, 1 MiB
# and 4 MiB, with the ratio printed (target: >= 0.9x fi_rma_bw at >= 64 KiB).
# On this machine the provider is software (tcp;ofi_rxm over loopback): the
# figures measure it, not EFA. On AWS run it with PROVIDER=efa.
# Debian's libfabric-bin ships no fabtests: without fi_rma_bw on PATH the
# baseline column reads "-".
#
#   PROVIDER="tcp;ofi_rxm" DURATION=5 bench/efa.sh
#   PROVIDER=efa bench/efa.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PROVIDER="${PROVIDER:-tcp;ofi_rxm}"
DURATION="${DURATION:-5}"
THREADS="${THREADS:-2}"
BUF=$((256 << 20))
BIN="${KVFERRY_BENCH:-build/bin/kvferry-bench}"
[ -x "$BIN" ] || go build -o "$BIN" ./cmd/kvferry-bench
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
printf "| op | block | kvferry GB/s | fi_rma_bw GB/s | ratio |\n|---|---|---|---|---|\n"
for op in write read; do
  for bs in 65536 1048576 4194304; do
    out="$("$BIN" --mode=initiator --protocol=efa --segment_id="$SEG" --operation="$op" --block_size="$bs" \
      --batch_size=16 --threads="$THREADS" --duration="$DURATION" --buffer_size=$BUF --json)"
    base="$(rma_bw "$op" "$bs")"
    python3 - "$op" "$bs" "$out" "$base" <<'PY'
import json, sys
op, bs, out, base = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4]
ratio = "-" if base in ("-", "") else f"{out['gb_per_s'] / float(base):.2f}"
print(f"| {op} | {bs >> 10} KiB | {out['gb_per_s']:.3f} | {base} | {ratio} |")
PY
  done
done
