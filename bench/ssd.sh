#!/usr/bin/env bash
# The disk tier (store/ssd) against a sequential baseline of the same
# directory in the same run: write and read-back throughput of 4 MiB
# objects (offload writer pool, checksums verified) over one file written
# and read in 4 MiB O_DIRECT blocks. fio, when installed, runs the same
# sequential job as a second baseline. Then a prefix scan (issue 32): a
# client with 64 MiB of memory (KVFERRY_SSD_SCAN_MIB) and its disk tier in
# the directory takes 4x that in 4 MiB objects and reads them once in put
# order, against a sequential read of the same volume in the same directory.
# Last, a second client's reads of 1 MiB objects only on the holder's disk:
# through the holder's serve buffer, and through promotions, with the parts
# (master lookup, file read, read from the holder's memory) timed alone.
#   bench/ssd.sh [DIR ...]    (default: /var/tmp, and /dev/shm)
#   KVFERRY_SSD_BENCH_MIB=1024 sets the volume.
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(/var/tmp /dev/shm)
echo "load: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
for d in "${dirs[@]}"; do
  [ -d "$d" ] || continue
  KVFERRY_SSD_BENCH_DIR="$d" go test -count=1 -run '^TestBenchSequential$' ./store/ssd -v 2>&1 \
    | grep -v '^=== RUN\|^--- \|^PASS\|^ok'
  KVFERRY_SSD_BENCH_DIR="$d" go test -count=1 -run '^TestBenchPrefixScan$|^TestBenchCrossClientRead$' ./store/client -v 2>&1 \
    | grep -v '^=== RUN\|^--- \|^PASS\|^ok'
  if command -v fio >/dev/null; then
    mib=${KVFERRY_SSD_BENCH_MIB:-1024}
    for rw in write read; do
      fio --name=seq --directory="$d" --rw="$rw" --bs=4m --size="${mib}m" --direct=1 \
        --ioengine=psync --numjobs=1 --unlink=1 --minimal 2>/dev/null \
        | awk -F';' -v rw="$rw" '{ bw = (rw == "write") ? $48 : $7; printf "  fio sequential %s %8.0f MiB/s\n", rw, bw / 1024 }'
    done
  fi
done
