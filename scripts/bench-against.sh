#!/usr/bin/env bash
# bench-against.sh — what `make bench-against REV=… [RUNS=N]` runs: the bench of REV (an
# earlier release, a commit) and of this working tree one after the other, RUNS times each,
# alternating, with the same BENCH_FLAGS. Runs of the same code on this machine differ by up to
# 40%, so a change is judged by runs taken side by side like these, never against a table of
# another day. REV is checked out in a temporary git worktree with its own bench; each run's
# table goes to var/bench-against/, named by code and turn, and its JSON beside it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rev=${REV:?usage: make bench-against REV=<commit> [RUNS=N] [BENCH_FLAGS=...]}
runs=${RUNS:-1}
bash scripts/ensure-deps.sh go redis-server postgres citus

name=$(git rev-parse --short "$rev")
here=$(git rev-parse --short HEAD)
if [ -n "$(git status --porcelain --untracked-files=no)" ]; then
	here="$here-dirty"
fi
old=$(mktemp -d)
trap 'git worktree remove --force "$old" >/dev/null 2>&1 || rm -rf "$old"' EXIT
git worktree add --detach --quiet "$old" "$rev"
out=var/bench-against
mkdir -p "$out"

bench() { # bench DIR LABEL TURN
	printf '\n==> bench of %s, turn %s of %s (%s)\n' "$2" "$3" "$runs" "$(date -u +%H:%M:%S)"
	(cd "$1" && go run -tags bench ./bench ${BENCH_FLAGS:-}) | tee "$out/$2-$3.txt"
	cp "$1/bench/results/latest.json" "$out/$2-$3.json" 2>/dev/null || true
}
for turn in $(seq "$runs"); do
	bench "$old" "$name" "$turn"
	bench . "$here" "$turn"
done
printf '\nthe tables: %s/%s-*.txt against %s/%s-*.txt\n' "$out" "$name" "$out" "$here"
