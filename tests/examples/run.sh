#!/usr/bin/env bash
# The examples suite: builds every program under examples/ as a reader
# would (C with gcc, C++ with g++, Go with go build, against include/,
# plugin/ and the built library) and runs each with small sizes. Each
# example checks its own bytes and exits non-zero on failure. The Python
# examples run when ${PYTHON:-/usr/bin/python3} exists (the PD demo's
# Python version also needs numpy; scripts/test-deps.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/../.."
LIBDIR="$(cd "${KVFERRY_LIB_DIR:-$PWD/build/lib}" 2>/dev/null && pwd)" || {
  echo "tests/examples: no ${KVFERRY_LIB_DIR:-build/lib} (run make lib)" >&2; exit 1; }
for f in libkvferry.so.1 libkvferry.so nixl/libplugin_KVFERRY.so trtllm/libtensorrt_llm_mooncake_wrapper.so; do
  [ -e "$LIBDIR/$f" ] || { echo "tests/examples: missing $LIBDIR/$f (run make lib)" >&2; exit 1; }
done
PY="${PYTHON:-/usr/bin/python3}"
GO="${GO:-go}"
OUT="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT

# run <label> <command...>: one example (a command bounded here, or a
# function that bounds its own), with its time.
run() {
  local label=$1 start
  shift
  echo "--- $label"
  start=$(date +%s%N)
  if declare -F "$1" >/dev/null; then "$@"; else timeout 120 "$@"; fi
  echo "--- $label: ok ($(( ($(date +%s%N) - start) / 1000000 )) ms)"
}

# The builds run side by side; each must succeed.
CFLAGS="-O1 -Wall -Wextra -Werror -std=gnu11 -Iinclude ${KVFERRY_SAN_CFLAGS:-}"
CXXFLAGS="-O1 -Wall -Wextra -Werror -Iplugin ${KVFERRY_SAN_CFLAGS:-}"
LINK="-L$LIBDIR -lkvferry -Wl,-rpath,$LIBDIR"
pids=()
gcc $CFLAGS -o "$OUT/te_demo" examples/c/te_demo.c $LINK & pids+=($!)
gcc $CFLAGS -o "$OUT/store_demo" examples/c/store_demo.c $LINK & pids+=($!)
g++ -std=c++20 $CXXFLAGS -Itests/nixl -o "$OUT/nixl_agent_demo" examples/nixl/nixl_agent_demo.cpp -ldl & pids+=($!)
g++ -std=c++17 $CXXFLAGS -o "$OUT/trtllm_agent_demo" examples/trtllm/trtllm_agent_demo.cpp -ldl & pids+=($!)
"$GO" build -o "$OUT/pd-demo" ./examples/pd_disagg/godemo & pids+=($!)
for p in "${pids[@]}"; do wait "$p" || { echo "tests/examples: a build failed" >&2; exit 1; }; done

te_demo() { # the C transfer-engine example with 64 MiB (make demo-c moves 1 GiB)
  timeout 120 "$OUT/te_demo" target "$OUT/te.ready" 64 &
  local target=$!
  for _ in $(seq 1 200); do [ -s "$OUT/te.ready" ] && break; sleep 0.05; done
  [ -s "$OUT/te.ready" ] || { echo "te_demo target did not start" >&2; return 1; }
  read -r seg addr < "$OUT/te.ready"
  timeout 120 "$OUT/te_demo" initiator "$seg" "$addr" 64
  wait "$target"
}
run "C: transfer engine (examples/c/te_demo.c)" te_demo
run "C: store (examples/c/store_demo.c)" "$OUT/store_demo"
run "C++: NIXL agent (examples/nixl/nixl_agent_demo.cpp)" "$OUT/nixl_agent_demo" "$LIBDIR/nixl/libplugin_KVFERRY.so"
run "C++: TensorRT-LLM agent (examples/trtllm/trtllm_agent_demo.cpp)" \
  env LD_LIBRARY_PATH="$LIBDIR/trtllm" "$OUT/trtllm_agent_demo"
run "Go: PD-disaggregation demo (examples/pd_disagg/godemo), 4 layers" "$OUT/pd-demo" -layers 4 -blocks 8 -timeout 60

if [ -x "$PY" ]; then
  export KVFERRY_LIB_DIR="$LIBDIR" PYTHONPATH="$PWD/python" PYTHONDONTWRITEBYTECODE=1
  run "Python: engine and store (examples/python/kvferry_demo.py)" "$PY" examples/python/kvferry_demo.py
  if "$PY" -c 'import numpy' 2>/dev/null; then
    run "Python: PD-disaggregation demo (examples/pd_disagg/run.py), 4 layers" \
      "$PY" examples/pd_disagg/run.py --layers 4 --blocks 8 --timeout 60
  else
    echo "--- Python PD-disaggregation demo skipped: no numpy for $PY (scripts/test-deps.sh installs it)"
  fi
else
  echo "--- Python examples skipped: no $PY (scripts/test-deps.sh installs python3)"
fi
echo "examples passed"
