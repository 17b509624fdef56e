#!/usr/bin/env bash
# NIXL plugin benchmark over loopback between two processes: the KVFERRY
# plugin (loaded and driven as NIXL core drives it) beside the kvferry C API
# path, measured in the same run against the same target buffers. Prints a
# markdown table per transport (bench/nixl_bench.cpp explains the columns):
# "auto" (the engine's choice: the same-host transport between two processes)
# and "tcp" (forced loopback TCP).
#   SECONDS_PER_CASE=1.5 TRANSPORTS="auto tcp" bench/nixl.sh
set -euo pipefail
cd "$(dirname "$0")/.."
LIBDIR="${KVFERRY_LIB_DIR:-$PWD/build/lib}"
PLUGIN="$LIBDIR/nixl/libplugin_KVFERRY.so"
[ -e "$PLUGIN" ] || { echo "no $PLUGIN (run make first)" >&2; exit 1; }
SECS="${SECONDS_PER_CASE:-1.5}"
TRANSPORTS="${TRANSPORTS:-auto tcp}"
T="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$T"' EXIT
g++ -std=c++20 -O2 -Wall -Wextra -Werror -Iinclude -Iplugin -Itests/nixl -o "$T/nixl_bench" bench/nixl_bench.cpp -ldl

"$T/nixl_bench" target "$PLUGIN" "$T/target.md" 128 &
for _ in $(seq 1 300); do [ -s "$T/target.md" ] && break; sleep 0.1; done
[ -s "$T/target.md" ] || { echo "target did not start" >&2; exit 1; }
for tr in $TRANSPORTS; do
  echo
  echo "transport $tr; host: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  "$T/nixl_bench" initiator "$PLUGIN" "$LIBDIR/libkvferry.so" "$T/target.md" "$SECS" "$tr"
done
kill %1 2>/dev/null || true
wait || true
