#!/usr/bin/env bash
# Builds the fake CUDA driver (a test fixture) into DIR/libcuda.so.1 for the
# C, Python and NIXL suites; Go tests build it through
# internal/testutil/fakecuda. Usage: tests/fakecuda/build.sh DIR
# With KVFERRY_HW=1 (make hw-check) it builds nothing and prints the real
# driver the suites then use: $KVFERRY_CUDA_LIB, else libcuda.so.1.
set -euo pipefail
if [ "${KVFERRY_HW:-}" = 1 ]; then
  echo "${KVFERRY_CUDA_LIB:-libcuda.so.1}"
  exit 0
fi
cd "$(dirname "$0")"
out="${1:?usage: build.sh DIR}"
mkdir -p "$out"
gcc -O2 -g -Wall -Wextra -std=gnu11 ${KVFERRY_SAN_CFLAGS:-} -shared -fPIC -fvisibility=hidden -o "$out/libcuda.so.1" fake_cuda.c -lpthread
echo "$out/libcuda.so.1"
