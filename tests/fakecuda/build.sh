#!/usr/bin/env bash
# Builds the fake CUDA driver (a test fixture) into DIR/libcuda.so.1 for the
# C, Python and NIXL suites, or (second argument hip) the fake HIP runtime (the
# same fake under HIP names, fake_hip.c) into DIR/libamdhip64.so; Go tests
# build them through internal/testutil/fakecuda.
# Usage: tests/fakecuda/build.sh DIR [cuda|hip]
# With KVFERRY_HW=1 (make hw-check) it builds nothing and prints the real
# driver the suites then use: $KVFERRY_CUDA_LIB, else libcuda.so.1.
set -euo pipefail
if [ "${KVFERRY_HW:-}" = 1 ]; then
  if [ "${2:-cuda}" = hip ]; then echo "${KVFERRY_HIP_LIB:-libamdhip64.so}"; else echo "${KVFERRY_CUDA_LIB:-libcuda.so.1}"; fi
  exit 0
fi
cd "$(dirname "$0")"
out="${1:?usage: build.sh DIR}"
mkdir -p "$out"
src=fake_cuda.c lib=libcuda.so.1
case "${2:-cuda}" in
  cuda) ;;
  hip) src=fake_hip.c lib=libamdhip64.so ;;
  *) echo "build.sh: runtime ${2} is neither cuda nor hip" >&2; exit 2 ;;
esac
gcc -O2 -g -Wall -Wextra -std=gnu11 ${KVFERRY_SAN_CFLAGS:-} -shared -fPIC -fvisibility=hidden -o "$out/$lib" "$src" -lpthread
echo "$out/$lib"
