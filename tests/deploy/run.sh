#!/usr/bin/env bash
# deploy/ against a real Prometheus (Debian's prometheus package, with
# promtool): the scrape configuration and alert rules pass promtool, and
# every Grafana dashboard and alert expression returns series from a running
# setup on loopback (build/bin, built by `make`).
set -euo pipefail
cd "$(dirname "$0")/../.."
export KVFERRY_BIN_DIR="${KVFERRY_BIN_DIR:-$PWD/build/bin}"
[ -x "$KVFERRY_BIN_DIR/kvferry-bench" ] || { echo "build/bin/kvferry-bench missing: run make" >&2; exit 1; }
go test -tags deployproc -count=1 -timeout 180s -v ./tests/deploy/ 2>&1 | grep -Ev '^=== (RUN|PAUSE|CONT)'
