#!/usr/bin/env bash
# kvferry's RDMA transport beside Mooncake's, both on the fake verbs provider
# (tests/rdma/fakeverbs), each process a host with its own fake NICs (one
# FAKEVERBS_DIR, the same FAKEVERBS_DEVICES): the P2P handshake, Mooncake's
# RDMA endpoint `Connection` exchange, then 64 MiB WRITE and READ with
# notifications, every byte checked, in four pairings (target <- initiator):
# kvferry <- kvferry and Mooncake <- Mooncake (the controls), kvferry <-
# Mooncake and Mooncake <- kvferry. The driver (rdma_mooncake.c, beside this
# file) is one C program against transfer_engine_c.h, loaded with dlopen, so
# the same code runs on either library; it checks that the initiator's fake
# NICs moved every byte, so nothing went over another transport.
#
# Runs only with Mooncake's library given; nothing here builds or fetches
# Mooncake (docs/guide/rdma.md says how to build one beside the project):
#
#   MOONCAKE_TE_LIB=/path/libtransfer_engine.so tests/interop/rdma-mooncake.sh
#
# Environment: KVFERRY_LIB_DIR (kvferry's build/lib, default this tree's),
# SIZE (bytes per transfer, default 64 MiB), PAIRS ("kv:kv mc:mc kv:mc
# mc:kv": target:initiator pairings to run), FAKEVERBS_DEVICES (default
# "fake_mlx5_0,fake_mlx5_1"), LOGS (a directory that keeps every process's
# log, <target>-<initiator>.{target,initiator}.log), MOONCAKE_ENV (extra environment for Mooncake's
# processes, e.g. "MC_GID_INDEX=1 GLOG_v=1").
#
# What Mooncake reads from sysfs and the fake has not got: its topology
# discovery stats /dev/infiniband/<uverbsN> and resolves
# /sys/class/infiniband/<nic>/../.. for the NIC's PCI
# address and NUMA node and skips a NIC without it, so every process gets
# MC_CUSTOM_TOPO_JSON, a priority matrix naming the fake NICs for cpu:0
# (kvferry reads the same file). Its GID ranking reads
# /sys/class/infiniband/<nic>/ports/1/gid_attrs/ndevs/<i>, absent here: every
# GID then ranks as one without a network device, and the first valid one
# (index 1 on the fake's RoCE port) is taken.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${MOONCAKE_TE_LIB:-}" ]; then
  echo "skipped: MOONCAKE_TE_LIB not set (a Mooncake libtransfer_engine.so built beside the project)"
  exit 0
fi
[ -f "$MOONCAKE_TE_LIB" ] || { echo "MOONCAKE_TE_LIB=$MOONCAKE_TE_LIB: no such file" >&2; exit 1; }
KV_LIB="${KVFERRY_LIB_DIR:-$PWD/build/lib}/libtransfer_engine.so"
[ -f "$KV_LIB" ] || { echo "$KV_LIB missing: run make lib" >&2; exit 1; }
SIZE="${SIZE:-$((64 << 20))}"
PAIRS="${PAIRS:-kv:kv mc:mc kv:mc mc:kv}"
DEVICES="${FAKEVERBS_DEVICES:-fake_mlx5_0,fake_mlx5_1}"
read -r -a MC_EXTRA <<< "${MOONCAKE_ENV:-}"

T="$(mktemp -d)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$T"; }
trap cleanup EXIT

mkdir -p "$T/fake" "$T/sock"
FAKE="$T/fake/libibverbs.so.1"
cc -shared -fPIC -O2 -Wall -Wl,--version-script=tests/rdma/fakeverbs/c/libibverbs.map -Wl,-soname,libibverbs.so.1 \
  -o "$FAKE" tests/rdma/fakeverbs/c/fake_ibverbs.c -lpthread -ldl
gcc -O2 -g -Wall -Wextra -Werror -std=gnu11 -Iinclude -Itests/c -o "$T/rdma_mooncake" tests/interop/rdma_mooncake.c -ldl

python3 - "$DEVICES" > "$T/topo.json" <<'PY'
import json, sys
print(json.dumps({"cpu:0": [sys.argv[1].split(","), []]}))
PY

# Both libraries see the fake: kvferry opens KVFERRY_IBVERBS_LIB, Mooncake
# is linked against libibverbs.so.1, found first in LD_LIBRARY_PATH.
COMMON=(FAKEVERBS_DIR="$T/sock" FAKEVERBS_DEVICES="$DEVICES" KVFERRY_IBVERBS_LIB="$FAKE"
  LD_LIBRARY_PATH="$T/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" MC_CUSTOM_TOPO_JSON="$T/topo.json")
lib_of() { if [ "$1" = kv ]; then echo "$KV_LIB"; else echo "$MOONCAKE_TE_LIB"; fi; }
env_of() { # side: the environment of that library's processes
  if [ "$1" = kv ]; then
    echo KVFERRY_TRANSPORT=rdma # kvferry peers on one host would take a same-host path
  else
    echo GLOG_logtostderr=1 "${MC_EXTRA[@]}"
  fi
}
name_of() { if [ "$1" = kv ]; then echo kvferry; else echo Mooncake; fi; }

run_pair() { # target-side initiator-side
  local tside=$1 iside=$2 label
  label="$(name_of "$iside") initiator -> $(name_of "$tside") target"
  echo "--- $label"
  rm -f "$T/ready"
  # shellcheck disable=SC2046
  env "${COMMON[@]}" $(env_of "$tside") timeout 300 "$T/rdma_mooncake" target "$(lib_of "$tside")" "$SIZE" "$T/ready" \
    > "$T/target.log" 2>&1 &
  local tpid=$!
  pids+=("$tpid")
  for _ in $(seq 1 300); do [ -s "$T/ready" ] && break; kill -0 "$tpid" 2>/dev/null || break; sleep 0.1; done
  if ! [ -s "$T/ready" ]; then
    echo "FAIL $label: the target did not start" >&2
    tail -30 "$T/target.log" >&2
    return 1
  fi
  read -r SEG ADDR _ < "$T/ready"
  local rc=0
  # shellcheck disable=SC2046
  env "${COMMON[@]}" $(env_of "$iside") timeout 240 "$T/rdma_mooncake" initiator "$(lib_of "$iside")" "$SEG" "$ADDR" "$SIZE" \
    > "$T/init.out" 2> "$T/init.log" || rc=$?
  cat "$T/init.out"
  local trc=0
  wait "$tpid" || trc=$?
  if [ -n "${LOGS:-}" ]; then
    mkdir -p "$LOGS"
    cp "$T/init.log" "$LOGS/$tside-$iside.initiator.log"
    cp "$T/target.log" "$LOGS/$tside-$iside.target.log"
  fi
  if [ "$rc" != 0 ] || [ "$trc" != 0 ]; then
    echo "FAIL $label: initiator exit $rc, target exit $trc" >&2
    echo "initiator log:" >&2; tail -40 "$T/init.log" >&2
    echo "target log:" >&2; tail -40 "$T/target.log" >&2
    return 1
  fi
}

failed=0
for p in $PAIRS; do
  run_pair "${p%%:*}" "${p##*:}" || failed=$((failed + 1))
done
if [ "$failed" != 0 ]; then
  echo "rdma-mooncake: $failed pairing(s) failed" >&2
  exit 1
fi
echo "rdma-mooncake: all pairings passed ($PAIRS; Mooncake: $MOONCAKE_TE_LIB)"
