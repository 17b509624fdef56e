#!/usr/bin/env bash
# Two processes move 1 GiB over loopback through the C API and verify it.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT
gcc -O2 -Wall -Iinclude -o "$OUT/te_demo" examples/c/te_demo.c -Lbuild/lib -lkvferry -Wl,-rpath,"$PWD/build/lib"
"$OUT/te_demo" target "$OUT/ready" &
TPID=$!
for _ in $(seq 1 100); do [ -s "$OUT/ready" ] && break; sleep 0.1; done
read -r SEG ADDR < "$OUT/ready"
"$OUT/te_demo" initiator "$SEG" "$ADDR"
wait "$TPID"
echo "demo: OK"
