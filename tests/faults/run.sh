#!/usr/bin/env bash
# Network fault suite (issue 15), short form (make test); `make faults`
# runs the whole matrix (KVFERRY_FAULTS_FULL=1). As root it makes its own
# network namespaces A - R - B joined by veth pairs and injects faults in
# R: latency, jitter, loss, reordering, duplication and a rate limit
# (tc netem, or where the kernel lacks sch_netem the user-space emulator
# of tests/faults/netem on NFQUEUE plus nftables dup and tbf), links down
# mid-batch, RSTs on idle connections (nftables), a target frozen with
# SIGSTOP beyond the deadline, every initiator NIC down (the batch fails
# over to TCP); over TCP, same-host (cma), RDMA (fake verbs
# provider) and GPU memory over TCP (fake CUDA driver). Not root: skipped.
# KVFERRY_FAULTS_RESULTS=FILE appends one JSON line per case;
# KVFERRY_TEST_VERBOSE=1 shows every case's log.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go test -tags faults -count=1 -timeout 20m -parallel ${KVFERRY_FAULTS_PARALLEL:-8} ${KVFERRY_TEST_VERBOSE:+-v} ./tests/faults/ "$@"
