#!/usr/bin/env bash
# Registration cost (issue 17 item 4): 100,000 single registrations, then
# 100,000 single deregistrations, through a NIXL agent with the default
# transports, as NIXL registers a descriptor list one descriptor at a time.
# Prints the mean cost of a call after 1,000 calls and after 100,000; flat
# (ratio about 1) means O(1) amortized.
# KVFERRY_BENCH_REGS changes the count.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go test -run '^$' -bench RegisterSingle -benchtime 1x ./agent/nixl
