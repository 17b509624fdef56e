#!/usr/bin/env bash
# Runs every test suite under tests/*/run.sh (C, C++, Python, multi-process).
# Each suite uses the library built by `make` in build/lib, and runs in a
# fresh network namespace with only loopback when run as root.
set -u
cd "$(dirname "$0")/.."
failed=()
for s in tests/*/run.sh; do
  [ -x "$s" ] || continue
  echo "=== $s"
  start=$(date +%s)
  if scripts/in-netns.sh "$s"; then
    echo "--- PASS $s ($(( $(date +%s) - start ))s)"
  else
    echo "--- FAIL $s ($(( $(date +%s) - start ))s)"
    failed+=("$s")
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "FAILED suites: ${failed[*]}"
  exit 1
fi
echo "all suites passed"
