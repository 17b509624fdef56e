#!/usr/bin/env bash
# The Python suite: stdlib unittest over the built library, with Debian's
# python3, python3-numpy, python3-numba (test_numba.py fails without it) and
# (optionally) python3-torch. Installs nothing.
#   KVFERRY_LIB_DIR=$PWD/build-<area>/lib tests/python/run.sh [unittest args]
set -euo pipefail
cd "$(dirname "$0")/../.."
LIBDIR="${KVFERRY_LIB_DIR:-$PWD/build/lib}"
PY="${PYTHON:-/usr/bin/python3}"
if [ ! -e "$LIBDIR/libkvferry.so.1" ]; then
  echo "tests/python: $LIBDIR/libkvferry.so.1 is missing (make lib)" >&2
  exit 1
fi
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  echo "tests/python: numpy is missing (apt-get install python3-numpy)" >&2
  exit 1
fi
if ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "tests/python: torch is not installed; its tests are skipped" >&2
fi
export KVFERRY_LIB_DIR="$(cd "$LIBDIR" && pwd)"
# The fake CUDA driver (a test fixture) for test_gpu.py.
FAKE="$(mktemp -d)"
trap 'rm -rf "$FAKE"' EXIT
export KVFERRY_TEST_FAKECUDA="$(tests/fakecuda/build.sh "$FAKE")"
# The fake HIP runtime (the same fake under HIP names) for test_hip.py.
export KVFERRY_TEST_FAKEHIP="$(tests/fakecuda/build.sh "$FAKE" hip)"
unset CUDA_VISIBLE_DEVICES # the fake honours it as the driver does; the suites want all its devices
export PYTHONDONTWRITEBYTECODE=1
cd tests/python
if [ "$#" -gt 0 ]; then
  timeout 600 "$PY" -m unittest -v "$@"
  exit
fi
timeout 600 "$PY" -m unittest discover -s . -p 'test_*.py' -v
