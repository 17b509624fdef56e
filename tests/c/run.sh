#!/usr/bin/env bash
# C harness: builds the test programs against include/ only, and runs them
# against the built library, loaded with dlopen like NIXL and TensorRT-LLM
# load libtransfer_engine.so. `tests/c/run.sh gpu` runs the GPU part alone,
# on the fake CUDA and the fake HIP (make hw-check: with KVFERRY_HW=1 on the
# machine's CUDA driver, and its HIP runtime where ROCm is installed).
set -euo pipefail
cd "$(dirname "$0")/../.."
PART="${1:-all}"
LIB="${KVFERRY_LIB_DIR:-$PWD/build/lib}/libtransfer_engine.so"
OUT="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$OUT"' EXIT
CFLAGS="-O2 -g -Wall -Wextra -Werror -std=gnu11 -Iinclude -Itests/c ${KVFERRY_SAN_CFLAGS:-}"
wait_ready() { # file timeout
  for _ in $(seq 1 $(( $2 * 10 ))); do [ -s "$1" ] && return 0; sleep 0.1; done
  echo "target did not start" >&2; return 1
}

if [ "$PART" != gpu ]; then
gcc $CFLAGS -o "$OUT/te_test" tests/c/te_test.c -ldl
gcc $CFLAGS -o "$OUT/abi_layout" tests/c/abi_layout.c
"$OUT/abi_layout"

functional() { # label, env...
  local label=$1; shift
  echo "--- functional and bad-input tests ($label)"
  rm -f "$OUT/t1"
  env "$@" "$OUT/te_test" target "$LIB" $((64 << 20)) "$OUT/t1" &
  local target=$!
  wait_ready "$OUT/t1" 20
  read -r SEG ADDR PID < "$OUT/t1"
  env "$@" timeout 120 "$OUT/te_test" initiator "$LIB" "$SEG" "$ADDR"
  wait "$target"
}
functional "auto: same-host transport" KVFERRY_TEST=1
functional "tcp" MC_FORCE_TCP=1
# The libfabric transport on the real library's software provider.
EFA_ENV=(KVFERRY_TEST_PROTOCOL=efa KVFERRY_TRANSPORT=efa "KVFERRY_LIBFABRIC_PROVIDER=tcp;ofi_rxm")
if ldconfig -p | grep -q 'libfabric\.so\.1 '; then
  functional "efa over libfabric tcp;ofi_rxm" "${EFA_ENV[@]}"
else
  echo "--- efa rows skipped: libfabric is not installed (apt-get install libfabric1)"
fi

# The same tests with the engines finding each other through a real
# redis-server (requirepass, the password in the URL; issue 40).
REDIS_SERVER="$(command -v redis-server || true)"
if [ -n "$REDIS_SERVER" ]; then
  RPORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$REDIS_SERVER" --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --requirepass c-suite-pw --dir "$OUT" --loglevel warning > "$OUT/redis.log" 2>&1 &
  REDIS_PID=$!
  for _ in $(seq 1 200); do
    (exec 3<>"/dev/tcp/127.0.0.1/$RPORT") 2>/dev/null && break
    sleep 0.1
  done
  functional "tcp, redis metadata" MC_FORCE_TCP=1 MC_TCP_BIND_ADDRESS=127.0.0.1 \
    KVFERRY_TEST_METADATA="redis://:c-suite-pw@127.0.0.1:$RPORT"
  kill "$REDIS_PID"
  wait "$REDIS_PID" 2>/dev/null || true
else
  echo "--- functional tests with redis metadata: skipped (redis-server absent; scripts/test-deps.sh installs it)"
fi

echo "--- fork guard"
timeout 60 "$OUT/te_test" fork "$LIB"

echo "--- graceful shutdown on SIGTERM"
set +e
timeout 60 "$OUT/te_test" graceful "$LIB"
rc=$?
set -e
[ "$rc" -eq 143 ] || { echo "graceful shutdown: exit $rc, want 143 (SIGTERM)"; exit 1; }

fault() { # label, env...
  local label=$1; shift
  echo "--- peer killed mid-transfer ($label)"
  rm -f "$OUT/t2" "$OUT/t3"
  env "$@" "$OUT/te_test" target "$LIB" $((1 << 30)) "$OUT/t2" &
  env "$@" "$OUT/te_test" target "$LIB" $((64 << 20)) "$OUT/t3" &
  wait_ready "$OUT/t2" 30
  wait_ready "$OUT/t3" 30
  read -r SEG2 ADDR2 PID2 < "$OUT/t2"
  read -r SEG3 ADDR3 PID3 < "$OUT/t3"
  env "$@" timeout 120 "$OUT/te_test" fault "$LIB" "$SEG2" "$ADDR2" "$PID2" "$SEG3" "$ADDR3"
  wait || true
}
fault "auto: same-host transport" KVFERRY_TEST=1
fault "tcp" MC_FORCE_TCP=1
if ldconfig -p | grep -q 'libfabric\.so\.1 '; then
  fault "efa over libfabric tcp;ofi_rxm" "${EFA_ENV[@]}"
fi
fi

# The GPU rows run on each GPU runtime, by table: the fake CUDA driver and
# the fake HIP runtime (the same fake under HIP names; the harness's
# cuda_app.h drives either), the library on it through KVFERRY_CUDA_LIB or
# KVFERRY_HIP_LIB + KVFERRY_GPU_RUNTIME=hip. A hardware run (KVFERRY_HW=1)
# takes the machine's CUDA driver, and its HIP runtime only where ROCm is
# installed.
FAKECUDA="$(tests/fakecuda/build.sh "$OUT/fakecuda")"
FAKEHIP="$(tests/fakecuda/build.sh "$OUT/fakecuda" hip)"
RUNTIMES=(cuda hip)
if [ "${KVFERRY_HW:-}" = 1 ] && [ -z "${KVFERRY_HIP_LIB:-}" ] && ! ldconfig -p | grep -q 'libamdhip64\.so '; then
  RUNTIMES=(cuda)
  echo "--- HIP rows skipped: no ROCm runtime here (libamdhip64.so)"
fi
rt_lib() { if [ "$1" = hip ]; then echo "$FAKEHIP"; else echo "$FAKECUDA"; fi; }
rt_env() { # runtime lib: the library's variables for it
  if [ "$1" = hip ]; then echo "KVFERRY_HIP_LIB=$2 KVFERRY_GPU_RUNTIME=hip"; else echo "KVFERRY_CUDA_LIB=$2"; fi
}
rt_name() {
  local hw=""
  [ "${KVFERRY_HW:-}" = 1 ] && hw=1
  case "$1:$hw" in
    cuda:) echo "the fake CUDA driver" ;; cuda:1) echo "the machine's CUDA driver" ;;
    hip:) echo "the fake HIP runtime" ;; hip:1) echo "the machine's HIP runtime" ;;
  esac
}
gpu() { # runtime, label, env...
  local rt=$1 label=$2; shift 2
  local rlib; rlib="$(rt_lib "$rt")"
  # shellcheck disable=SC2046
  set -- $(rt_env "$rt" "$rlib") "$@"
  echo "--- GPU memory between two processes on $(rt_name "$rt") ($label)"
  rm -f "$OUT/g1"
  env "$@" "$OUT/te_gpu_test" target "$LIB" "$rlib" "$OUT/g1" &
  wait_ready "$OUT/g1" 30
  read -r GSEG GLEG GVMM GPID < "$OUT/g1"
  env "$@" timeout 120 "$OUT/te_gpu_test" initiator "$LIB" "$rlib" "$GSEG" "$GLEG" "$GVMM"
  wait
}
# The fake honours CUDA_VISIBLE_DEVICES as the driver does; the suites want
# all its devices (a hardware run keeps the machine's setting).
[ "${KVFERRY_HW:-}" = 1 ] || unset CUDA_VISIBLE_DEVICES
gcc $CFLAGS -o "$OUT/te_gpu_test" tests/c/te_gpu_test.c -ldl
for rt in "${RUNTIMES[@]}"; do
  rlib="$(rt_lib "$rt")"
  gpu "$rt" "auto: GPU IPC"
  gpu "$rt" "tcp, staged" MC_FORCE_TCP=1
  echo "--- a fork child never calls the GPU runtime ($(rt_name "$rt"))"
  # shellcheck disable=SC2046
  env $(rt_env "$rt" "$rlib") timeout 60 "$OUT/te_gpu_test" fork "$LIB" "$rlib"
  echo "--- a host without a GPU runtime ($rt)"
  if [ "$rt" = hip ]; then
    KVFERRY_HIP_LIB=/nonexistent/libamdhip64.so KVFERRY_GPU_RUNTIME=hip timeout 60 "$OUT/te_gpu_test" nodriver "$LIB"
  else
    KVFERRY_CUDA_LIB=/nonexistent/libcuda.so.1 timeout 60 "$OUT/te_gpu_test" nodriver "$LIB"
  fi
done

if [ "$PART" = gpu ]; then
  echo "C harness (GPU part) passed"
  exit 0
fi
if [ -f tests/c/store_test.c ] && [ -x tests/c/store_run.sh ]; then
  tests/c/store_run.sh "$OUT"
fi
echo "C harness passed"
