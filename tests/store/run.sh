#!/usr/bin/env bash
# Multi-process store tests: a real kvferry-master (build/bin, built by
# `make`) and store clients in separate processes on 127.0.0.1, plus a real
# etcd (Debian etcd-server) for the failover test.
set -euo pipefail
cd "$(dirname "$0")/../.."
export KVFERRY_BIN_DIR="${KVFERRY_BIN_DIR:-$PWD/build/bin}"
[ -x "$KVFERRY_BIN_DIR/kvferry-master" ] || { echo "build/bin/kvferry-master missing: run make" >&2; exit 1; }
go test -tags storeproc -count=1 -timeout 240s -v ./tests/store/ 2>&1 | grep -Ev '^=== (RUN|PAUSE|CONT)'
