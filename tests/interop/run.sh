#!/usr/bin/env bash
# Interop suites against a Mooncake build made beside the project; each
# script skips with a message unless its Mooncake paths are given
# (rdma-mooncake.sh: MOONCAKE_TE_LIB; store-mooncake.sh: MOONCAKE_MASTER
# and MOONCAKE_STORE_LIB; store-mooncake-faults.sh: the same).
set -u
cd "$(dirname "$0")"
rc=0
for s in rdma-mooncake.sh store-mooncake.sh store-mooncake-faults.sh; do
  echo "== $s"
  ./"$s" || rc=1
done
exit "$rc"
