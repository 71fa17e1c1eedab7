# eventq developer entry points. The logic lives in scripts/; see README.md.

GO    ?= go

.DEFAULT_GOAL := help
.PHONY: help run test test-loaded chaos build vet fmt bench bench-against bench-check lint-openapi clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  make %-11s %s\n", $$1, $$2}'

run: ## build, then run redis-server, api and worker locally (Ctrl-C stops them)
	@bash scripts/run.sh

test: ## gofmt, go vet, and the whole suite on SQLite (-race) and Postgres
	@bash scripts/test.sh

test-loaded: ## make test with four CPU hogs beside it (HOGS=N), as on a busy machine
	@bash scripts/test-loaded.sh

chaos: ## kill the api and Redis while tracking, on SQLite and Postgres: lost and duplicated events (minutes)
	@bash scripts/chaos.sh

build: ## build bin/api, bin/worker and bin/eventq
	$(GO) build -o bin/ ./cmd/...

vet: ## go vet ./...
	$(GO) vet ./...

fmt: ## rewrite the Go files with gofmt
	gofmt -l -w .

bench: ## measure eventq against its floors (own Redis, Postgres, SQLite); BENCH_FLAGS=-quick for a short run
	@bash scripts/ensure-deps.sh go redis-server postgres citus
	$(GO) run -tags bench ./bench $(BENCH_FLAGS)

bench-against: ## the bench of REV=<commit> and of this tree, alternating RUNS=N times (default 1), with the same BENCH_FLAGS
	@bash scripts/bench-against.sh

bench-check: ## the bench harness's own test: a -quick run of every scenario, checking each reports figures (CI runs it)
	@bash scripts/ensure-deps.sh go redis-server postgres citus
	$(GO) test -tags bench -count=1 -timeout 10m ./bench
	$(GO) test -tags bench -count=1 -run TestBenchRoutes ./cmd/api

lint-openapi: ## lint docs/openapi.yaml with Redocly's recommended rules (npm; make test checks the same rules in Go)
	@bash scripts/ensure-deps.sh npx
	cd docs && npx --yes @redocly/cli@2.77.0 lint openapi.yaml

clean: ## remove bin/ and the kept test binaries (var/test-bin); the data in var/ stays
	rm -rf bin var/test-bin
