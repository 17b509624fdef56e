#!/usr/bin/env bash
# NIXL plugin benchmark over loopback between two processes: the KVFERRY
# plugin (loaded and driven as NIXL core drives it) beside the kvferry C API
# path, measured in the same run against the same target buffers. Prints a
# markdown table per transport (bench/nixl_bench.cpp explains the columns):
# "auto" (the engine's choice: the same-host transport between two processes)
# and "tcp" (forced loopback TCP).
#   SECONDS_PER_CASE=1.5 TRANSPORTS="auto tcp" bench/nixl.sh
#
# When ucx_perftest is installed (Debian package ucx-utils), the same run
# also measures UCX between two processes of this host at 256 KiB, 512 KiB
# and 1 MiB (ucp_put_bw for WRITE, ucp_get for READ, UCX's own transport
# choice) and prints it beside the plugin's figures: the yardstick of NIXL's
# UCX backend, which adds NIXL's own cost on top. Two UCX rows: memory the
# application allocated and registered (UCX_ALLOC_PRIO=heap; what NIXL
# hands to UCX, as kvferry's figures use), and memory UCX allocated itself
# in shared memory (its default in ucx_perftest; UCX then writes into the
# peer's mapped buffer with memcpy, which NIXL's registered buffers never
# allow).
set -euo pipefail
cd "$(dirname "$0")/.."
# Always this tree's library (a build/lib left by an older make would be
# stale), unless KVFERRY_LIB_DIR names another build.
[ -n "${KVFERRY_LIB_DIR:-}" ] || make -s lib >/dev/null
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
  "$T/nixl_bench" initiator "$PLUGIN" "$LIBDIR/libkvferry.so" "$T/target.md" "$SECS" "$tr" | tee "$T/table.$tr.md"
done
kill %1 2>/dev/null || true
wait || true

command -v ucx_perftest >/dev/null || { echo; echo "(ucx_perftest not installed: no UCX baseline; apt-get install ucx-utils)"; exit 0; }
# ucx MEMORY TEST SIZE: prints UCX's bandwidth in GB/s (its MB are MiB).
ucx() {
  local env=() port
  [ "$1" = app ] && env=(UCX_ALLOC_PRIO=heap)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  env "${env[@]}" timeout 150 ucx_perftest -t "$2" -s "$3" -n "$4" -w 100 -f -p "$port" >/dev/null 2>&1 &
  sleep 0.5
  env "${env[@]}" timeout 120 ucx_perftest 127.0.0.1 -t "$2" -s "$3" -n "$4" -w 100 -f -p "$port" 2>/dev/null |
    awk 'NF >= 8 && $1 ~ /^[0-9]+$/ {printf "%.2f\n", $6 * 1048576 / 1e9}'
  wait || true
}
echo
echo "UCX $(ucx_info -v 2>/dev/null | sed -n 's/^# Version //p' | head -1) in the same run (ucx_perftest, two processes, one buffer of the block size reused):"
for mem in app shm; do
  for size in 262144 524288 1048576; do
    echo "$mem $size WRITE $(ucx "$mem" ucp_put_bw "$size" 3000)"
    echo "$mem $size READ $(ucx "$mem" ucp_get "$size" 1000)"
  done
done > "$T/ucx.txt"
python3 - "$T/ucx.txt" "$T/table.auto.md" <<'PY'
import sys
ucx = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) == 4:
        ucx[(f[0], int(f[1]) // 1024, f[2])] = float(f[3])
plugin = {}
try:
    for line in open(sys.argv[2]):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) >= 4 and c[0] in ("WRITE", "READ") and c[1].endswith(" KiB"):
            plugin[(c[0], int(c[1].split()[0]), int(c[2]))] = float(c[3])
except FileNotFoundError:
    pass
print()
print("| op | block | UCX, application memory GB/s | UCX, its own shared memory GB/s | kvferry plugin batch 1 | batch 32 | batch 1 / UCX app | batch 32 / UCX app |")
print("|---|---|---|---|---|---|---|---|")
for op in ("WRITE", "READ"):
    for kib in (256, 512, 1024):
        a, s = ucx.get(("app", kib, op)), ucx.get(("shm", kib, op))
        p1, p32 = plugin.get((op, kib, 1)), plugin.get((op, kib, 32))
        fmt = lambda v: "n/a" if v is None else f"{v:.2f}"
        ratio = lambda p: f"{p / a:.1f}x" if a and p else "n/a"
        print(f"| {op} | {kib} KiB | {fmt(a)} | {fmt(s)} | {fmt(p1)} | {fmt(p32)} | {ratio(p1)} | {ratio(p32)} |")
PY
