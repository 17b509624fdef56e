# Shared set-up of the mixed-cluster store scripts (store-mooncake.sh,
# store-mooncake-faults.sh), sourced from the project root after `set -uo
# pipefail`. It skips (exit 0) without a Mooncake build given, checks the
# kvferry and Mooncake files, makes the scratch directory $T (the caller's
# EXIT trap, set after sourcing, removes it) and $LOGDIR, builds the C driver $DRV, and
# defines the helpers below. Nothing here builds or fetches Mooncake.
if [ -z "${MOONCAKE_MASTER:-}" ] || [ -z "${MOONCAKE_STORE_LIB:-}" ]; then
  echo "skipped: MOONCAKE_MASTER and MOONCAKE_STORE_LIB not set (a Mooncake store build beside the project)"
  exit 0
fi
for f in "$MOONCAKE_MASTER" "$MOONCAKE_STORE_LIB"; do
  [ -f "$f" ] || { echo "$f: no such file" >&2; exit 1; }
done
KV_LIB="${KVFERRY_LIB_DIR:-$PWD/build/lib}/libkvferry.so"
KV_MASTER="${KVFERRY_MASTER:-$PWD/build/bin/kvferry-master}"
[ -f "$KV_LIB" ] || { echo "$KV_LIB missing: run make lib" >&2; exit 1; }
[ -x "$KV_MASTER" ] || { echo "$KV_MASTER missing: run make all" >&2; exit 1; }
export SEGMENT_MB="${SEGMENT_MB:-256}"

T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT # until the caller sets its own
LOGDIR="${LOGS:-$T/logs}"
mkdir -p "$LOGDIR"
DRV="$T/store_mooncake"
gcc -O2 -g -Wall -Wextra -Werror -std=gnu11 -o "$DRV" tests/interop/store_mooncake.c -ldl || exit 1
# Mooncake's libraries beside its store library (its TE, glog, ...).
export LD_LIBRARY_PATH="$(dirname "$MOONCAKE_STORE_LIB")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# lib_of kv|mc: the store library of that client.
lib_of() { if [ "$1" = kv ]; then echo "$KV_LIB"; else echo "$MOONCAKE_STORE_LIB"; fi; }

# await_port KIND PORT: waits (deadline 20 s) until a master listens there.
await_port() {
  for _ in $(seq 200); do
    python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$2),0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "master $1 did not listen on $2" >&2
  return 1
}

passed=0 failed=0
# count OUT: adds the driver's ok/FAIL lines to the totals and shows the
# failures (and, where the driver wrote them, its "# " notes).
count() {
  local ok bad
  ok=$(grep -c '^ok ' "$1" || true)
  bad=$(grep -c '^FAIL' "$1" || true)
  passed=$((passed + ok))
  failed=$((failed + bad))
  grep '^FAIL' "$1" | sed "s|^|  $(basename "$1" .out): |" >&2 || true
  grep '^# ' "$1" | sed "s|^# |  $(basename "$1" .out): |" || true
}
