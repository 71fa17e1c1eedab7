#!/usr/bin/env bash
# test.sh — what `make test` and CI run.
#
#   1. makes sure go, gcc (for -race), redis-server, redis-cli (the cluster test), the Postgres
#      server binaries, chromium (the browser test) and curl (the 413 test) are installed (apt-get when root;
#      otherwise it names the Debian packages);
#   2. gofmt -l must print nothing, go vet ./... must be clean;
#   3. the whole suite on SQLite with the race detector, then on Postgres.
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

step "gofmt -l ." check_gofmt
step "go vet ./..." go vet ./...
step "go test on SQLite (-race)" \
	env EVENTQ_TEST_DB=sqlite CGO_ENABLED=1 go test -race -count=1 -timeout 20m ./...
step "go test on Postgres" \
	env EVENTQ_TEST_DB=postgres go test -count=1 -timeout 20m ./...

echo
if ((${#failed[@]})); then
	printf 'make test: FAILED: %s\n' "${failed[@]}"
	exit 1
fi
echo "make test: gofmt, go vet and the suite on SQLite and Postgres all passed"
