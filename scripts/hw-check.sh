#!/usr/bin/env bash
# make hw-check: every suite that otherwise runs on the fake CUDA driver or
# the fake verbs provider, run once on this machine's real libcuda.so.1 and
# libibverbs.so.1 and NICs (KVFERRY_HW=1), then bench/gpu.sh and
# bench/rdma.sh; one report, build/hw-report.md. Parts whose hardware is
# missing are skipped with the reason, and the command exits 0 unless a part
# that ran failed. Sized for one H100/H200 with 16 cores: at most HW_BUDGET
# seconds (600) in all; parts that would start past it are skipped.
#
#   scripts/hw-check.sh build      build/hw/: the Go test binaries, gpubench,
#                                  kvferry-ctl and kvferry-bench, stripped
#                                  (needs Go; make hw-check-build, after make)
#   scripts/hw-check.sh bundle     build, then build/hw-bundle.tar.xz: build/hw,
#                                  build/lib and build/include for a machine
#                                  without Go (run unpacks it there)
#   scripts/hw-check.sh run        run from build/hw/ and build/ (needs no Go:
#                                  a machine without Go runs what was built)
#   scripts/hw-check.sh            build when Go is there, then run
#   scripts/hw-check.sh rehearse   run on the fakes posing as the hardware
#                                  (checks this script and the tests' hardware
#                                  paths here; its figures mean nothing)
#
# Environment: KVFERRY_CUDA_LIB / KVFERRY_IBVERBS_LIB name the drivers (default
# the system's; a fake is refused outside rehearse), HW_BUDGET (600),
# HW_BENCH=0 skips the benchmarks, HW_RDMA_NICS (NICs for bench/rdma.sh,
# default the first two usable), GID_INDEX (for bench/rdma.sh), HW_REPORT
# (default build/hw-report.md). Needs bash, python3 (tables), gcc and g++
# (the C and C++ suites), and for the Python suite numpy (torch with CUDA
# adds the torch tests).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
MODE="${1:-all}"
HW="$ROOT/build/hw"
LOGS="$HW/logs"
RESULTS="$HW/results.jsonl"
REPORT="${HW_REPORT:-$ROOT/build/hw-report.md}"
BUDGET="${HW_BUDGET:-600}"
PY="$(command -v python3 || true)"
# The Python suite's interpreter: the first python3 with numpy (on a GPU
# machine, the one with torch comes first on PATH).
PYSUITE=""
for p in $(which -a python3 2>/dev/null) /usr/bin/python3; do
  if "$p" -c 'import numpy' 2>/dev/null; then PYSUITE="$p"; break; fi
done

# Go test binaries: name, package directory, -test.run pattern ("" all), what.
GO_GPU=(
  "cuda internal/cuda . CUDA binding: classification, copier, stager, IPC, chunked VMM"
  "gpu engine/gpu . memory classification, chunked VMM and legacy chunks"
  "local engine/transport/local GPU in-process device copies"
  "tcp engine/transport/tcp GPU device memory over TCP (staged)"
  "samehost engine/transport/samehost GPU CUDA IPC between processes, chunked VMM, Mooncake nvlink peers"
  "client store/client GPU store puts and gets from device memory"
)
GO_RDMA=(
  "rdma engine/transport/rdma . RDMA transport between processes over the NICs, GPUDirect, rdmamap"
  "ibv engine/transport/rdma/ibv . verbs binding"
)

die() { echo "hw-check: $*" >&2; exit 2; }

build() {
  command -v go >/dev/null || die "build needs Go (run it where the tree is built, then copy build/ to the GPU machine)"
  mkdir -p "$HW/bin"
  local spec name dir
  for spec in "${GO_GPU[@]}" "${GO_RDMA[@]}"; do
    read -r name dir _ <<<"$spec"
    echo "go test -c ./$dir -> build/hw/$name.test"
    go test -c -trimpath -ldflags='-s -w' -o "$HW/$name.test" "./$dir" || die "go test -c ./$dir failed"
  done
  local b
  for b in bench/gpubench cmd/kvferry-ctl cmd/kvferry-bench; do
    echo "go build ./$b -> build/hw/bin/${b##*/}"
    go build -trimpath -ldflags='-s -w' -o "$HW/bin/${b##*/}" "./$b" || die "go build ./$b failed"
  done
  git rev-parse --short HEAD >"$HW/commit" 2>/dev/null || echo unknown >"$HW/commit"
  date -u +%Y-%m-%dT%H:%MZ >"$HW/built"
  echo "built build/hw/ ($(du -sh "$HW" | cut -f1)); make hw-check (or scripts/hw-check.sh run) on the GPU machine"
}

# ---- running ----

START=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - START) )); }

# record SECTION STATUS SECONDS DETAIL [LOG]; DESC says what the part is.
DESC=""
record() {
  "$PY" - "$RESULTS" "$DESC" "$@" <<'PY'
import json, sys
path, desc, section, status, secs, detail = sys.argv[1:7]
log = sys.argv[7] if len(sys.argv) > 7 else ""
with open(path, "a") as f:
    f.write(json.dumps({"section": section, "what": desc, "status": status, "seconds": int(secs),
                        "detail": detail, "log": log}) + "\n")
PY
}

skip() { # section reason
  echo "--- SKIP $1: $2"
  record "$1" skip 0 "$2"
}

# part SECTION NEED TIMEOUT CMD...: runs CMD (logged) when NEED is met.
part() {
  local section=$1 need=$2 limit=$3
  shift 3
  case "$need" in
    gpu) [ "$GPU" = 1 ] || { skip "$section" "no GPU: $GPU_WHY"; return; } ;;
    rdma) [ "$RDMA" = 1 ] || { skip "$section" "no RDMA NIC: $RDMA_WHY"; return; } ;;
  esac
  local rem
  rem=$(left)
  if [ "$rem" -lt 20 ]; then
    skip "$section" "the ${BUDGET} s budget is spent"
    return
  fi
  [ "$limit" -gt "$rem" ] && limit=$rem
  local log="$LOGS/$section.log" t0 rc
  echo "=== $section (at most ${limit} s)"
  t0=$(date +%s)
  timeout --kill-after=10 "$limit" "$@" >"$log" 2>&1
  rc=$?
  local took=$(( $(date +%s) - t0 ))
  if [ "$rc" -eq 0 ]; then
    echo "--- PASS $section (${took} s)"
    record "$section" pass "$took" "" "$log"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    echo "--- FAIL $section: timed out after ${took} s"
    record "$section" fail "$took" "timed out after ${limit} s" "$log"
  else
    echo "--- FAIL $section (exit $rc, ${took} s): $log"
    record "$section" fail "$took" "exit $rc" "$log"
  fi
}

# gotest SECTION NEED NAME DIR RUN [ENV...]: one prebuilt Go test binary,
# run in its package directory (as go test runs it).
gotest() {
  local section=$1 need=$2 name=$3 dir=$4 run=$5
  shift 5
  local args=(-test.v -test.count=1 -test.timeout=300s)
  [ "$run" != . ] && args+=(-test.run "$run")
  part "$section" "$need" 240 env "$@" bash -c 'cd "$0" && exec "$@"' "$ROOT/$dir" "$HW/$name.test" "${args[@]}"
}

probe() {
  GPU=0 RDMA=0 GPU_WHY="" RDMA_WHY="" NICLIST="" GPUNAME=""
  local ctl="$HW/bin/kvferry-ctl"
  [ -x "$ctl" ] || ctl="$ROOT/build/bin/kvferry-ctl"
  if [ ! -x "$ctl" ]; then
    GPU_WHY="no build/hw/bin/kvferry-ctl or build/bin/kvferry-ctl to probe with (make hw-check-build)"
    RDMA_WHY="$GPU_WHY"
    return
  fi
  "$ctl" --json hw >"$HW/probe.json" 2>"$LOGS/probe.err" || true
  eval "$("$PY" - "$HW/probe.json" <<'PY'
import json, shlex, sys
try:
    r = json.load(open(sys.argv[1]))
except Exception as e:
    r = {"cuda": {"error": "probe failed: %s" % e}, "rdma": {"error": "probe failed: %s" % e}}
c, d = r.get("cuda", {}), r.get("rdma", {})
out = {"GPU": int(bool(c.get("available"))), "GPU_WHY": c.get("error") or "",
       "GPUNAME": ", ".join("%d %s (%s)" % (x["Ordinal"], x["Name"], x["PCIBusID"]) for x in c.get("devices") or []),
       "RDMA": int(bool(d.get("available"))), "RDMA_WHY": d.get("error") or "",
       "NICLIST": ",".join(d.get("verbs") or []), "SYSNICS": ",".join(d.get("sysfs") or [])}
for k, v in out.items():
    print("%s=%s" % (k, shlex.quote(str(v))))
PY
)"
}

run() {
  [ -n "$PY" ] || die "needs python3 (it writes the report)"
  if [ "$MODE" != rehearse ]; then
    for v in KVFERRY_CUDA_LIB KVFERRY_IBVERBS_LIB; do
      case "${!v:-}" in *fake*) die "$v=${!v} looks like a fake: unset it (or scripts/hw-check.sh rehearse)" ;; esac
    done
  fi
  if [ ! -d "$HW" ] && [ -f "$ROOT/build/hw-bundle.tar.xz" ]; then
    echo "hw-check: unpacking build/hw-bundle.tar.xz"
    tar -C "$ROOT" -xJf "$ROOT/build/hw-bundle.tar.xz" || die "cannot unpack build/hw-bundle.tar.xz"
  fi
  mkdir -p "$LOGS"
  rm -f "$RESULTS" "$LOGS"/*.log
  probe
  export KVFERRY_HW=1
  if [ "$MODE" = rehearse ]; then
    # The fakes pose as the hardware: verbs devices without sysfs entries.
    [ -n "$NICLIST" ] && [ "$RDMA" = 0 ] && RDMA=1 RDMA_WHY=""
  fi
  echo "hw-check: GPU ${GPU} ${GPUNAME:-($GPU_WHY)}; RDMA ${RDMA} ${NICLIST:-($RDMA_WHY)}; budget ${BUDGET} s"

  local spec name dir pat what
  for spec in "${GO_GPU[@]}"; do
    read -r name dir pat what <<<"$spec"
    DESC="go test ./$dir${pat:+ -run $pat}: $what"
    [ "$pat" = . ] && DESC="go test ./$dir: $what"
    if [ ! -x "$HW/$name.test" ]; then skip "go-$name" "no build/hw/$name.test (make hw-check-build where Go is)"; continue; fi
    gotest "go-$name" gpu "$name" "$dir" "$pat" KVFERRY_HW=1
  done
  for spec in "${GO_RDMA[@]}"; do
    read -r name dir pat what <<<"$spec"
    DESC="go test ./$dir: $what"
    if [ ! -x "$HW/$name.test" ]; then skip "go-$name" "no build/hw/$name.test (make hw-check-build where Go is)"; continue; fi
    gotest "go-$name" rdma "$name" "$dir" "$pat" KVFERRY_HW=1
  done

  local lib_ok=1
  [ -e "$ROOT/build/lib/libkvferry.so.1" ] || lib_ok=0
  if [ "$lib_ok" = 0 ]; then
    for s in c-gpu nixl-vram trtllm-kvram python-gpu python-rdma; do DESC=""; skip "$s" "no build/lib/libkvferry.so.1 (make lib)"; done
  else
    DESC="tests/c/run.sh gpu: te_gpu_test.c, GPU memory through the Mooncake C API between processes (CUDA IPC, TCP staged), fork, no driver"
    part c-gpu gpu 180 tests/c/run.sh gpu
    DESC="tests/nixl/run.sh vram: VRAM_SEG through the NIXL plugin (auto, tcp)"
    part nixl-vram gpu 120 tests/nixl/run.sh vram
    DESC="tests/trtllm/run.sh vram: kVRAM through createMooncakeTransferAgent (auto, tcp)"
    part trtllm-kvram gpu 120 tests/trtllm/run.sh vram
    DESC="tests/python test_gpu: CUDA memory through the Python API and the store; real torch CUDA tensors"
    part python-gpu gpu 180 env PYTHON="${PYSUITE:-$PY}" tests/python/run.sh test_gpu
    DESC="tests/python test_rdma: RDMA between two Python processes, showLinks"
    part python-rdma rdma 120 env PYTHON="${PYSUITE:-$PY}" KVFERRY_HW_NICS="$NICLIST" tests/python/run.sh test_rdma
  fi

  DESC="bench/gpu.sh: the GPU paths against baselines of the same run"
  if [ "${HW_BENCH:-1}" = 0 ]; then
    skip bench-gpu "HW_BENCH=0"
    DESC="bench/rdma.sh: kvferry over RDMA against perftest"
    skip bench-rdma "HW_BENCH=0"
  else
    local gb="$HW/bin/gpubench" sizes="${HW_BENCH_SIZES:-1048576,67108864}"
    command -v go >/dev/null && [ ! -x "$gb" ] && gb=""
    if [ "$MODE" = rehearse ]; then
      # The fake's device memory is an arena: room for the largest size.
      export FAKECUDA_ARENA_MB=640
      sizes=1048576,16777216
    fi
    part bench-gpu gpu 240 env GPUBENCH="$gb" SIZES="$sizes" SECONDS_PER="${HW_BENCH_SECONDS:-1}" bench/gpu.sh
    DESC="bench/rdma.sh: kvferry over RDMA against perftest"
    local nics="${HW_RDMA_NICS:-$(echo "$NICLIST" | tr ',' '\n' | head -n 2 | tr '\n' ' ')}"
    if [ "$MODE" = rehearse ]; then
      part bench-rdma rdma 240 env DURATION_FAKE=1 bench/rdma.sh --fake
    else
      local kb="$HW/bin/kvferry-bench"
      [ -x "$kb" ] || kb="$ROOT/build/bin/kvferry-bench"
      part bench-rdma rdma 300 env KVFERRY_BENCH="$kb" NICS="$nics" DURATION="${HW_RDMA_DURATION:-2}" bench/rdma.sh
    fi
  fi

  "$PY" scripts/hw-report.py "$RESULTS" "$REPORT" "$MODE" "$HW" "GPU: ${GPUNAME:-none ($GPU_WHY)}" "RDMA: ${NICLIST:-none ($RDMA_WHY)}" "$BUDGET" "$(( $(date +%s) - START ))"
  echo "hw-check: report in ${REPORT#$ROOT/}"
  grep -q '"status": "fail"' "$RESULTS" && return 1
  return 0
}

rehearse_env() {
  # The fakes, as tests/fakecuda and tests/rdma/fakeverbs build them, named
  # as if they were the system's drivers.
  command -v go >/dev/null || die "rehearse needs Go to build the fake verbs provider"
  local dir="$HW/fakes"
  mkdir -p "$dir"
  export KVFERRY_CUDA_LIB
  KVFERRY_CUDA_LIB="$(env -u KVFERRY_HW tests/fakecuda/build.sh "$dir/cuda")" || die "building the fake libcuda failed"
  local v
  v="$(go run ./tests/rdma/fakeverbs/cmd/buildfake)" || die "building the fake libibverbs failed"
  export KVFERRY_IBVERBS_LIB="$v" FAKEVERBS_DIR="$dir/verbs" FAKEVERBS_DEVICES="fake_mlx5_0,fake_mlx5_1" FAKEVERBS_PEERMEM="$KVFERRY_CUDA_LIB"
  mkdir -p "$FAKEVERBS_DIR"
}

bundle() {
  build || exit 2
  [ -e build/lib/libkvferry.so.1 ] || die "no build/lib/libkvferry.so.1 (make lib)"
  rm -rf "$HW/logs" "$HW/fakes" "$RESULTS"
  tar -C "$ROOT" -cf - build/hw build/lib build/include | xz -T0 -6 >"$ROOT/build/hw-bundle.tar.xz" || die "xz failed"
  echo "build/hw-bundle.tar.xz: $(du -h build/hw-bundle.tar.xz | cut -f1); on the GPU machine, with the tree: scripts/hw-check.sh run"
}

case "$MODE" in
  build) build ;;
  bundle) bundle ;;
  run) run ;;
  all)
    if command -v go >/dev/null; then build || exit 2; fi
    run
    ;;
  rehearse)
    rehearse_env
    build || exit 2
    run
    ;;
  *) die "usage: scripts/hw-check.sh [build|bundle|run|rehearse]" ;;
esac
