#!/usr/bin/env bash
# NIXL plugin harness: builds the C++ test program against kvferry's own NIXL
# ABI declarations (plugin/nixl_abi.h) and runs it against the built
# libplugin_KVFERRY.so, loaded with dlopen as NIXL's plugin manager loads it:
# two agents in one process, two agents in two processes, a peer killed
# mid-transfer, and VRAM_SEG on the fake CUDA driver and the fake HIP runtime.
# `tests/nixl/run.sh vram` runs the VRAM part alone (make hw-check: with
# KVFERRY_HW=1 on the machine's CUDA driver, and HIP where ROCm is installed).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART="${1:-all}"
LIBDIR="${KVFERRY_LIB_DIR:-$PWD/build/lib}"
PLUGIN="$LIBDIR/nixl/libplugin_KVFERRY.so"
[ -e "$PLUGIN" ] || { echo "no $PLUGIN (run make first)" >&2; exit 1; }
OUT="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT
g++ -std=c++20 -O2 -g -Wall -Wextra -Werror -Iplugin -Itests/nixl -Itests/c ${KVFERRY_SAN_CFLAGS:-} -o "$OUT/nixl_test" tests/nixl/nixl_test.cpp -ldl
g++ -std=c++20 -Wall -Werror -Iplugin -o "$OUT/abi_probe" tests/nixl/abi_probe.cpp

if [ "$PART" != vram ]; then
echo "--- ABI layout (plugin/nixl_abi.h against specs/nixl.md section 2)"
"$OUT/abi_probe" | diff -u tests/nixl/abi_probe.golden -

wait_ready() { # file timeout-seconds
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "target did not start" >&2; return 1
}

echo "--- a failed backend creation says why in its first log line, at the default level"
env -u KVFERRY_LOG_LEVEL -u MC_LOG_LEVEL -u NIXL_LOG_LEVEL -u KVFERRY_LOG_FILE \
  "$OUT/nixl_test" badparam "$PLUGIN" 2>"$OUT/badparam.err"
first="$(head -n 1 "$OUT/badparam.err")"
case "$first" in
  *"KVFERRY backend creation failed"*tcp_lanes*lots*want*) ;;
  *) echo "first log line does not say why: $first" >&2; cat "$OUT/badparam.err" >&2; exit 1 ;;
esac
if grep -q num_workers "$OUT/badparam.err"; then
  echo "an ignored key was logged at the default level" >&2; exit 1
fi

echo "--- a plugin loaded under another file name warns once, naming the backend"
ln -s "$(readlink -f "$PLUGIN")" "$OUT/libplugin_BOGUS.so"
env -u KVFERRY_LOG_LEVEL -u MC_LOG_LEVEL -u NIXL_LOG_LEVEL -u KVFERRY_LOG_FILE \
  "$OUT/nixl_test" bogusname "$OUT/libplugin_BOGUS.so" 2>"$OUT/bogus.err"
if [ "$(grep -c 'loaded as backend BOGUS,' "$OUT/bogus.err")" != 1 ] || grep -q 'loaded as backend KVFERRY' "$OUT/bogus.err"; then
  echo "no single warning naming backend BOGUS:" >&2; cat "$OUT/bogus.err" >&2; exit 1
fi

for tr in auto tcp; do
  echo "--- two agents in one process ($tr)"
  timeout 300 "$OUT/nixl_test" single "$PLUGIN" "$tr"
done

for tr in auto tcp; do
  echo "--- two agents in two processes ($tr)"
  "$OUT/nixl_test" target "$PLUGIN" "$OUT/target-$tr.md" 64 &
  TARGET=$!
  wait_ready "$OUT/target-$tr.md" 30
  timeout 300 "$OUT/nixl_test" initiator "$PLUGIN" "$OUT/target-$tr.md" "$OUT" "$tr"
  timeout 60 tail --pid="$TARGET" -f /dev/null
  wait "$TARGET"
done

for tr in auto tcp; do
  echo "--- peer killed mid-transfer ($tr)"
  "$OUT/nixl_test" target "$PLUGIN" "$OUT/victim-$tr.md" 256 &
  VICTIM=$!
  wait_ready "$OUT/victim-$tr.md" 30
  timeout 300 "$OUT/nixl_test" fault "$PLUGIN" "$OUT/victim-$tr.md" "$VICTIM" "$tr"
  wait "$VICTIM" 2>/dev/null || true
done
fi

# VRAM_SEG on each GPU runtime, by table: the fake CUDA driver and the fake
# HIP runtime (a ROCm NIXL hands HIP memory over as VRAM_SEG); a hardware run
# takes the machine's CUDA driver, and its HIP runtime only where ROCm is
# installed.
FAKECUDA="$(tests/fakecuda/build.sh "$OUT/fakecuda")"
FAKEHIP="$(tests/fakecuda/build.sh "$OUT/fakecuda" hip)"
RUNTIMES=(cuda hip)
if [ "${KVFERRY_HW:-}" = 1 ] && [ -z "${KVFERRY_HIP_LIB:-}" ] && ! ldconfig -p | grep -q 'libamdhip64\.so '; then
  RUNTIMES=(cuda)
  echo "--- VRAM_SEG on HIP skipped: no ROCm runtime here (libamdhip64.so)"
fi
# The fake honours CUDA_VISIBLE_DEVICES as the driver does; the suites want
# all its devices (a hardware run keeps the machine's setting).
[ "${KVFERRY_HW:-}" = 1 ] || unset CUDA_VISIBLE_DEVICES
for rt in "${RUNTIMES[@]}"; do
  if [ "$rt" = hip ]; then
    RTLIB="$FAKEHIP" RTENV=(KVFERRY_HIP_LIB="$FAKEHIP" KVFERRY_GPU_RUNTIME=hip) DRIVER="the fake HIP runtime"
    [ "${KVFERRY_HW:-}" = 1 ] && DRIVER="the machine's HIP runtime"
  else
    RTLIB="$FAKECUDA" RTENV=(KVFERRY_CUDA_LIB="$FAKECUDA") DRIVER="the fake CUDA driver"
    [ "${KVFERRY_HW:-}" = 1 ] && DRIVER="the machine's CUDA driver"
  fi
  for tr in auto tcp; do
    echo "--- VRAM_SEG on $DRIVER ($tr)"
    env "${RTENV[@]}" timeout 120 "$OUT/nixl_test" vram "$PLUGIN" "$RTLIB" "$tr"
  done
done

echo "NIXL plugin harness passed"
