#!/usr/bin/env bash
# Soak (issue 15), short form (make test): four peers mixing transfer-engine
# and store traffic with churn for KVFERRY_SOAK_DURATION (here 50 s,
# sampling every 2.5 s, one restart of each of peers 1-3 during the 25 s
# warm-up, growth judged over the 25 s after it); `make soak` runs
# the full hour (samples every 10 s, a restart every 3 min). Fails on growth
# of RSS, fds, threads or goroutines beyond 2 % after the warm-up; samples
# in build/soak.tsv, plot in build/soak.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
export KVFERRY_SOAK_DURATION=${KVFERRY_SOAK_DURATION:-50s}
export KVFERRY_SOAK_SAMPLE=${KVFERRY_SOAK_SAMPLE:-2500ms}
export KVFERRY_SOAK_RESTART=${KVFERRY_SOAK_RESTART:-6s}
export KVFERRY_SOAK_RESTART_UNTIL=${KVFERRY_SOAK_RESTART_UNTIL:-20s}
export KVFERRY_SOAK_WARMUP=${KVFERRY_SOAK_WARMUP:-25s}
exec go test -tags soak -count=1 -timeout 3h -v -run TestSoak ./tests/soak/ "$@"
