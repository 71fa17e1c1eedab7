#!/usr/bin/env bash
# test.sh — what `make test` and CI run.
#
#   1. makes sure go, gcc (for -race), redis-server, redis-cli (the cluster test), the Postgres
#      server binaries, chromium (the browser test) and curl (the 413 test) are installed (apt-get when root;
#      otherwise it names the Debian packages);
#   2. gofmt -l must print nothing, go vet ./... must be clean;
#   3. the whole suite on SQLite with the race detector and on Postgres, side by side.
#
# The tests start their own redis-server and Postgres on free ports (internal/testenv); this
# script starts no server. Every step runs even after a failure; the exit code is non-zero if
# any step failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/ensure-deps.sh go gcc redis-server redis-cli postgres chromium curl

failed=()

# step NAME CMD...: run one step and remember whether it failed.
step() {
	local name=$1 start=$SECONDS
	shift
	printf '\n==> %s\n' "$name"
	if "$@"; then
		printf -- '--- ok: %s (%ds)\n' "$name" $((SECONDS - start))
	else
		printf -- '--- FAILED: %s (%ds)\n' "$name" $((SECONDS - start))
		failed+=("$name")
	fi
}

check_gofmt() {
	local out
	out=$(gofmt -l .)
	[[ -z $out ]] && return 0
	printf 'not gofmt-formatted (run make fmt):\n%s\n' "$out"
	return 1
}

# suite DB ARGS...: the whole suite on one database, each output line prefixed with the
# database's name (the two suites run side by side and their lines interleave).
suite() {
	local db=$1
	shift
	env EVENTQ_TEST_DB="$db" go test -count=1 -timeout 20m "$@" ./... 2>&1 | sed -u "s/^/[$db] /"
	return "${PIPESTATUS[0]}"
}

# both_suites: SQLite with the race detector and Postgres at the same time. Most of a suite's
# time is spent waiting on servers and subprocesses, not on the CPU, so running them side by
# side roughly halves the wall time on two cores.
both_suites() {
	local rc=0 bin
	# The tests that run the programs as processes share one build of them.
	bin=$(mktemp -d)
	go build -o "$bin/" ./cmd/... || { rm -rf "$bin"; return 1; }
	export EVENTQ_TEST_BIN=$bin
	CGO_ENABLED=1 suite sqlite -race &
	local sqlite=$!
	suite postgres &
	local postgres=$!
	wait "$sqlite" || { rc=1; echo "--- the SQLite suite failed"; }
	wait "$postgres" || { rc=1; echo "--- the Postgres suite failed"; }
	rm -rf "$bin"
	return "$rc"
}

step "gofmt -l ." check_gofmt
step "go vet ./..." go vet ./...
step "go test on SQLite (-race) and on Postgres, side by side" both_suites

echo
if ((${#failed[@]})); then
	printf 'make test: FAILED: %s\n' "${failed[@]}"
	exit 1
fi
echo "make test: gofmt, go vet and the suite on SQLite and Postgres all passed"
