# Portico. `make run` starts the platform, `make test` runs every test; both
# bootstrap Postgres and Redis themselves (see e2e/scripts/deps.sh).
SHELL := /bin/bash
GO ?= go
BIN := bin
CMDS := $(addprefix ./,$(wildcard */cmd/*))
PROTOS := $(shell find proto -name '*.proto' | sort)
TEST_TIMEOUT ?= 15m
export PORTICO_DATABASE_URL ?= postgres://postgres@127.0.0.1:55432/portico?sslmode=disable
export PORTICO_TEST_REDIS_ADDR ?= 127.0.0.1:56379
# Peers measured side by side (ARCHITECTURE.md), built once into .run/bin.
RATELIMIT_PEER := github.com/envoyproxy/ratelimit/src/service_cmd@v1.4.1-0.20260122083618-3fb702589d36
export PORTICO_RATELIMIT_PEER_BIN ?= $(CURDIR)/.run/bin/service_cmd
# helm for the chart checks (charts/charttest), built once into .run/bin.
HELM := helm.sh/helm/v3/cmd/helm@v3.22.0
export PORTICO_HELM_BIN ?= $(CURDIR)/.run/bin/helm
# etcd 3.7 (kvnode CP tier's peer), built from the tools/etcd module.
export PORTICO_ETCD_BIN ?= $(CURDIR)/.run/bin/etcd
# golangci-lint for make lint (.golangci.yml), built once into .run/bin.
GOLANGCI_LINT := github.com/golangci/golangci-lint/v2/cmd/golangci-lint@v2.15.0
PORTICO_GOLANGCI_LINT_BIN ?= $(CURDIR)/.run/bin/golangci-lint

.PHONY: run test build deps deps-check stop status bench lint proto proto-check fmt-check vet peers helm etcd golangci-lint

# Where make run's ratelimitsvc keeps its buckets: redis (make deps's, the
# default) or cachenode (the run's own cache cluster, over mutual TLS).
RATELIMIT_STORE ?= redis
run: deps build
	@$(BIN)/launch -ratelimit-store=$(RATELIMIT_STORE)

test: deps deps-check proto-check fmt-check vet peers helm
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/ $(CMDS)

deps:
	@bash e2e/scripts/deps.sh

# The guard on make deps (e2e/deps): everything the Makefile, scripts, README
# examples and tests use is installed by make deps (e2e/scripts/deps.txt),
# pinned, Debian's base, or optional. First in make test, so a tool installed
# by hand fails here rather than on the next fresh machine.
deps-check:
	$(GO) test -count=1 ./e2e/deps

stop:
	@bash e2e/scripts/stop.sh

# What the launcher of a running `make run` supervises: each component's
# state, pid, restarts, uptime, ports and last exit (from .run/status.json,
# which the launcher rewrites on every change). Exits 3 when nothing runs.
status:
	@if [ -x $(BIN)/launch ]; then $(BIN)/launch status; else echo "portico: not running (no $(BIN)/launch: make run builds it)"; exit 3; fi

# Every benchmark once, then one table of the side-by-side comparisons
# (tools/benchsummary reads $(BENCH_OUT); BENCHMARKS.md explains it). Each
# peer is installed first: service_cmd (make peers) and etcd (make etcd)
# from the Go module proxy, redis-server from apt (make deps), River as a
# module of go.mod. Narrow a run with, e.g.,
#   make bench BENCH=SchedulerVsRiver BENCH_PKGS=./scheduler/
BENCH ?= .
BENCH_PKGS ?= ./...
BENCH_OUT ?= .run/bench.txt
bench: deps peers etcd
	@mkdir -p $(dir $(BENCH_OUT))
	@set -o pipefail; status=0; \
	$(GO) test -p 1 -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 120m $(BENCH_PKGS) | tee $(BENCH_OUT) || status=$$?; \
	$(GO) run ./tools/benchsummary $(BENCH_OUT); exit $$status

# envoyproxy/ratelimit's service_cmd: ratelimitsvc's peer test and benchmark.
peers: $(PORTICO_RATELIMIT_PEER_BIN)
$(PORTICO_RATELIMIT_PEER_BIN):
	GOBIN=$(dir $@) $(GO) install $(RATELIMIT_PEER)

# etcd's own server from a module of its own (tools/etcd), so Portico's
# go.mod does not gain etcd's dependencies: kvnode/cp BenchmarkCPVsEtcd.
etcd: $(PORTICO_ETCD_BIN)
$(PORTICO_ETCD_BIN): tools/etcd/go.mod tools/etcd/go.sum tools/etcd/main.go
	@mkdir -p $(dir $@)
	cd tools/etcd && $(GO) build -o $@ .

# helm lint and helm template run from charts/charttest (go test).
helm: $(PORTICO_HELM_BIN)
$(PORTICO_HELM_BIN):
	GOBIN=$(dir $@) $(GO) install $(HELM)

# gofmt, go vet, then golangci-lint with the linters .golangci.yml enables.
lint: fmt-check vet golangci-lint
	$(PORTICO_GOLANGCI_LINT_BIN) run ./...

golangci-lint: $(PORTICO_GOLANGCI_LINT_BIN)
$(PORTICO_GOLANGCI_LINT_BIN):
	GOBIN=$(dir $@) $(GO) install $(GOLANGCI_LINT)

vet:
	$(GO) vet ./...

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# Generated Go is committed beside the .proto files; protoc and the well-known
# types come from Debian (protobuf-compiler, libprotobuf-dev: deps.txt),
# protoc-gen-go and protoc-gen-go-grpc are pinned by the go.mod tool directive.
proto:
	@bash e2e/scripts/deps.sh --install-only
	protoc -I proto -I /usr/include --plugin=protoc-gen-go=$$($(GO) tool -n protoc-gen-go) \
		--plugin=protoc-gen-go-grpc=$$($(GO) tool -n protoc-gen-go-grpc) \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative $(PROTOS)

proto-check: proto
	@git diff --exit-code --stat -- proto/ || { echo "proto/: generated code is stale; run make proto and commit"; exit 1; }
	@if [ -n "$$(git ls-files --others --exclude-standard proto/)" ]; then echo "proto/: uncommitted generated files"; git ls-files --others --exclude-standard proto/; exit 1; fi
