#!/usr/bin/env bash
# Builds the fake CUDA driver (a test fixture) into DIR/libcuda.so.1 for the
# C, Python and NIXL suites; Go tests build it through
# internal/testutil/fakecuda. Usage: tests/fakecuda/build.sh DIR
set -euo pipefail
cd "$(dirname "$0")"
out="${1:?usage: build.sh DIR}"
mkdir -p "$out"
gcc -O2 -g -Wall -Wextra -std=gnu11 ${KVFERRY_SAN_CFLAGS:-} -shared -fPIC -fvisibility=hidden -o "$out/libcuda.so.1" fake_cuda.c -lpthread
echo "$out/libcuda.so.1"
