#!/usr/bin/env bash
# The PD-disaggregation demo (examples/pd_disagg): a prefill process
# publishes 32 layers of fp16 KV cache through the store, a decode process
# reads them straight from the prefill's memory with the transfer engine,
# checks them bit for bit and prints GB/s, per-layer latency and the total
# time-to-KV. Embedded master and P2P handshake: nothing else to start.
#
#   scripts/demo.sh [--layers N] [--blocks N] [--block-size N] [--kv-heads N] [--head-dim N]
#
# Uses ${KVFERRY_LIB_DIR:-build/lib} (built with `make lib` when missing) and
# Debian's python3 with python3-numpy.
set -euo pipefail
cd "$(dirname "$0")/.."
LIBDIR="${KVFERRY_LIB_DIR:-$PWD/build/lib}"
PY="${PYTHON:-/usr/bin/python3}"
if [ ! -e "$LIBDIR/libkvferry.so.1" ]; then
  if [ -n "${KVFERRY_LIB_DIR:-}" ]; then
    echo "demo: $LIBDIR/libkvferry.so.1 is missing" >&2
    exit 1
  fi
  make lib
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  echo "demo: numpy is missing (apt-get install python3-numpy)" >&2
  exit 1
fi
export KVFERRY_LIB_DIR="$(cd "$LIBDIR" && pwd)"
exec timeout 600 "$PY" examples/pd_disagg/run.py "$@"
