# OJS serverless: the Open Job Spec job lifecycle on AWS Lambda, DynamoDB and SQS.
#
#   make dev     the offline local stack serving the OJS API on :8080, with a demo
#   make test    every test (unit, integration on the real emulators, end to end,
#                CDK template tests); starts and stops its own emulators
#
# Prerequisites: Go 1.26+, Node.js 20+ with npm, Java 17+ (a JDK). Everything else
# (emulators, CDK CLI, Go modules) is installed by the targets below.

SHELL       := /bin/bash
GO          ?= go
LOCAL_BIN   := .local/bin
FUNCS       := api worker stream sweeper
DEV_ADDR    ?= 127.0.0.1:8080
# make dev answers Redis FLUSHDB here by wiping the local stack (for the OJS
# conformance runner's -redis reset); RESET_ADDR= turns it off.
RESET_ADDR  ?= 127.0.0.1:6379
EMU_STAMP   := localstack/node_modules/.package-lock.json

.DEFAULT_GOAL := help
.PHONY: help prereqs emulators build-local dev demo test test-unit vet bench clean fuzz fuzz-targets soak conformance conformance-ext console-e2e chromium jdk

help:
	@echo "make dev          run the offline local stack on http://localhost:8080 with a demo (Ctrl-C stops it)"
	@echo "make test         run every test, then the public OJS conformance suite (starts and stops its own emulators)"
	@echo "make conformance  the public OJS conformance suite (levels 0-4, then the extensions the manifest claims) against a fresh local stack"
	@echo "make fuzz         run every fuzz target under pkg/ for FUZZTIME (default 30s) each"
	@echo "make soak         the fault-injection soak: 1,000 workflows under injected faults (SOAK_WORKFLOWS, SOAK_SEED)"
	@echo "make conformance-ext   every OJS extension suite (ext-*), against a stack on free ports"
	@echo "make console-e2e  the web console in headless Chromium (installs chromium with apt-get if missing)"
	@echo "make demo         the local stack running the ETL workflow example step by step"
	@echo "make bench        throughput, latency, AWS requests and cost per job and step (BENCH_JOBS=... etc.)"
	@echo "make build        build the Lambda binaries (linux/arm64) into build/lambda/"
	@echo "make synth        synthesise the CDK stacks for dev, staging and prod (offline)"
	@echo "make deploy ENV=dev|staging|prod, make destroy ENV=..., make test-e2e URL=..."
	@echo "make localstack-up / localstack-deploy / test-localstack   (needs Docker)"

# Stop early, with the name of what is missing.
prereqs:
	@command -v $(GO) >/dev/null || { echo "missing prerequisite: Go 1.26+ (https://go.dev/dl/)" >&2; exit 1; }
	@command -v node >/dev/null || { echo "missing prerequisite: Node.js 20+ (node not found)" >&2; exit 1; }
	@command -v npm >/dev/null || { echo "missing prerequisite: npm (comes with Node.js 20+)" >&2; exit 1; }
	@command -v java >/dev/null || { echo "missing prerequisite: Java 17+ (java not found; DynamoDB Local needs it)" >&2; exit 1; }
	@v=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ -z "$$v" ] || [ "$$v" -lt 17 ]; then echo "missing prerequisite: Java 17+ (found version '$$v')" >&2; exit 1; fi
	@n=$$(node -p 'process.versions.node.split(".")[0]'); \
	  if [ "$$n" -lt 20 ]; then echo "missing prerequisite: Node.js 20+ (found $$n)" >&2; exit 1; fi

# The tests index DynamoDB Local's stream records with the JDK's source
# launcher (internal/dev/emulator, localstack/StreamIndex.java); a Java runtime
# without its compiler cannot run it.
jdk: prereqs
	@java --list-modules 2>/dev/null | grep -q '^jdk.compiler' || { echo "missing prerequisite: a JDK 17+ (this Java has no compiler, jdk.compiler; the tests need it to index DynamoDB Local's database)" >&2; exit 1; }

# Pinned emulators (package-lock.json): DynamoDB Local and the SQS emulator.
$(EMU_STAMP): localstack/package.json localstack/package-lock.json
	npm ci --prefix localstack --no-audit --no-fund --loglevel=error

emulators: prereqs $(EMU_STAMP)

# Host-architecture binaries for the local runtime.
build-local: prereqs
	@for fn in $(FUNCS); do \
		CGO_ENABLED=0 $(GO) build -tags lambda.norpc,ojsdev -trimpath -ldflags="-s -w" -o $(LOCAL_BIN)/$$fn/bootstrap ./functions/$$fn || exit 1; \
	done
	$(GO) build -o .local/ojs-local ./localstack/cmd/ojs-local

dev: emulators build-local
	@exec .local/ojs-local -demo jobs -addr $(DEV_ADDR) -bin $(LOCAL_BIN) $(if $(RESET_ADDR),-reset-addr $(RESET_ADDR))

# The ETL workflow example, its progress shown step by step.
demo: emulators build-local
	@exec .local/ojs-local -demo etl -addr $(DEV_ADDR) -bin $(LOCAL_BIN)

# Debian's headless Chromium for the console's browser tests (e2e/console_test.go):
# installed with apt-get when missing; stops with a clear message if it cannot be.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "$$CHROMIUM" ] || { \
	  echo "Chromium not found: installing Debian's chromium (apt-get) for the console tests ..."; \
	  { command -v apt-get >/dev/null 2>&1 && SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ) && \
	    $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; } || { \
	  echo "could not install Chromium: run 'apt-get update && apt-get install -y chromium' as root, or set CHROMIUM=/path/to/chromium" >&2; exit 1; }; }

# The web console in headless Chromium against a stack the e2e suite starts.
console-e2e: emulators chromium
	$(GO) test -count=1 -run 'TestConsole' ./e2e/

# Every extension directory of the conformance suite (ext-*), each an
# extension the manifest claims (pkg/httpapi/manifest.go, docs/admin.md).
# Run like `make conformance` but with the
# runner built with an overlay that adds what some extension tests use and
# the stored runner lacks: step captures, bare $type/$gte matchers,
# "expect" blocks, and the client-action steps ("push", "get", "fetch",
# "ack" with "request" and "store") of federation and ml-resources
# (internal/dev/conformance; nothing else changes). Any failure fails.
CONFORMANCE_EXT_SUITES ?= ext-admin-api,ext-dead-letter,ext-observability,ext-graceful-shutdown,ext-serverless,ext-progress,ext-encryption,ext-schema-registry,ext-job-versioning,ext-backpressure,ext-middleware,ext-fair-scheduling,ext-webhooks,ext-rate-limiting,ext-multi-tenancy,ext-durable-execution,ext-ml-resources,ext-federation,ext-ai-agents

conformance-ext: emulators build-local
	$(GO) run ./localstack/cmd/ojs-conformance-runner -dir $(CONFORMANCE_DIR) -out $(CURDIR)/.local/ojs-conformance-runner-ext
	$(GO) run ./localstack/cmd/ojs-conformance -runner .local/ojs-conformance-runner-ext -bin $(LOCAL_BIN) \
		-suites $(CONFORMANCE_DIR)/suites -dirs $(CONFORMANCE_EXT_SUITES) -expected docs/conformance-expected-failures.txt

vet: prereqs
	$(GO) vet ./...

# Fresh emulators for each phase: DynamoDB Local slows down as it holds
# the unit tests' hundreds of tables and streams (the e2e suite took 700 s
# after them in CI against 120 s on fresh emulators, and its 2-minute
# waits for events failed). The e2e suite starts its own local runtime
# (real bootstrap binaries) on free ports. The scale and soak packages run
# after the e2e suite, not beside it: on a 2-core machine the scale test
# saturates the shared DynamoDB Local, and a 1,000-job batch of the e2e
# suite failed beside it in CI. The public OJS conformance suite runs
# last, on a stack of its own.
test: emulators vet chromium jdk
	$(GO) run ./localstack/cmd/with-emulators -- $(GO) test -count=1 -race ./pkg/... ./internal/... ./functions/... ./localstack/...
	$(GO) run ./localstack/cmd/with-emulators -in-memory -- bash -c '$(INFRA_CDK_ENV) $(GO) test -count=1 -timeout 30m ./e2e/ ./infra/...'
	$(GO) run ./localstack/cmd/with-emulators -in-memory -- $(GO) test -count=1 -timeout 45m ./e2e/scale/ ./e2e/soak/
	$(MAKE) --no-print-directory conformance

# The public OJS conformance suite (third_party/ojs-conformance, a copy of
# openjobspec/ojs-conformance; docs/conformance.md): its runner is built
# from the copy, the local stack starts on free ports with the reset the
# runner needs between tests, and every directory in CONFORMANCE_SUITES
# runs. Tests no server can pass are listed, with the reason, in
# docs/conformance-expected-failures.txt; any other failure fails.
CONFORMANCE_DIR    ?= third_party/ojs-conformance
CONFORMANCE_SUITES ?= level-0-core,level-1-reliable,level-2-scheduled,level-3-workflows,level-4-advanced

conformance: emulators build-local
	@cd $(CONFORMANCE_DIR) && GOFLAGS=-mod=mod $(GO) build -o $(CURDIR)/.local/ojs-conformance-runner ./runner/http
	$(GO) run ./localstack/cmd/ojs-conformance -runner .local/ojs-conformance-runner -bin $(LOCAL_BIN) \
		-suites $(CONFORMANCE_DIR)/suites -dirs $(CONFORMANCE_SUITES) -expected docs/conformance-expected-failures.txt
	$(MAKE) --no-print-directory conformance-ext

test-unit: prereqs
	$(GO) test -count=1 ./pkg/job/... ./pkg/retry/... ./pkg/ojserr/... ./pkg/topology/...

# The fault-injection soak at full size (docs/fault-injection.md). It
# starts its own emulators (it restarts the SQS one mid-run); `make test`
# runs the same test with 150 workflows. SOAK_SEED reproduces a plan.
SOAK_WORKFLOWS ?= 1000
SOAK_TIMEOUT   ?= 80m

soak: emulators
	SOAK_WORKFLOWS=$(SOAK_WORKFLOWS) SOAK_TIMEOUT=$(SOAK_TIMEOUT) $(GO) test -count=1 -v -timeout 90m -run '^TestSoak$$' ./e2e/soak/

# The throughput and cost benchmark (docs/benchmark.md): starts its own
# emulators and local runtime on free ports, runs jobs, chains and batches
# in push and pull mode, counts every AWS request, prices it, and writes
# bench/results/latest.{json,md,png} and the tables in README.md and
# docs/benchmark.md. Knobs: BENCH_JOBS, BENCH_CHAINS, BENCH_BATCHES,
# BENCH_BATCH_WIDTH, BENCH_CLIENTS, BENCH_WORKERS, BENCH_FETCH,
# BENCH_CONCURRENCY, BENCH_PACED_JOBS, BENCH_PACED_RATE, BENCH_ARGS_BYTES, BENCH_BIG=1,
# BENCH_SKIP_ARM64=1. It reports missed targets; it never fails on them.
bench: emulators build-local
	$(GO) run ./localstack/cmd/ojs-bench -bin $(LOCAL_BIN) -out bench/results -update

clean:
	rm -rf .local build cdk.out

-include infra/infra.mk

# Every Fuzz* target under pkg/ for FUZZTIME each (their seed corpora also
# run with every `go test`). go test -fuzz takes one package at a time, so
# each target runs in its own package; some of those packages' TestMain
# need the emulators, so one pair serves them all. A failing input is
# written to that package's testdata/fuzz/<target>/. Below about 10s a
# target may end in "context deadline exceeded" before its seeds ran.
FUZZTIME ?= 30s

fuzz: emulators
	$(GO) run ./localstack/cmd/with-emulators -- $(MAKE) --no-print-directory fuzz-targets FUZZTIME=$(FUZZTIME)

fuzz-targets:
	@set -e; grep -rHoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' pkg | sort | \
	while IFS=: read -r file fn; do \
		t=$${fn#func }; dir=$$(dirname $$file); \
		echo "== $$t (./$$dir, $(FUZZTIME))"; \
		$(GO) test -run='^$$' -fuzz="^$$t\$$" -fuzztime=$(FUZZTIME) ./$$dir || exit 1; \
	done
