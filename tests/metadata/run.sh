#!/usr/bin/env bash
# Multi-process metadata tests (issue 7): transfer engines as separate
# processes (tests/metadata/peer) that find each other through the
# kvferry-metadata binary and through a real etcd (Debian etcd-server,
# /usr/bin/etcd, started on free 127.0.0.1 ports; its tests skip only when
# the binary is absent) and a real redis-server (issue 40; /usr/bin/redis-server,
# likewise). Covers register/open/transfer/notify, cluster ids,
# name conflicts, metadata restart during operation, engine kill (entries
# vanish within the TTL, transfers end FAILED) and the idle gap.
# KVFERRY_TEST_VERBOSE=1 shows every test's log.
set -euo pipefail
cd "$(dirname "$0")/../.."
exec go test -tags multiprocess -count=1 -timeout 10m ${KVFERRY_TEST_VERBOSE:+-v} ./tests/metadata/
