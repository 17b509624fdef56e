#!/usr/bin/env bash
# The PD-disaggregation demo (examples/pd_disagg): a prefill process
# publishes 32 layers of fp16 KV cache through the store, a decode process
# reads them straight from the prefill's memory with the transfer engine,
# checks them bit for bit and prints GB/s, per-layer latency and the total
# time-to-KV. Embedded master and P2P handshake: nothing else to start.
#
#   scripts/demo.sh [--layers N] [--blocks N] [--block-size N] [--kv-heads N] [--head-dim N]
#
# With Debian's python3 and python3-numpy (${PYTHON:-/usr/bin/python3}) it
# runs the Python version (examples/pd_disagg/*.py) on
# ${KVFERRY_LIB_DIR:-build/lib}, built with `make lib` when missing. Without
# them it runs the Go version (examples/pd_disagg/godemo), which needs only
# Go. It says which, and exits with the demo's status.
set -euo pipefail
cd "$(dirname "$0")/.."
LIBDIR="${KVFERRY_LIB_DIR:-$PWD/build/lib}"
PY="${PYTHON:-/usr/bin/python3}"
GO="${GO:-go}"

if "$PY" -c 'import numpy' 2>/dev/null; then
  if [ ! -e "$LIBDIR/libkvferry.so.1" ]; then
    if [ -n "${KVFERRY_LIB_DIR:-}" ]; then
      echo "demo: $LIBDIR/libkvferry.so.1 is missing" >&2
      exit 1
    fi
    make lib
  fi
  echo "demo: the Python version ($PY, examples/pd_disagg/run.py)" >&2
  export KVFERRY_LIB_DIR="$(cd "$LIBDIR" && pwd)"
  exec timeout 600 "$PY" examples/pd_disagg/run.py "$@"
fi

# The Go demo takes the same options, written with one dash or two.
BIN="$PWD/build/bin/pd-demo"
mkdir -p "$(dirname "$BIN")"
"$GO" build -o "$BIN" ./examples/pd_disagg/godemo
echo "demo: the Go version ($BIN, examples/pd_disagg/godemo; no $PY with numpy here)" >&2
exec timeout 600 "$BIN" "$@"
