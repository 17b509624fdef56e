#!/usr/bin/env bash
# Footprint of an idle transfer engine with BUF bytes (default 1 GiB)
# registered, every page of it touched (issue 38 target 7). Rows:
#   kvferry, C host    bench/footprint.c on build/lib/libkvferry.so (make lib)
#   kvferry-bench      the Go benchmark's target (--mode=target, TCP)
#   transfer_engine_bench  Mooncake's target, when MOONCAKE_TE_BENCH names it
# Each process is read IDLE seconds (default 5) after it is ready, with
# nothing in flight: RSS from /proc/<pid>/smaps, the resident part of the
# mappings of at least BUF/2 bytes (the registered buffer) shown apart and
# subtracted ("RSS beyond buffer", target <= 64 MiB for kvferry; split
# into anonymous memory and file-backed pages such as the library's code,
# which /proc/<pid>/status counts as RssAnon and RssFile), threads
# from /proc/<pid>/status, goroutines from go_goroutines on the metrics
# listener (KVFERRY_METRICS_ADDR; the listener's own accept loop and the
# scrape's connection are counted in). The processes run one after the
# other, so each has the machine to itself.
#   bench/footprint.sh
#   MOONCAKE_TE_BENCH=/path/transfer_engine_bench IDLE=10 bench/footprint.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUF="${BUF:-$((1 << 30))}"
IDLE="${IDLE:-5}"
PORT="${PORT:-19177}"
T="$(mktemp -d)"
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null || true; rm -rf "$T"' EXIT
mkdir -p build/bin
go build -o build/bin/kvferry-bench ./cmd/kvferry-bench # always this tree's code

# row NAME PID prints one table row for a process that is ready and idle.
row() {
  sleep "$IDLE"
  python3 - "$1" "$2" "$BUF" "$PORT" <<'PY'
import re, sys, urllib.request
name, pid, buf, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rss = big = 0
size = 0
for line in open(f"/proc/{pid}/smaps"):
    m = re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line)
    if m:
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        size = hi - lo
    elif line.startswith("Rss:"):
        kb = int(line.split()[1])
        rss += kb
        if size >= buf // 2:
            big += kb
st = {l.split(":")[0]: l.split()[1] for l in open(f"/proc/{pid}/status") if ":" in l and len(l.split()) > 1}
threads = st["Threads"]
anon, file = int(st["RssAnon"]), int(st["RssFile"]) + int(st["RssShmem"])
gor = "-"
if port != "-":
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        gor = next(l.split()[1] for l in body.splitlines() if l.startswith("go_goroutines "))
    except Exception as e:  # Mooncake has no such listener
        gor = f"- ({type(e).__name__})"
mib = lambda kb: kb / 1024
print(f"| {name} | {mib(rss):.1f} | {mib(big):.1f} | {mib(rss - big):.1f} | {mib(anon - big):.1f} | {mib(file):.1f} | {threads} | {gor} |")
PY
}

echo "Idle engine, $((BUF >> 20)) MiB registered and touched, read ${IDLE} s after ready:"
echo
printf "| process | RSS MiB | buffer RSS MiB | RSS beyond buffer MiB | of it anonymous | of it file-backed | threads | goroutines |\n|---|---|---|---|---|---|---|---|\n"

if [ -e build/lib/libkvferry.so ]; then
  cc -O2 -Iinclude bench/footprint.c -Lbuild/lib -lkvferry -Wl,-rpath,"$PWD/build/lib" -o "$T/footprint"
  KVFERRY_METRICS_ADDR=127.0.0.1:$PORT KVFERRY_LOG_LEVEL=warn "$T/footprint" "$BUF" $((IDLE + 30)) > "$T/c.out" 2> "$T/c.log" &
  pid=$!
  for _ in $(seq 1 300); do grep -q ready "$T/c.out" && break; sleep 0.1; done
  grep -q ready "$T/c.out" || { echo "footprint (C host) did not start" >&2; cat "$T/c.log" >&2; exit 1; }
  row "kvferry, C host (libkvferry.so)" "$pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
else
  echo "| kvferry, C host | (no build/lib/libkvferry.so: make lib) | | | | | | |"
fi

KVFERRY_METRICS_ADDR=127.0.0.1:$PORT MC_FORCE_TCP=1 build/bin/kvferry-bench --mode=target --protocol=tcp \
  --buffer_size="$BUF" --ready_file="$T/kv.ready" > "$T/kv.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do [ -s "$T/kv.ready" ] && break; sleep 0.1; done
[ -s "$T/kv.ready" ] || { echo "kvferry-bench target did not start" >&2; tail "$T/kv.log" >&2; exit 1; }
row "kvferry-bench target" "$pid"
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=

if [ -n "${MOONCAKE_TE_BENCH:-}" ]; then
  read -r -a MC_ENV <<< "${MOONCAKE_ENV-MC_TCP_ENABLE_CONNECTION_POOL=1}"
  env "${MC_ENV[@]}" GLOG_logtostderr=1 "$MOONCAKE_TE_BENCH" --mode=target --metadata_server=P2PHANDSHAKE \
    --local_server_name=127.0.0.1 --protocol=tcp --buffer_size="$BUF" > "$T/mc.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 300); do grep -q "listening on" "$T/mc.log" && break; sleep 0.1; done
  grep -q "listening on" "$T/mc.log" || { echo "transfer_engine_bench target did not start" >&2; tail "$T/mc.log" >&2; exit 1; }
  sleep 1 # it registers its buffers after it listens
  row "Mooncake transfer_engine_bench target" "$pid"
  kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
else
  echo "| Mooncake transfer_engine_bench | (MOONCAKE_TE_BENCH not set) | | | | | | |"
fi
echo
echo "machine: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
