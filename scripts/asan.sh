#!/usr/bin/env bash
# make asan (issue 15): the library built with Go's -asan (its C and C++
# shims compiled by cgo with AddressSanitizer, which -asan adds, and
# UndefinedBehaviorSanitizer) into build-asan/lib, then the C, NIXL and
# TensorRT-LLM suites against it with their test programs, C++ drivers and
# the fake CUDA driver built with -fsanitize=address,undefined
# (KVFERRY_SAN_CFLAGS, read by the suites' run.sh and tests/fakecuda).
# Any ASan or UBSan report fails the suite (UBSan does not recover; ASan
# exits non-zero; LeakSanitizer runs at every exit of the C suite's
# programs). KVFERRY_ASAN_OPTIONS replaces the ASAN_OPTIONS used. Usage: scripts/asan.sh
# [suite ...] (default: c nixl trtllm).
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
LIBDIR="$PWD/build-asan/lib"
SONAME=libkvferry.so.1
SAN="-fsanitize=undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
mkdir -p "$LIBDIR/nixl" "$LIBDIR/trtllm"
echo "--- building $LIBDIR/$SONAME with -asan"
CGO_CFLAGS="-O1 -g $SAN" CGO_CXXFLAGS="-O1 -g $SAN" CGO_LDFLAGS="-fsanitize=undefined" \
  "$GO" build -asan -buildmode=c-shared -trimpath \
  -ldflags "-X=runtime.godebugDefault=asyncpreemptoff=1 -extldflags '-Wl,--version-script=$PWD/plugin/exports.map -Wl,-soname,$SONAME -Wl,-z,now'" \
  -o "$LIBDIR/$SONAME" ./plugin
rm -f "$LIBDIR/$SONAME.h"
ln -sf "$SONAME" "$LIBDIR/libkvferry.so"
ln -sf "$SONAME" "$LIBDIR/libtransfer_engine.so"
ln -sf "../$SONAME" "$LIBDIR/nixl/libplugin_KVFERRY.so"
ln -sf "../$SONAME" "$LIBDIR/trtllm/libtensorrt_llm_mooncake_wrapper.so"

export KVFERRY_LIB_DIR="$LIBDIR"
export KVFERRY_SAN_CFLAGS="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# Go installs its own signal handlers (and uses SIGSEGV for nil checks):
# ASan must leave SIGSEGV to them. LeakSanitizer checks every exit of the
# C suite; in the NIXL and TensorRT-LLM suites its tracer itself crashes at
# the exit of the processes that ran the fake CUDA driver's VRAM cases
# ("Tracer caught signal 11", a tool failure, not a report), so there it is
# off. ASAN_OPTIONS set by the caller wins.
asan_opts="handle_segv=0:allow_user_segv_handler=1:detect_stack_use_after_return=0"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(c nixl trtllm)
failed=()
for s in "${suites[@]}"; do
  echo "=== tests/$s/run.sh (ASan + UBSan)"
  leaks=0
  [ "$s" = c ] && leaks=1
  export ASAN_OPTIONS="${KVFERRY_ASAN_OPTIONS:-detect_leaks=$leaks:$asan_opts}"
  log="$(mktemp)"
  if scripts/in-netns.sh "tests/$s/run.sh" 2>&1 | tee "$log"; then rc=0; else rc=1; fi
  if grep -qE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:" "$log"; then
    echo "--- tests/$s: sanitizer report (above)"
    rc=1
  fi
  rm -f "$log"
  [ $rc -eq 0 ] && echo "--- PASS tests/$s (ASan + UBSan)" || { echo "--- FAIL tests/$s (ASan + UBSan)"; failed+=("$s"); }
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED under sanitizers: ${failed[*]}"
  exit 1
fi
echo "C, NIXL and TensorRT-LLM suites clean under ASan + UBSan"
