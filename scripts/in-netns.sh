#!/usr/bin/env bash
# Runs a command in a fresh network namespace that has only a loopback
# interface, so tests can reach no address but 127.0.0.1. Needs root and
# unshare/ip; otherwise the command runs as is (tests use 127.0.0.1 anyway).
set -euo pipefail
if [ "${KVFERRY_NO_NETNS:-}" = "" ] && [ "$(id -u)" -eq 0 ] && command -v unshare >/dev/null && command -v ip >/dev/null \
   && unshare -n true 2>/dev/null; then
  exec unshare -n -- bash -c 'ip link set lo up && exec "$@"' bash "$@"
fi
exec "$@"
