#!/usr/bin/env bash
# Kill matrix (issue 15), short form (make test): SIGKILL of the initiator,
# the target, the store master, a replica holder, the HTTP metadata server
# and an etcd member at a random point of a running batch or put stream,
# for each entry point (C API, NIXL plugin, TensorRT-LLM agent, Python),
# through the drivers in tests/kill/drivers. Checks: no hang, acknowledged
# puts readable while a replica lives, survivors without leaked fds,
# goroutines or pins, recovery without restarting them. KVFERRY_KILL_FULL=1
# (make kill-matrix) runs every pair; KVFERRY_KILL_RESULTS=FILE appends one
# JSON line per case.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go test -tags killmatrix -count=1 -timeout 30m -parallel "${KVFERRY_KILL_PARALLEL:-4}" ${KVFERRY_TEST_VERBOSE:+-v} ./tests/kill/ "$@"
