# work-agent: one command runs the demo (`make demo`), one runs the tests (`make test`).
SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
RUN_DIR ?= $(CURDIR)/.run

.PHONY: help
help: ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

.PHONY: build
build: ## build every crate (debug)
	$(CARGO) build --workspace --all-targets

.PHONY: fmt
fmt: ## format the code
	$(CARGO) fmt --all

.PHONY: lint
lint: ## rustfmt check and clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

.PHONY: unit
unit: ## tests that need no cluster
	$(CARGO) test --workspace --exclude e2e

.PHONY: crds
crds: ## regenerate deploy/crds and deploy/schema from the Rust types
	$(CARGO) run -q -p work-agent -- crd --output-dir deploy/crds
	$(CARGO) run -q -p work-agent -- crd --json-schema --output-dir deploy/schema

.PHONY: controlplane-bins
controlplane-bins: ## build (or reuse from ~/.cache) etcd, kube-apiserver, kcm, scheduler, kwok
	e2e/scripts/build-controlplane.sh

.PHONY: cluster-up
cluster-up: ## start hub + hub-upstream (apiserver only) and spoke (full) control planes on loopback, CRDs installed
	e2e/scripts/test-clusters.sh up

.PHONY: cluster-down
cluster-down: ## stop the control planes started by cluster-up
	e2e/scripts/test-clusters.sh down

.PHONY: integration
integration: ## integration tests against running control planes (see cluster-up)
	e2e/scripts/run-integration.sh

.PHONY: test
test: lint unit ## everything: lint, unit tests, then integration tests on a fresh local control plane
	e2e/scripts/with-cluster.sh e2e/scripts/run-integration.sh

.PHONY: bench
bench: ## micro-benchmarks (reports under target/criterion); the agent benchmark is `make bench-agent`
	$(CARGO) bench -p conditions

.PHONY: bench-agent
bench-agent: ## agent benchmark, 1000 works x 5 ConfigMaps (BENCH_ARGS="--works 50 ..."); report in target/bench/
	e2e/scripts/bench-agent.sh $(BENCH_ARGS)

.PHONY: demo
demo: ## local control plane + agent + a ManifestWork that completes and is garbage collected
	e2e/scripts/demo.sh
