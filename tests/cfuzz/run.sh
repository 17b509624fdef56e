#!/usr/bin/env bash
# Fuzz driver over the C entry points (tests/cfuzz/cfuzz.c), short form for
# make test: a few thousand random calls of the transfer-engine API and of
# the store API (embedded master) against the built library, with a random
# seed each run (printed; rerun with CFUZZ_SEED=N). make fuzz-long runs it
# for much longer. CFUZZ_CALLS overrides the call counts.
set -euo pipefail
cd "$(dirname "$0")/../.."
LIB="${KVFERRY_LIB_DIR:-$PWD/build/lib}/libkvferry.so.1"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
gcc -O1 -g -Wall -Wextra -Werror -std=gnu11 -Iinclude -Itests/c ${CFUZZ_CFLAGS:-} -o "$OUT/cfuzz" tests/cfuzz/cfuzz.c -ldl -lpthread
seed="${CFUZZ_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
calls="${CFUZZ_CALLS:-15000}"
# The library's own logs of refused calls are expected; keep the output short.
export KVFERRY_LOG_LEVEL="${KVFERRY_LOG_LEVEL:-off}"
timeout 600 "$OUT/cfuzz" "$LIB" "$seed" "$calls"
timeout 600 "$OUT/cfuzz" "$LIB" "$((seed + 1))" "$(( calls / 3 ))" store
