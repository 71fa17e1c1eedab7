#!/usr/bin/env bash
# test-loaded.sh — what `make test-loaded` runs: `make test` with CPU hogs beside it (HOGS,
# default 4, `yes > /dev/null` each), as a user's busy machine or a shared CI runner has. The
# suite must be green so; the tests that take a load of their own (the rebalance) get
# EVENTQ_TEST_CPU_HOGS too.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
hogs=${HOGS:-4}
pids=()
stop() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null || true; }
trap stop EXIT
for ((i = 0; i < hogs; i++)); do
	yes >/dev/null &
	pids+=($!)
done
echo "test-loaded: $hogs CPU hogs running beside make test"
EVENTQ_TEST_CPU_HOGS=${EVENTQ_TEST_CPU_HOGS:-2} bash scripts/test.sh
