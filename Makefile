# multicache — `make help` lists the targets.
SHELL := /usr/bin/env bash
# A failing command fails its recipe even when piped into tee or grep.
.SHELLFLAGS := -o pipefail -c
GO ?= go
BIN_DIR ?= $(CURDIR)/bin
FLEET_DIR ?= .fleet
FLEET_CLUSTERS ?= 3
export MULTICACHE_BIN_DIR := $(BIN_DIR)

# Core packages that must stay race-clean. The daemon, cmd/multicache, is its own module (it
# requires k8s.io/kubernetes for kubectl's printers); DAEMON runs go in it.
CORE_PKGS := ./pkg/... ./internal/...
DAEMON := $(GO) -C cmd/multicache
TEST_TIMEOUT ?= 40m

.PHONY: help
help: ## List every target
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## Build the pinned etcd, kube-apiserver, kubectl and k9s into bin/, and install the official Python and JavaScript clients (idempotent)
	@bash hack/build-tools.sh etcd kube-apiserver kubectl k9s
	@bash hack/install-clients.sh

.PHONY: tools-cm
tools-cm: ## Also build kube-controller-manager (for fleet-up --controller-manager)
	@bash hack/build-tools.sh kube-controller-manager

.PHONY: build
build: ## Build the multicache binary into bin/
	CGO_ENABLED=0 $(DAEMON) build -o $(BIN_DIR)/multicache .

.PHONY: fmt-check
fmt-check: ## Fail if any Go file is not gofmt-clean
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet every package
	$(GO) vet ./...
	$(DAEMON) vet ./...

.PHONY: lint
lint: ## Run golangci-lint (pinned in hack/build-tools.sh; .golangci.yml) on both modules
	@bash hack/build-tools.sh golangci-lint
	$(BIN_DIR)/golangci-lint run ./...
	cd cmd/multicache && $(BIN_DIR)/golangci-lint run ./...

.PHONY: test
test: tools fmt-check vet lint ## Build the tools, then lint, and run unit, race, integration and e2e tests on a local fleet
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(CORE_PKGS)
# Ownership at width (10,000 clusters over 30 replicas, simulated) without the race detector,
# which made it run at 1,000 x 10 above.
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^TestShardSimulationAtWidth$$' ./pkg/shard/
# Where filters evaluated to the cost limit, which the race detector makes take a minute.
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -run '^TestFilterUntrackedStaysWithinTheLimit$$' ./pkg/index/
	$(DAEMON) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	KUBE_CACHE_MUTATION_DETECTOR=true KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./test/...
# The integration suite again with every first list streamed (watch-list), which the
# inconsistency detector checks: the suite's clusters are small, so by default their first
# lists are LISTs from the watch cache.
	MULTICACHE_UNPAGED_LIST_MAX=-1 KUBE_CACHE_MUTATION_DETECTOR=true KUBE_WATCHLIST_INCONSISTENCY_DETECTOR=true \
	  $(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./test/integration/...

BENCH_OBJECTS ?= 50000
BENCH_RUNS ?= 5
BENCH_MEMORY_LIMIT ?= 3Gi
BENCH_MILLION ?= 100000
BENCH_LATENCY_SECONDS ?= 30

.PHONY: bench
bench: tools ## Run every benchmark (in process, then on local fleets of 3 and 10 clusters) and write docs/BENCHMARKS.md
	@mkdir -p $(BIN_DIR)
	$(MAKE) --no-print-directory bench-queries
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_OBJECTS=$(BENCH_OBJECTS) MULTICACHE_BENCH_RUNS=$(BENCH_RUNS) \
	  $(GO) test -run '^$$' -bench FleetSync -benchtime 1x -timeout 60m -v ./test/bench/ | grep -v '^    fleet.go'
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_LATENCY_SECONDS=$(BENCH_LATENCY_SECONDS) \
	  $(GO) test -run '^$$' -bench WriteLatency -benchtime 1x -timeout 30m -v ./test/bench/ | grep -v '^    fleet.go'
	# 1M objects with a soft memory limit, then with the default (which writes the P5 section).
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_MILLION=$(BENCH_MILLION) MULTICACHE_BENCH_MEMORY_LIMIT=$(BENCH_MEMORY_LIMIT) \
	  $(GO) test -run '^$$' -bench FleetMillion -benchtime 1x -timeout 60m -v ./test/bench/ | grep -v '^    fleet.go'
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_MILLION=$(BENCH_MILLION) \
	  $(GO) test -run '^$$' -bench FleetMillion -benchtime 1x -timeout 60m -v ./test/bench/ | grep -v '^    fleet.go'
	$(MAKE) --no-print-directory bench-ready
	$(MAKE) --no-print-directory bench-workloads
	$(MAKE) --no-print-directory bench-ceiling
	$(MAKE) --no-print-directory bench-kubectl
	$(MAKE) --no-print-directory bench-auth
	$(MAKE) --no-print-directory bench-events
	$(MAKE) --no-print-directory bench-controller-runtime

.PHONY: bench-scale
bench-scale: tools ## S1: 100 clusters x 20k objects (5 API servers, 20 contexts each), one replica then three, written to docs/BENCHMARKS.md
	$(GO) test -run '^$$' -bench 'FleetScale$$' -benchtime 1x -timeout 3h -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-scale-1000
bench-scale-1000: tools ## S2: 1,000 clusters x 2,000 objects (5 API servers, 200 contexts each) beside S1's shape, one replica then three with a rolling restart, written to docs/BENCHMARKS.md
	MULTICACHE_BENCH_PROFILE_DIR=$(abspath $(BIN_DIR))/profiles $(GO) test -run '^$$' -bench 'FleetScale1000$$' -benchtime 1x -timeout 5h -v ./test/bench/ | grep -v '^    fleet.go'

# build-ab-binary builds the daemon of commit AB_REF into $(BIN_DIR)/multicache-ab.
define build-ab-binary
	@test -n "$(AB_REF)" || { echo "AB_REF: name the commit whose daemon to compare with, e.g. make $@ AB_REF=618c865" >&2; exit 2; }
	d=$$(mktemp -d) && git worktree add --detach "$$d/src" "$(AB_REF)" && \
	  (cd "$$d/src/cmd/multicache" && $(GO) build -o $(abspath $(BIN_DIR))/multicache-ab .); rc=$$?; \
	  git worktree remove --force "$$d/src"; rm -rf "$$d"; exit $$rc
endef

.PHONY: bench-binaries
bench-binaries: tools ## S1's one replica: this tree's daemon against the one built at AB_REF, side by side (make bench-binaries AB_REF=618c865), written to docs/BENCHMARKS.md
	$(build-ab-binary)
	MULTICACHE_BENCH_AB_BINARY=$(abspath $(BIN_DIR))/multicache-ab MULTICACHE_BENCH_AB_LABEL=$(AB_REF) $(GO) test -run '^$$' -bench DaemonBinaries -benchtime 1x -timeout 3h -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-scale-1000-binaries
bench-scale-1000-binaries: tools ## S2's three replicas alone (start, reads through a non-owner, a kill): this tree's daemon against the one built at AB_REF, side by side, written to docs/BENCHMARKS.md
	$(build-ab-binary)
	MULTICACHE_BENCH_SCALE1000_SHARDED_ONLY=1 MULTICACHE_BENCH_AB_BINARY=$(abspath $(BIN_DIR))/multicache-ab MULTICACHE_BENCH_AB_LABEL=$(AB_REF) \
	  $(GO) test -run '^$$' -bench 'FleetScale1000$$' -benchtime 1x -timeout 5h -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-identities
bench-identities: tools ## S2.8: 100 identities x 10 fleet watches over 1,000 clusters (delegated auth), write -> watch p99 against one unrestricted watch, written to docs/BENCHMARKS.md
	$(GO) test -run '^$$' -bench IdentityWatches -benchtime 1x -timeout 3h -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-queries
bench-queries: ## P3: in-process queries (5 runs each) and hot paths, written to docs/BENCHMARKS.md
	@mkdir -p $(BIN_DIR)
	$(GO) test -run '^$$' -bench . -benchtime 20000x -count $(BENCH_RUNS) -benchmem ./pkg/aggregate/ | tee $(BIN_DIR)/bench-aggregate.txt
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./pkg/intern/ ./pkg/index/ | tee $(BIN_DIR)/bench-index.txt
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_AGGREGATE="$$(grep -hE '^Benchmark' $(BIN_DIR)/bench-aggregate.txt $(BIN_DIR)/bench-index.txt)" \
	  $(GO) test -run '^$$' -bench RecordQueries -benchtime 1x -v ./test/bench/

INVENTORY_CLUSTERS ?= 100
INVENTORY_PODS ?= 2000
INVENTORY_RUNS ?= 7

.PHONY: bench-inventory
bench-inventory: ## Issue 35's I1-I4: summaries, sorted pages and owners in process over 2M Pods; multicache vs PostgreSQL (jsonb) and SQLite (Steve's layout) on the same Pods
	MULTICACHE_BENCH_SUMMARY_CLUSTERS=100 MULTICACHE_BENCH_SUMMARY_PODS=20000 \
	  $(GO) test -run '^$$' -bench SummarizeFleet -benchtime 5x -timeout 60m ./pkg/aggregate/
	MULTICACHE_BENCH_SUMMARY_CLUSTERS=100 MULTICACHE_BENCH_SUMMARY_PODS=20000 \
	  $(GO) test -run '^$$' -bench SortedPage -benchtime 5x -timeout 60m ./pkg/storage/local/
	cd test/inventorybench && MULTICACHE_BENCH_INVENTORY_CLUSTERS=$(INVENTORY_CLUSTERS) MULTICACHE_BENCH_INVENTORY_PODS=$(INVENTORY_PODS) \
	  MULTICACHE_BENCH_INVENTORY_RUNS=$(INVENTORY_RUNS) $(GO) test -run '^$$' -bench Inventory -benchtime 1x -timeout 120m -v .

.PHONY: bench-summary-http
bench-summary-http: tools ## I1 over HTTP: fleet summaries from one daemon over S1's fleet (100 clusters, 1M Pods), p50/p99 over loopback
	$(GO) test -run '^$$' -bench 'SummaryHTTP$$' -benchtime 1x -timeout 1h -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-ready
bench-ready: tools ## The daemon's start to /readyz vs B and L (3 x 20k and 3 x 50k Pods), and sync progress checked on 3 x 100k
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_READY_RUNS=$(BENCH_RUNS) \
	  $(GO) test -run '^$$' -bench DaemonReady -benchtime 1x -timeout 60m -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-workloads
bench-workloads: tools ## Heap per object vs B on a ReplicaSet-like and a diverse workload
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_WORKLOAD_RUNS=$(BENCH_RUNS) \
	  $(GO) test -run '^$$' -bench HeapWorkloads -benchtime 1x -timeout 60m -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-ceiling
bench-ceiling: ## The cache's own events/s from an in-memory watch source vs one plain client-go informer
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_CEILING_RUNS=$(BENCH_RUNS) \
	  $(GO) test -run '^$$' -bench Ceiling -benchtime 1x -timeout 30m -v ./test/bench/

.PHONY: bench-auth
bench-auth: tools ## One query's latency with a static token, delegated auth cached, and delegated auth reviewing every request
	$(GO) test -run '^$$' -bench AuthReviewCache -benchtime 1x -timeout 20m -v ./test/bench/ | grep -v '^    fleet.go'

BENCH_KUBECTL_PODS ?= 20000
BENCH_KUBECTL_RUNS ?= 7

.PHONY: bench-events
bench-events: tools ## E1: heap per cached Event vs B (3 clusters x 5,000 Events), written to docs/BENCHMARKS.md
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_RUNS=$(BENCH_RUNS) $(GO) test -run '^$$' -bench EventsHeap -benchtime 1x -timeout 30m -v ./test/bench/

BENCH_CR_PODS ?= 20000

.PHONY: bench-controller-runtime
bench-controller-runtime: tools ## R1: heap per Pod of a controller-runtime controller's caches, crcache vs controller-runtime's own (3 clusters x 20k Pods)
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_RUNS=$(BENCH_RUNS) MULTICACHE_BENCH_CR_PODS=$(BENCH_CR_PODS) \
	  $(GO) test -run '^$$' -bench ControllerRuntimeHeap -benchtime 1x -timeout 30m -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-kubectl
bench-kubectl: tools ## kubectl get pods -A -l SEL through the daemon vs a kubectl fan-out (3 clusters x 20k Pods)
	MULTICACHE_BENCH_WRITE=1 MULTICACHE_BENCH_KUBECTL_PODS=$(BENCH_KUBECTL_PODS) MULTICACHE_BENCH_KUBECTL_RUNS=$(BENCH_KUBECTL_RUNS) \
	  $(GO) test -run '^$$' -bench Kubectl -benchtime 1x -timeout 30m -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: e2e-roll-wide
e2e-roll-wide: tools ## TestRollingRestartAtWidth: a rolling restart of 3 replicas over 1,000 clusters (4 API servers x 250 Secrets) with writes and relisting watchers
	MULTICACHE_E2E_ROLL_ALIASES=$${MULTICACHE_E2E_ROLL_ALIASES:-250} KUBE_CACHE_MUTATION_DETECTOR=true \
	  $(GO) test -count=1 -timeout 90m -run '^TestRollingRestartAtWidth$$' -v ./test/e2e/ | grep -v '^    fleet.go'

.PHONY: soak
soak: tools ## 10-minute load (1,000 writes/s target, 3 clusters, fast/slow/panicking handlers) and wait for the slow handler
	MULTICACHE_LOAD_SECONDS=600 MULTICACHE_LOAD_WAIT_SLOW=1 $(GO) test -count=1 -timeout 60m -run TestLoad -v ./test/chaos/ | grep -v '^    fleet.go'

.PHONY: bench-profiles
bench-profiles: tools ## Measure 50 ClusterProfiles turning healthy at once (to Synced), and the inventory's requests in a steady minute
	$(GO) test -run '^$$' -bench ClusterProfilesJoin -benchtime 1x -timeout 30m -v ./test/bench/

.PHONY: bench-fixed-cost
bench-fixed-cost: tools ## S2.2: the fixed cost of an empty cluster x resource (one daemon over 300, then 1,000 clusters), written to docs/BENCHMARKS.md
	MULTICACHE_BENCH_WRITE=1 $(GO) test -run '^$$' -bench FixedCost -benchtime 1x -timeout 3h -v ./test/bench/ | grep -v '^    fleet.go'

.PHONY: bench-shard-sim
bench-shard-sim: ## S2.9, S2.10: 10,000 clusters over 30 replicas, simulated in fake time (about 12 minutes a run here)
	$(GO) test -run '^$$' -bench ShardSimulation -benchtime 1x -timeout 5h -v ./pkg/shard/

.PHONY: bench-loader
bench-loader: tools ## Measure the fleet loader's create rate and where the CPU goes
	$(GO) test -run '^$$' -bench Seed -benchtime 1x -count 1 -timeout 20m ./test/fleet/

.PHONY: demo
demo: tools ## Start a 3-cluster fleet, seed it, run the daemon on configs/demo.yaml, show queries; Ctrl-C stops all (PROFILES=1: the fleet from ClusterProfiles in fleet-1)
	@bash hack/demo.sh

.PHONY: fleet-up
fleet-up: tools ## Start FLEET_CLUSTERS clusters under FLEET_DIR and leave them running
	$(GO) run ./test/fleet/cmd/fleet up --dir "$(FLEET_DIR)" --clusters $(FLEET_CLUSTERS)

.PHONY: fleet-down
fleet-down: ## Stop the fleet under FLEET_DIR by PID and remove the dir
	$(GO) run ./test/fleet/cmd/fleet down --dir "$(FLEET_DIR)"
