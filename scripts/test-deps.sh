#!/usr/bin/env bash
# The Debian packages the test suites need, in one place for `make test` and
# .ci/run. Building needs only Go and a C compiler; these are for the tests:
# cmake (the CMake consumer test), etcd (cluster metadata and HA), iperf3 and
# redis (baselines some suites print), numpy and torch (the Python suites),
# libibverbs-dev (the verbs layout check), ibverbs-utils and perftest
# (rdma-core's and perftest's programs, run on the fake verbs provider by
# tests/rdma/thirdparty), numba (its CUDA driver binding runs on the fake
# libcuda, test_numba.py), protobuf-compiler, nftables and iptables (the
# network fault suite), prometheus (the deploy suite).
#
#   scripts/test-deps.sh check     list what is missing; exit 1 if anything is
#   scripts/test-deps.sh ensure    install what is missing when this user can
#                                  (root, or sudo without a password); else
#                                  stop at once with the exact command to run
#
# Another package manager (unattended-upgrades, cloud-init) may hold the dpkg
# or apt locks on a fresh machine: the install waits for them, up to
# KVFERRY_CI_LOCK_TIMEOUT seconds (900), and says so.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

PKGS="build-essential pkg-config cmake etcd-server etcd-client iperf3 redis-server redis-tools
      python3 python3-numpy python3-numba python3-torch python3-setuptools python3-pip python3-venv iproute2 libibverbs-dev
      ibverbs-utils perftest protobuf-compiler python3-pyflakes prometheus nftables iptables
      libfabric1 libfabric-bin libfabric-dev"

missing=""
for p in $PKGS; do
  dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
missing="${missing# }"

case "${1:-ensure}" in
check)
  [ -z "$missing" ] && exit 0
  echo "missing packages: $missing"
  exit 1
  ;;
ensure) ;;
*)
  echo "usage: $0 check|ensure" >&2
  exit 2
  ;;
esac
[ -z "$missing" ] && exit 0
command -v dpkg >/dev/null || { echo "test-deps: not a Debian system; install the equivalents of: $missing" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
    SUDO="sudo"
  else
    echo "test-deps: the test suites need Debian packages that are not installed. Run this, then make test again:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends $missing" >&2
    exit 1
  fi
fi

LOCK_TIMEOUT="${KVFERRY_CI_LOCK_TIMEOUT:-900}"
LOCKS="${KVFERRY_CI_LOCKS:-/var/lib/dpkg/lock-frontend /var/lib/dpkg/lock /var/lib/apt/lists/lock /var/cache/apt/archives/lock}"
lock_holder() { # prints "file pid" for the first held lock (POSIX locks from /proc/locks)
  local f ino line
  for f in $LOCKS; do
    [ -e "$f" ] || continue
    ino=$(stat -c %i "$f")
    line=$(awk -v ino="$ino" '{ n = split($6, a, ":"); if (a[n] == ino) { print $5; exit } }' /proc/locks 2>/dev/null)
    [ -n "$line" ] && { echo "$f $line"; return 0; }
  done
  return 1
}
wait_for_apt_locks() {
  local start now held
  start=$(date +%s)
  while held=$(lock_holder); do
    now=$(date +%s)
    if [ $((now - start)) -ge "$LOCK_TIMEOUT" ]; then
      echo "test-deps: $held still held after ${LOCK_TIMEOUT}s (KVFERRY_CI_LOCK_TIMEOUT); giving up" >&2
      exit 1
    fi
    set -- $held
    echo "test-deps: waiting for $1, held by pid $2 ($(tr '\0' ' ' <"/proc/$2/cmdline" 2>/dev/null | cut -c1-80)); $((now - start))s of ${LOCK_TIMEOUT}s"
    sleep 5
  done
  now=$(date +%s)
  [ "$now" -eq "$start" ] || echo "test-deps: package locks free after $((now - start))s"
}
# apt's own lock wait covers the window between our check and its start.
APT_WAIT="-o DPkg::Lock::Timeout=$LOCK_TIMEOUT"
echo "test-deps: installing$([ -n "$SUDO" ] && echo " with sudo"): $missing"
wait_for_apt_locks
$SUDO apt-get $APT_WAIT update -qq
wait_for_apt_locks
# shellcheck disable=SC2086 # a list of package names
$SUDO apt-get $APT_WAIT install -y -qq --no-install-recommends $missing
