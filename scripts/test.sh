#!/usr/bin/env bash
# test.sh — what `make test` and CI run.
#
#   1. makes sure go, gcc (for -race), redis-server, redis-cli (the cluster test), the Postgres
#      server binaries, Citus in them (from ../shared/citus), chromium (the browser test) and
#      curl (the 413 test) are installed (apt-get when root; otherwise it names the Debian
#      packages);
#   2. gofmt -l must print nothing, go vet ./... must be clean;
#   3. the whole suite on SQLite with the race detector, on Postgres and on a Citus cluster (a
#      coordinator and two worker nodes): the test binaries are built first (and kept in
#      var/test-bin: an unchanged one is not linked again), then run six at a time, the
#      longest first: the SQLite suite, its packages whose tests drive the programs as
#      processes (without the race detector, as on Postgres), the Postgres suite, the Citus
#      suite (the Postgres suite's binaries), and the packages that use no database (once:
#      with the race detector, but for those with no concurrency in them).
#
# The crash and outage tests that take minutes and the long runs of the property tests are in
# `make chaos` (scripts/chaos.sh).
#
# The tests start their own redis-server and Postgres on free ports (internal/testenv); this
# script starts no server. The Postgres suite's binaries share one server, and the Citus
# suite's one cluster (the first starts it, EVENTQ_TEST_PG_SHARED), which this script stops
# when the suite ends. Every step runs even
# after a failure; the exit code is non-zero if any step failed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD

bash scripts/ensure-deps.sh go gcc redis-server redis-cli postgres chromium curl
# Citus where a user's machine may have it (see ensure-deps.sh). Without it the rest runs and
# the Citus suite is skipped, saying so; CI always runs it.
citus_suite=1
if ! bash scripts/ensure-deps.sh citus; then
	if [[ ${CI:-} == true ]]; then
		echo "test.sh: CI runs the Citus suite, and Citus could not be installed" >&2
		exit 1
	fi
	citus_suite=0
	citus_skipped="make test: SKIPPED the Citus suite: Citus is not installed (the line above says why and how to get it); the rest runs"
	echo "$citus_skipped"
fi

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
db_free=(./internal/eventqueue ./internal/ratelimit ./internal/turns ./routes ./internal/httpx ./internal/cache ./internal/config ./internal/validate ./internal/testenv ./models
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

# Stack traces and race reports do not need DWARF: -dwarf=false compiles the packages without it
# (a quarter less for the linker to read and copy) and -w leaves the tables out of the binary.
build_flags=(-gcflags=all=-dwarf=false -ldflags=-w)

# A binary built with -race sleeps a second before it exits, for races still being reported
# by goroutines the tests left running; a test binary's tests have all returned by then.
export GORACE=atexit_sleep_ms=100

module=github.com/eventq/eventq

# without LIST... / only LIST...: the lines of stdin that are not / that are among LIST's
# packages (./dir or import path).
without() {
	grep -vxF "$(printf '%s\n' "$@" | sed "s|^\./|$module/|")"
}
only() {
	grep -xF "$(printf '%s\n' "$@" | sed "s|^\./|$module/|")"
}

# The test binaries are kept between runs, in var/test-bin/race and var/test-bin/plain: go test
# -c -o skips a link whose output is there and up to date (the binary's build ID names its
# inputs: sources, flags, toolchain), and linking the 50-odd binaries is a third of a warm run's
# CPU. A change relinks the binaries that depend on it. The runs' durations are kept there
# too, to start the longest first.
test_bin=var/test-bin
# One run at a time per clone: a second would relink binaries the first is running. It waits.
mkdir -p "$test_bin"
exec 8>"$test_bin/.lock"
if ! flock -n 8; then
	echo "test.sh: another make test is running in this clone; waiting for it" >&2
	flock 8
fi

# tested PKG...: those of the packages that have test files, by import path.
tested() {
	go list -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' "$@"
}

# build_tests FLAVOUR FLAGS... -- PKG...: go test -c the packages into $test_bin/FLAVOUR, and
# removes the binaries of packages no longer among them.
build_tests() {
	local dir=$test_bin/$1 flags=() keep
	shift
	while [[ $1 != -- ]]; do flags+=("$1"); shift; done
	shift
	mkdir -p "$dir"
	keep=$(printf '%s\n' "$@" | sed 's|.*/||; s|$|.test|')
	for f in "$dir"/*.test; do
		[[ -e $f ]] && ! grep -qxF "${f##*/}" <<<"$keep" && rm -f "$f"
	done
	go test -c -o "$dir/" "${flags[@]}" "$@"
}

# run_test LABEL DB FLAVOUR PKG: runs PKG's test binary in its directory on DB, then prints, in
# one piece and prefixed with LABEL, what go test would (its output if it failed, and its ok or
# FAIL line), appends it to $logs/LABEL.log and records the duration.
run_test() {
	local label=$1 db=$2 flavour=$3 pkg=$4 out start end rc=0 secs
	out=$(mktemp "$logs/run.XXXXXX")
	start=$(date +%s.%N)
	# The Postgres suite's binaries share a server, and the Citus suite's a cluster
	# (EVENTQ_TEST_PG_SHARED).
	(
		exec 8>&- # the run's lock: a server a test leaves behind must not hold it
		cd "$root/${pkg#"$module"/}" || exit 1
		case $db in
		postgres) export EVENTQ_TEST_PG_SHARED=$shared_pg ;;
		citus) export EVENTQ_TEST_PG_SHARED=$shared_citus ;;
		*) unset EVENTQ_TEST_PG_SHARED ;;
		esac
		EVENTQ_TEST_DB=$db exec "$root/$test_bin/$flavour/${pkg##*/}.test" -test.count=1 -test.timeout=20m \
			-test.paniconexit0
	) >"$out" 2>&1 || rc=$?
	end=$(date +%s.%N)
	secs=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", b - a }')
	if ((rc == 0)); then
		printf 'ok  \t%s\t%ss\n' "$pkg" "$secs" >"$out"
	else
		printf 'FAIL\t%s\t%ss\n' "$pkg" "$secs" >>"$out"
	fi
	sed -i "s/^/[$label] /" "$out"
	flock "$logs/print.lock" sh -c 'cat "$1"; cat "$1" >>"$2"' _ "$out" "$logs/$label.log"
	printf '%s\t%s\n' "$label $pkg" "$secs" >"$out.time"
	return "$rc"
}

# The runs of the suite, of the packages with tests: one line each, "LABEL|DB|FLAVOUR|PKG".
# Every package that uses a database runs on SQLite (with the race detector, but those that
# drive the programs as processes), on Postgres and on a Citus cluster (but sqlite_only); the
# database-free ones run once.
runs() {
	local all
	all=$(tested ./...)
	without "${db_free[@]}" "${processes[@]}" <<<"$all" | sed 's/^/sqlite|sqlite|race|/'
	only "${processes[@]}" <<<"$all" | sed 's/^/sqlite processes|sqlite|plain|/'
	without "${db_free[@]}" "${sqlite_only[@]}" <<<"$all" | sed 's/^/postgres|postgres|plain|/'
	if ((citus_suite)); then
		without "${db_free[@]}" "${sqlite_only[@]}" <<<"$all" | sed 's/^/citus|citus|plain|/'
	fi
	only "${db_free[@]}" <<<"$all" | without "${sequential[@]}" | sed 's/^/no database|none|race|/'
	only "${sequential[@]}" <<<"$all" | sed 's/^/sequential|none|plain|/'
}

# by_last_duration: the runs on stdin, the longest of the last run first (a new one first of
# all: it may be long).
by_last_duration() {
	awk -F'\t' -v times="$test_bin/durations" '
		BEGIN { while ((getline line < times) > 0) { split(line, f, "\t"); d[f[1]] = f[2] } }
		{ split($0, r, "|"); k = r[1] " " r[4]; print ((k in d) ? d[k] : 1e9) "\t" $0 }' |
		sort -t$'\t' -k1,1 -rn | cut -f2-
}

# stop_shared_postgres DIR: stops the Postgres servers a suite's binaries shared
# (internal/testenv, EVENTQ_TEST_PG_SHARED: its line is "PORT PID DIR", once per server: the
# Citus suite's has its worker nodes after the coordinator) and removes them.
stop_shared_postgres() {
	local dir=$1 fields i pid
	if [[ -f $dir/server ]]; then
		read -r -a fields <"$dir/server"
		for ((i = 1; i < ${#fields[@]}; i += 3)); do
			kill -INT "${fields[i]}" 2>/dev/null || true
		done
		for ((i = 1; i < ${#fields[@]}; i += 3)); do
			pid=${fields[i]}
			for _ in $(seq 100); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
			kill -KILL "$pid" 2>/dev/null || true
			rm -rf "${fields[i + 1]}"
		done
	fi
	rm -rf "$dir"
}

# all_suites: builds the test binaries (those under the race detector and those without, at
# the same time), then runs them, EVENTQ_TEST_JOBS (default 6) at a time, the longest first:
# the SQLite suite with the race detector, its process-driving packages without it, the
# Postgres suite, and the database-free packages with the race detector and (the sequential
# ones) without. Much of a test's time is spent waiting on servers, subprocesses and timers,
# not on the CPU, so several at once keep two cores busy; the links no longer compete with
# the tests, whose latency bounds they stretched.
all_suites() {
	local rc=0 bin start=$SECONDS list jobs=${EVENTQ_TEST_JOBS:-6} race plain
	# The Postgres suite's binaries share one server, and the Citus suite's one cluster: each
	# starting its own (copying a data directory, migrating a template) cost more CPU than most
	# of their tests.
	shared_pg=$(mktemp -d)
	shared_citus=$(mktemp -d)
	# The tests that run the programs as processes share one build of them.
	bin=$(mktemp -d)
	export EVENTQ_TEST_BIN=$bin
	list=$(runs)
	race=$(grep '|race|' <<<"$list" | cut -d'|' -f4 | sort -u)
	plain=$(grep '|plain|' <<<"$list" | cut -d'|' -f4 | sort -u)
	local stamp total ticker
	stamp=$(mktemp)
	total=$(($(wc -w <<<"$race") + $(wc -w <<<"$plain")))
	go build "${build_flags[@]}" -o "$bin/" ./cmd/... &
	# go vet ./... has run already: -vet=off skips go test's own vet pass.
	CGO_ENABLED=1 build_tests race -race -vet=off "${build_flags[@]}" -- $race &
	build_tests plain -vet=off "${build_flags[@]}" -- $plain &
	local builds
	builds=$(jobs -p)
	# go test -c is silent while it compiles and links: a line every 15 s says how far it is
	# (a binary already up to date is not linked again, and not counted).
	(
		while sleep 15; do
			echo "--- building the test binaries: $(find "$test_bin" -name '*.test' -newer "$stamp" | wc -l) of $total linked anew so far ($((SECONDS - start))s)"
		done
	) &
	ticker=$!
	for pid in $builds; do
		wait "$pid" || rc=1
	done
	kill "$ticker" 2>/dev/null
	wait "$ticker" 2>/dev/null || true
	rm -f "$stamp"
	echo "--- built the test binaries ($((SECONDS - start))s)"
	if ((rc)); then
		rm -rf "$bin"
		return 1
	fi
	while IFS= read -r run; do
		while (($(jobs -rp | wc -l) >= jobs)); do
			wait -n || true
		done
		IFS='|' read -r label db flavour pkg <<<"$run"
		run_test "$label" "$db" "$flavour" "$pkg" &
	done < <(by_last_duration <<<"$list")
	wait
	grep -lq '^\[[a-z ]*\] FAIL' "$logs"/*.log 2>/dev/null && rc=1
	cat "$logs"/*.time >"$test_bin/durations"
	rm -rf "$bin"
	stop_shared_postgres "$shared_pg"
	stop_shared_postgres "$shared_citus"
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
shared_pg= shared_citus=
trap 'rm -rf "$logs"; [[ -z $shared_pg ]] || stop_shared_postgres "$shared_pg"; [[ -z $shared_citus ]] || stop_shared_postgres "$shared_citus"' EXIT

step "gofmt -l ." check_gofmt
step "go vet ./..." go vet ./...
step "go test on SQLite (-race), on Postgres and on Citus" all_suites

echo
if ((${#failed[@]})); then
	if compgen -G "$logs/*.log" >/dev/null; then
		echo '==> what failed (repeated from above)'
		failures "$logs"/*.log || true
		echo
	fi
	printf 'make test: FAILED: %s\n' "${failed[@]}"
	[[ -z ${citus_skipped:-} ]] || echo "$citus_skipped"
	exit 1
fi
if ((citus_suite)); then
	echo "make test: gofmt, go vet and the suite on SQLite, Postgres and Citus all passed"
else
	echo "make test: gofmt, go vet and the suite on SQLite and Postgres passed"
	echo "$citus_skipped"
fi
