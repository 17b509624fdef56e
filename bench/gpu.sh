#!/usr/bin/env bash
# GPU paths on a real GPU (issue 12), each as a ratio to a baseline measured
# in the same run, in one script that finishes in under 8 minutes:
#
#   engine D2D in one process          vs cuMemcpyAsync on one stream   (target >= 0.9 at >= 1 MiB)
#   D2D to another process (CUDA IPC)  vs the same copy in-process      (target >= 0.9 at >= 1 MiB)
#   device memory over TCP loopback    vs host memory over TCP loopback (target >= 0.8)
#   H2D / D2H through the engine       vs cuMemcpy (pinned host memory)
#   128 x 64 KiB D2D in one batch      engine overhead per request      (target <= 2 us)
#
#   bench/gpu.sh                        # libcuda.so.1, device 0
#   SIZES=1048576,67108864 SECONDS_PER=1 DEVICE=1 bench/gpu.sh
#   KVFERRY_CUDA_LIB=/path/to/libcuda.so.1 bench/gpu.sh
#   bench/gpu.sh --runtime=hip          # the same rows on HIP (ROCm)
#
# --runtime=hip runs the same rows on the HIP runtime, with hipMemcpyAsync,
# hipMemcpy and HIP IPC as the baselines and paths: on a real ROCm box when
# libamdhip64.so is there (KVFERRY_HIP_LIB, or on the loader path), else on
# the fake HIP runtime of the tests (tests/fakecuda/fake_hip.c, built here),
# which checks that the script works and whose figures mean nothing. The
# first line of the output says which runtime and file ran.
#
# It needs only the driver (no CUDA toolkit) and Go to build
# bench/gpubench, or a gpubench built elsewhere (GPUBENCH=path; make
# hw-check-build leaves one in build/hw/bin); it prints a markdown table on
# stdout and the raw rows (JSON lines) in $OUT_JSON when set. Pointed at the fake driver of the
# tests (KVFERRY_CUDA_LIB=$(tests/fakecuda/build.sh /tmp/fc)) it checks
# that the script works; its figures then mean nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNTIME=cuda
for arg in "$@"; do
  case "$arg" in
    --runtime=cuda|--runtime=hip) RUNTIME="${arg#--runtime=}" ;;
    *) echo "usage: bench/gpu.sh [--runtime=cuda|hip]" >&2; exit 2 ;;
  esac
done
SIZES="${SIZES:-1048576,16777216,268435456}"
SECONDS_PER="${SECONDS_PER:-2}"
DEVICE="${DEVICE:-0}"
T="$(mktemp -d)"
trap 'rm -rf "$T"' EXIT
BIN="${GPUBENCH:-}"
if [ -z "$BIN" ]; then
  if command -v go >/dev/null; then
    go build -o "$T/gpubench" ./bench/gpubench
    BIN="$T/gpubench"
  elif [ -x build/hw/bin/gpubench ]; then
    BIN=build/hw/bin/gpubench
  else
    echo "bench/gpu.sh: no Go to build bench/gpubench and no build/hw/bin/gpubench (make hw-check-build)" >&2
    exit 1
  fi
fi
if [ "$RUNTIME" = hip ]; then
  export KVFERRY_GPU_RUNTIME=hip
  if [ -n "${KVFERRY_HIP_LIB:-}" ]; then
    echo "runtime: HIP, $KVFERRY_HIP_LIB"
  elif ldconfig -p | grep -q 'libamdhip64\.so '; then
    echo "runtime: HIP, the machine's libamdhip64.so (ROCm)"
  else
    KVFERRY_HIP_LIB="$(tests/fakecuda/build.sh "$T/fakehip" hip)"
    export KVFERRY_HIP_LIB
    echo "runtime: HIP, the fake HIP runtime of the tests ($KVFERRY_HIP_LIB): a check of the script, figures mean nothing"
  fi
else
  echo "runtime: CUDA, ${KVFERRY_CUDA_LIB:-libcuda.so.1}"
fi
timeout 480 "$BIN" -sizes "$SIZES" -seconds "$SECONDS_PER" -device "$DEVICE" > "$T/rows.json"
[ -n "${OUT_JSON:-}" ] && cp "$T/rows.json" "$OUT_JSON"
python3 - "$T/rows.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def size(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return "%d %s" % (n // k, unit)
    return str(n)
print("| test | bytes | GB/s | baseline GB/s | ratio | target | note |")
print("|---|---|---|---|---|---|---|")
for r in rows:
    if "overhead_us" in r:
        target = "<= %.0f us/request: %.2f us" % (r["target"], r["overhead_us"])
    else:
        target = ">= %.1f%s" % (r["target"], "" if r.get("ratio", 0) >= r["target"] else " (missed)")
    print("| %s | %s | %.2f | %.2f | %.2f | %s | %s |" % (r["test"], size(r["bytes"]), r.get("gbps", 0),
          r.get("baseline_gbps", 0), r.get("ratio", 0), target, r.get("note", "")))
PY
