#!/usr/bin/env bash
# test.sh — what `make test` and CI run.
#
#   1. makes sure go, gcc (for -race), redis-server, redis-cli (the cluster test), the Postgres
#      server binaries, chromium (the browser test) and curl (the 413 test) are installed (apt-get when root;
#      otherwise it names the Debian packages);
#   2. gofmt -l must print nothing, go vet ./... must be clean;
#   3. the whole suite on SQLite with the race detector and on Postgres, five jobs at once:
#      the SQLite suite, its packages whose tests drive the programs as processes (without the
#      race detector, as on Postgres), the Postgres suite, and the packages that use no
#      database (once: with the race detector, but for those with no concurrency in them).
#
# The crash and outage tests that take minutes and the long runs of the property tests are in
# `make chaos` (scripts/chaos.sh).
#
# The tests start their own redis-server and Postgres on free ports (internal/testenv); this
# script starts no server. The Postgres suite's binaries share one server (the first starts it,
# EVENTQ_TEST_PG_SHARED), which this script stops when the suite ends. Every step runs even after a failure; the exit code is non-zero if
# any step failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/ensure-deps.sh go gcc redis-server redis-cli postgres chromium curl

# The tests' files go to memory: Postgres data directories and databases, SQLite files, Redis
# append-only files and the test binaries, hundreds of thousands of files created and removed
# in a run. On an ext4 /tmp that has seen many deletions, each file created costs a scan of
# recently deleted inodes in the kernel: perf put 60% of a Postgres test's time in
# ext4_create's recently_deleted (15 s of which 13 s in the kernel, against 3.5 s on tmpfs).
# TMPDIR is a directory in /dev/shm when that is a tmpfs with 4 GiB free (EVENTQ_TEST_TMPDIR
# names another; the default TMPDIR otherwise). It is kept between runs: the tests remove what
# they create, but for Postgres' initialised data directory, which is kept to be copied.
use_test_tmpdir() {
	local dir=${EVENTQ_TEST_TMPDIR-}
	if [[ -z $dir ]]; then
		[[ $(stat -f -c %T /dev/shm 2>/dev/null) == tmpfs ]] || return 0
		(($(df -k --output=avail /dev/shm | tail -n 1) >= 4 * 1024 * 1024)) || return 0
		dir=/dev/shm/eventq-tests-$(id -u)
	fi
	mkdir -p "$dir" && export TMPDIR=$dir
}
use_test_tmpdir

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

# The packages whose tests use no database run once (in the SQLite job, with the race
# detector), not once per database. They run with EVENTQ_TEST_DB=none, under which a test that
# asks for a database fails: a package that starts using one must leave this list.
db_free=(./internal/eventqueue ./internal/ratelimit ./routes ./internal/cache ./internal/config ./internal/validate ./internal/testenv ./models
	./internal/psp ./docs ./internal/changes ./internal/apiclient ./internal/paginate ./internal/gctune ./internal/profiling ./bench)

# Of the database-free packages, those with no concurrency in them or in their tests (no
# goroutine, lock or atomic): the race detector would have nothing to watch, so they run
# without it. A package that starts a goroutine leaves this list.
sequential=(./internal/config ./internal/validate ./models ./internal/psp ./docs ./internal/apiclient ./internal/paginate ./internal/gctune)

# The packages whose only database-using tests run on one database (testenv.OnOneDatabase):
# the Postgres suite would link and run them for tests that do not depend on the database, so
# only the SQLite suite runs them.
sqlite_only=(./deployments)

# The packages whose tests drive the programs as child processes (bin/api, bin/worker,
# bin/eventq, built once below): the race detector would watch only the test's side of the
# pipe, so they run without it, on both databases. Every other package runs its SQLite suite
# with the race detector: the api, the worker, the ingestor and the queue run in the test
# process there.
processes=(./internal/e2e ./cmd/eventq ./deployments)

# Every test binary is linked anew on each run (only compiled packages are cached), and
# linking is a large share of the suite's CPU. Stack traces and race reports do not need
# DWARF: -dwarf=false compiles the packages without it (a quarter less for the linker to read
# and copy) and -w leaves the tables out of the binary. go vet ./... has run already: -vet=off
# skips go test's own vet pass.
test_flags=(-count=1 -timeout 20m -gcflags=all=-dwarf=false -ldflags=-w -vet=off)

# A binary built with -race sleeps a second before it exits, for races still being reported
# by goroutines the tests left running; a test binary's tests have all returned by then.
export GORACE=atexit_sleep_ms=100

# packages DB [race]: the packages that use a database, on DB: every one but db_free (and, on
# Postgres, sqlite_only); with race, not processes either (they run on their own).
packages() {
	local skip=("${db_free[@]}")
	[[ $1 == postgres ]] && skip+=("${sqlite_only[@]}")
	[[ ${2-} == race ]] && skip+=("${processes[@]}")
	go list ./... | grep -vxF "$(printf '%s\n' "${skip[@]}" | sed 's|^\./|github.com/eventq/eventq/|')"
}

# suite DB LABEL ARGS...: go test ARGS (flags and packages) on DB, each output line prefixed
# with LABEL (the jobs run side by side and their lines interleave).
suite() {
	local db=$1 label=$2
	shift 2
	env EVENTQ_TEST_DB="$db" go test "${test_flags[@]}" "$@" 2>&1 | sed -u "s/^/[$label] /" | tee "$logs/$label.log"
	return "${PIPESTATUS[0]}"
}

# job LABEL DB ARGS...: one suite (go test ARGS on DB), timed.
job() {
	local label=$1 db=$2 start=$SECONDS rc=0
	shift 2
	suite "$db" "$label" "$@" || rc=1
	echo "--- [$label] took $((SECONDS - start))s"
	return "$rc"
}

# stop_shared_postgres DIR: stops the Postgres server the Postgres suite's binaries shared
# (internal/testenv, EVENTQ_TEST_PG_SHARED: its line is "PORT PID DIR") and removes it.
stop_shared_postgres() {
	local dir=$1 port pid data
	if [[ -f $dir/server ]]; then
		read -r port pid data <"$dir/server"
		kill -INT "$pid" 2>/dev/null || true
		for _ in $(seq 100); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		rm -rf "$data"
	fi
	rm -rf "$dir"
}

# all_suites: five jobs at the same time: the SQLite suite with the race detector, its
# process-driving packages without it, the Postgres suite, and the database-free packages with
# the race detector and (the sequential ones) without. Much of a suite's time is spent waiting on servers, subprocesses and
# timers, not on the CPU, so running them side by side keeps two cores busy.
all_suites() {
	local rc=0 bin pids=()
	# The Postgres suite's binaries share one server: each starting its own (copying a data
	# directory, migrating a template) cost more CPU than most of their tests.
	shared_pg=$(mktemp -d)
	# The tests that run the programs as processes share one build of them.
	bin=$(mktemp -d)
	go build -gcflags=all=-dwarf=false -ldflags=-w -o "$bin/" ./cmd/... || { rm -rf "$bin"; return 1; }
	export EVENTQ_TEST_BIN=$bin
	CGO_ENABLED=1 job sqlite sqlite -race $(packages sqlite race) &
	pids+=($!)
	job "sqlite processes" sqlite "${processes[@]}" &
	pids+=($!)
	EVENTQ_TEST_PG_SHARED=$shared_pg job postgres postgres $(packages postgres) &
	pids+=($!)
	CGO_ENABLED=1 job "no database" none -race $(printf '%s\n' "${db_free[@]}" | grep -vxF "$(printf '%s\n' "${sequential[@]}")") &
	pids+=($!)
	job sequential none "${sequential[@]}" &
	pids+=($!)
	for pid in "${pids[@]}"; do
		wait "$pid" || rc=1
	done
	rm -rf "$bin"
	stop_shared_postgres "$shared_pg"
	return "$rc"
}

# failures LOG...: the lines of the logs that say what failed, repeated at the end, where a CI log
# that keeps only its tail still shows them: each failing test with the output that follows
# its --- FAIL line, each panic with the first lines of its trace, and each failing package.
failures() {
	grep -h -E -A25 '^\[[a-z ]+\] (--- FAIL|panic:|WARNING: DATA RACE)' "$@" | grep -v -E '^\[[a-z ]+\] (=== |ok  )' | head -n 300
	grep -h -E '^\[[a-z ]+\] FAIL\s' "$@"
}

# The suites' output, one file per job, for failures.
logs=$(mktemp -d)
shared_pg=
trap 'rm -rf "$logs"; [[ -z $shared_pg ]] || stop_shared_postgres "$shared_pg"' EXIT

step "gofmt -l ." check_gofmt
step "go vet ./..." go vet ./...
step "go test on SQLite (-race) and on Postgres, five jobs at once" all_suites

echo
if ((${#failed[@]})); then
	if compgen -G "$logs/*.log" >/dev/null; then
		echo '==> what failed (repeated from above)'
		failures "$logs"/*.log || true
		echo
	fi
	printf 'make test: FAILED: %s\n' "${failed[@]}"
	exit 1
fi
echo "make test: gofmt, go vet and the suite on SQLite and Postgres all passed"
