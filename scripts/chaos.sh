#!/usr/bin/env bash
# chaos.sh — what `make chaos` runs: the crash and outage tests (internal/e2e, build tag chaos)
# on SQLite and then Postgres. They SIGKILL the api and the worker, kill, hang and restart Redis
# while events are tracked, halt Postgres, drill a backup and restore, and print what was
# acknowledged, lost and duplicated. The worker test waits about a minute for asynq's lease.
# Then the long runs of the property tests that `make test` runs short (EVENTQ_TEST_LONG: 200
# random lease sequences instead of 12, every compressed page size instead of a sample, 20,000
# random tracking bodies through both parsers instead of 5,000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/ensure-deps.sh go redis-server postgres

log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
for db in sqlite postgres; do
	printf '\n==> chaos on %s\n' "$db"
	rc=0
	EVENTQ_TEST_DB=$db go test -tags chaos -count=1 -timeout 20m -run '^TestChaos' -v ./internal/e2e >"$log" 2>&1 || rc=$?
	# The figures and the verdicts; the whole log when something failed.
	if ((rc == 0)); then
		grep -E '^(--- |\s+[a-z_]+_test.go|ok)' "$log" || true
	else
		cat "$log"
		status=1
	fi
done
printf '\n==> the long property runs\n'
if ! EVENTQ_TEST_DB=none EVENTQ_TEST_LONG=1 go test -count=1 -timeout 20m \
	-run '^(TestLeaseScriptsMatchPerEventScripts|TestCompressedBodyEveryPageSize|TestParseFastMatchesGeneral)$' \
	./internal/eventqueue ./internal/httpx ./internal/tracking; then
	status=1
fi
exit $status
