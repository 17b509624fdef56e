#!/usr/bin/env bash
# TensorRT-LLM suite (shared/specs/tensorrt-llm.md).
#
# Route B: route_b.c replays the stock libtensorrt_llm_mooncake_wrapper.so's
# use of the Mooncake C API. It is linked like the wrapper (DT_NEEDED
# libtransfer_engine.so, satisfied at link time by te_stub.c) and runs, in two
# processes, against kvferry's libtransfer_engine.so found on
# LD_LIBRARY_PATH.
#
# Route A: agent_test.cpp dlopens libtensorrt_llm_mooncake_wrapper.so by name
# and drives createMooncakeTransferAgent's BaseTransferAgent in two processes.
#
# Environment: KVFERRY_LIB_DIR (default build/lib); TRTLLM_TEST_BUF_MIB (size
# of the route B buffers, default 512) and TRTLLM_TEST_NBUF (buffers per
# process, default 3), and kVRAM of HIP memory refused on the fake HIP
# runtime (TensorRT-LLM is CUDA-only). `tests/trtllm/run.sh vram` runs route A's kVRAM part
# alone (make hw-check: with KVFERRY_HW=1 on the machine's CUDA driver).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART="${1:-all}"
LIBDIR="${KVFERRY_LIB_DIR:-$PWD/build/lib}"
# Agents advertise TLLM_MOONCAKE_IP_ADDR (else the first non-loopback
# address): tests stay on loopback.
export TLLM_MOONCAKE_IP_ADDR=127.0.0.1
BUF_MIB="${TRTLLM_TEST_BUF_MIB:-512}"
NBUF="${TRTLLM_TEST_NBUF:-3}"
OUT="$(mktemp -d)"
cleanup() {
  local pids
  pids="$(jobs -p)"
  [ -n "$pids" ] && kill $pids 2>/dev/null || true
  rm -rf "$OUT"
}
trap cleanup EXIT

for f in libtransfer_engine.so trtllm/libtensorrt_llm_mooncake_wrapper.so; do
  [ -e "$LIBDIR/$f" ] || { echo "missing $LIBDIR/$f (run make lib)" >&2; exit 1; }
done

if [ "$PART" != vram ]; then
CFLAGS="-O2 -g -Wall -Wextra -Werror -std=gnu11 -Iinclude -Itests/c ${KVFERRY_SAN_CFLAGS:-}"
mkdir -p "$OUT/stub"
gcc $CFLAGS -shared -fPIC -o "$OUT/stub/libtransfer_engine.so" tests/trtllm/te_stub.c
gcc $CFLAGS -o "$OUT/route_b" tests/trtllm/route_b.c -L"$OUT/stub" -ltransfer_engine -lpthread
readelf -d "$OUT/route_b" | grep -q 'NEEDED.*\[libtransfer_engine.so\]' || {
  echo "route_b is not linked against libtransfer_engine.so by name" >&2; exit 1; }

# route_b <dir> <nbuf> <buf MiB> [env...]: one ctx and one gen process.
route_b() {
  local dir="$OUT/$1" nbuf="$2" mib="$3" ctx
  shift 3
  mkdir -p "$dir"
  env "$@" LD_LIBRARY_PATH="$LIBDIR" timeout 300 "$OUT/route_b" ctx "$dir" "$nbuf" "$mib" 3 &
  ctx=$!
  env "$@" LD_LIBRARY_PATH="$LIBDIR" timeout 300 "$OUT/route_b" gen "$dir" "$nbuf" "$mib" 3
  wait "$ctx"
}
echo "--- route B: stock wrapper call sequence over libtransfer_engine.so ($NBUF x $BUF_MIB MiB per process)"
route_b b1 "$NBUF" "$BUF_MIB"
echo "--- route B over TCP (MC_FORCE_TCP=1, as TensorRT-LLM's CI runs Mooncake; 2 x 64 MiB)"
route_b b2 2 64 MC_FORCE_TCP=1
echo "route B passed"
fi

CXXFLAGS="-std=c++17 -O2 -g -Wall -Wextra -Werror -Iinclude -Iplugin -Itests/c ${KVFERRY_SAN_CFLAGS:-}"
g++ $CXXFLAGS -o "$OUT/agent_test" tests/trtllm/agent_test.cpp -ldl -lpthread

if [ "$PART" != vram ]; then
# Over TCP (a peer on another host), so that a stopped or killed peer is seen
# through the network path.
echo "--- route A: createMooncakeTransferAgent from libtensorrt_llm_mooncake_wrapper.so (MC_FORCE_TCP=1)"
mkdir -p "$OUT/a"
MC_FORCE_TCP=1 LD_LIBRARY_PATH="$LIBDIR/trtllm" timeout 300 "$OUT/agent_test" gen "$OUT/a" &
gen=$!
set +e
# Short deadlines for ctx, so the stopped-peer phase ends in seconds.
MC_FORCE_TCP=1 MC_TRANSFER_TIMEOUT=5 MC_TCP_STATUS_TIMEOUT_SEC=5 LD_LIBRARY_PATH="$LIBDIR/trtllm" \
  timeout 300 "$OUT/agent_test" ctx "$OUT/a"
ctx_rc=$?
wait "$gen"
gen_rc=$?
set -e
# gen ends killed by ctx (SIGKILL: 137) in the last phase.
if [ "$ctx_rc" -ne 0 ] || [ "$gen_rc" -ne 137 ]; then
  echo "route A failed: ctx exit $ctx_rc, gen exit $gen_rc (want 0 and 137)" >&2
  exit 1
fi
echo "route A passed"
fi

FAKECUDA="$(tests/fakecuda/build.sh "$OUT/fakecuda")"
DRIVER="the fake CUDA driver"
[ "${KVFERRY_HW:-}" = 1 ] && DRIVER="the machine's CUDA driver"
# The fake honours CUDA_VISIBLE_DEVICES as the driver does; the suites want
# all its devices (a hardware run keeps the machine's setting).
[ "${KVFERRY_HW:-}" = 1 ] || unset CUDA_VISIBLE_DEVICES
for tr in auto tcp; do
  echo "--- route A: kVRAM on $DRIVER ($tr)"
  force=""
  [ "$tr" = tcp ] && force=1
  env ${force:+MC_FORCE_TCP=1} KVFERRY_CUDA_LIB="$FAKECUDA" LD_LIBRARY_PATH="$LIBDIR/trtllm" \
    timeout 120 "$OUT/agent_test" vram "$FAKECUDA"
done
# TensorRT-LLM is CUDA-only: on the fake HIP runtime kVRAM is refused
# (a hardware run has no fake HIP).
if [ "${KVFERRY_HW:-}" != 1 ]; then
  FAKEHIP="$(tests/fakecuda/build.sh "$OUT/fakecuda" hip)"
  echo "--- route A: kVRAM of HIP memory refused (the fake HIP runtime)"
  env KVFERRY_HIP_LIB="$FAKEHIP" KVFERRY_GPU_RUNTIME=hip LD_LIBRARY_PATH="$LIBDIR/trtllm" \
    timeout 120 "$OUT/agent_test" vram-hip "$FAKEHIP"
fi
