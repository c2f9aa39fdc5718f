# work-agent: one command runs the demo (`make demo`), one runs the tests (`make test`).
SHELL := /bin/bash
.DEFAULT_GOAL := help
CARGO ?= cargo
RUN_DIR ?= $(CURDIR)/.run
MDBOOK ?= mdbook
MDBOOK_VERSION ?= 0.5.4

.PHONY: help
help: ## list targets
	@grep -E '^[a-z0-9-]+:.*##' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

.PHONY: build
build: ## build every crate (debug)
	$(CARGO) build --workspace --all-targets

.PHONY: fmt
fmt: ## format the code
	$(CARGO) fmt --all

.PHONY: lint
lint: ## rustfmt check, clippy with warnings as errors, no import cycle between modules, the agent's layers one way
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	python3 scripts/module-cycles.py
	python3 scripts/agent-layers.py

.PHONY: unit
unit: ## tests that need no cluster (the CloudEvents client tests get a throw-away local mosquitto and fake Pub/Sub server)
	e2e/scripts/mosquitto.sh run e2e/scripts/pubsub-fake.sh run $(CARGO) test --workspace --exclude e2e

.PHONY: image
image: ## the OCI image FROM scratch with Debian's umoci and skopeo (release build, ~4 min); the last line is the archive's path (docs/operations.md)
	@scripts/build-image.sh $(IMAGE_ARGS)

.PHONY: image-smoke
image-smoke: ## the image in podman as the klusterlet and Maestro's chart start it, on fresh local control planes (after `make image`; not in CI, docs/operations.md)
	e2e/scripts/with-cluster.sh e2e/scripts/image-smoke.sh $(IMAGE_ARCHIVE)

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

.PHONY: interop-maestro
interop-maestro: ## the agent against a real Maestro server (MQTT), switched with Maestro's Go agent both ways (needs Maestro's repository: MAESTRO_REPO/MAESTRO_SRC/MAESTRO_BIN; PostgreSQL 15; not in CI); docs/interop-maestro.md
	e2e/scripts/interop-maestro.sh

# The property tests run at a few hundred cases here (PROPTEST_CASES overrides): at their own
# counts two of them take most of `make unit`'s time; `make test` runs them so, `make prop` at 100,000.
.PHONY: check
check: lint ## the loop while changing code: rustfmt check, clippy, the import checks, the unit tests with short property runs (no cluster)
	PROPTEST_CASES=$${PROPTEST_CASES:-256} $(MAKE) --no-print-directory unit

# Each phase runs as its own step, so the table at the end says which one took the time. The
# integration tests are compiled before the control planes start, so the compiler does not
# compete with three API servers for the same cores.
.PHONY: test
test: ## everything but the long runs: lint, unit tests, then the integration suite on fresh local control planes; prints each phase's time
	@scripts/phases.sh \
		lint '$(MAKE) --no-print-directory lint' \
		unit '$(MAKE) --no-print-directory unit' \
		'integration build' '$(CARGO) build -p work-agent --bin work-agent && $(CARGO) test -p e2e --no-run' \
		'integration (control planes + suite)' 'e2e/scripts/with-cluster.sh e2e/scripts/run-integration.sh'

.PHONY: chaos
chaos: ## fault injection on the Kubernetes hub, then behind MQTT and gRPC, about 10 min (docs/reliability.md; CHAOS_ARGS="--hub mqtt --seed N" reproduces one)
	CHAOS_UPDATE_DOCS=1 e2e/scripts/with-cluster.sh e2e/scripts/chaos.sh $(CHAOS_ARGS)

.PHONY: chaos-short
chaos-short: ## the short fault-injection run CI does after `make test`: 150 s on the Kubernetes hub, then 60 s behind each broker, on fresh control planes (CHAOS_CI_SECONDS, CHAOS_CI_BROKER_SECONDS); writes no docs
	CHAOS_BROKER_SECONDS=$${CHAOS_CI_BROKER_SECONDS:-60} e2e/scripts/with-cluster.sh e2e/scripts/chaos.sh --duration $${CHAOS_CI_SECONDS:-150} $(CHAOS_ARGS)

.PHONY: chaos-long
chaos-long: ## fault injection and churn for an hour on the Kubernetes hub (RSS in docs/soak-rss-long.*), then 20 min behind MQTT and 20 behind gRPC (docs/reliability.md)
	CHAOS_UPDATE_DOCS=1 e2e/scripts/with-cluster.sh e2e/scripts/chaos.sh --long $(CHAOS_ARGS)

.PHONY: soak
soak: ## churn without faults for an hour (new kinds, namespaces, names); RSS curve in docs/soak-rss-soak.*
	CHAOS_UPDATE_DOCS=1 e2e/scripts/with-cluster.sh e2e/scripts/chaos.sh --soak $(CHAOS_ARGS)

.PHONY: bench-fleet
bench-fleet: ## 50 release agents on one hub: hub requests per work lifecycle and while idle (docs/performance.md, Fleet)
	FLEET_UPDATE_DOCS=1 e2e/scripts/with-cluster.sh e2e/scripts/fleet.sh $(FLEET_ARGS)

.PHONY: prop
prop: ## property-based tests of hostile input at 100,000 cases each (PROPTEST_CASES overrides)
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} $(CARGO) test --release -p work-api --test prop_decoding -- --nocapture
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} $(CARGO) test --release -p conditions --test prop_cel -- --nocapture
	PROPTEST_CASES=$${PROPTEST_CASES:-100000} $(CARGO) test --release -p agent --test prop_feedback -- --nocapture

.PHONY: bench
bench: ## micro-benchmarks (reports under target/criterion); the agent benchmark is `make bench-agent`
	$(CARGO) bench -p conditions

.PHONY: cel-conformance
cel-conformance: ## upstream's CEL test tables, cel-go vs ours (needs Go); UPDATE=1 rewrites the committed answers
	crates/conditions/benches/cel-conformance.sh $(if $(UPDATE),--update)

.PHONY: bench-cel-parity
bench-cel-parity: ## condition rules, ours vs cel-go on the same machine (ROUNDS=3); report in target/bench-cel-parity/
	crates/conditions/benches/cel-parity.sh $(ROUNDS)

.PHONY: bench-agent
bench-agent: ## agent benchmark, 1000 works x 5 ConfigMaps (BENCH_ARGS="--works 50 ..."); report in target/bench/
	e2e/scripts/bench-agent.sh $(BENCH_ARGS)

.PHONY: bench-scale
bench-scale: ## agent benchmark at 10,000 works x 1 ConfigMap, QPS 200 (docs/performance.md, Limits per cluster); report and RSS CSV in target/bench/
	e2e/scripts/bench-agent.sh --works 10000 --configmaps-per-work 1 --qps 200 --burst 400 \
		--label scale-10000x1-$$(git rev-parse --short HEAD) $(BENCH_ARGS)

.PHONY: bench-scale-mqtt
bench-scale-mqtt: ## behind MQTT at 10,000 works: apply in batches of 1,000, idle, restart (SIGKILL), status resync in parts of 1,000; the broker's queue per client unlimited (docs/performance.md, Limits per cluster)
	e2e/scripts/bench-mqtt.sh --idle-works 10000 --batch 1000 --restart --resync-part 1000 --broker-max-queued 0 \
		--agent-arg=--kube-api-qps=200 --agent-arg=--kube-api-burst=400 \
		--label mqtt-10000-$$(git rev-parse --short HEAD) $(BENCH_MQTT_ARGS)

.PHONY: bench-scale-mqtt-10
bench-scale-mqtt-10: ## behind MQTT at 1,000 works x 10 ConfigMaps, QPS 200: the top-up at once, idle, restart (SIGKILL), status resync in parts of 100 (docs/performance.md, Limits per cluster); report and RSS CSV in target/bench/
	e2e/scripts/bench-mqtt.sh --idle-works 1000 --configmaps-per-work 10 --batch 1000 --restart --resync-part 100 \
		--broker-max-queued 0 --agent-arg=--kube-api-qps=200 --agent-arg=--kube-api-burst=400 \
		--label mqtt-1000x10-$$(git rev-parse --short HEAD) $(BENCH_MQTT_ARGS)

.PHONY: bench-mqtt
bench-mqtt: ## the agent behind MQTT: bursts, deletes, 1000 idle works, RSS (BENCH_MQTT_ARGS="--flavor maestro-go --agent-bin ..."); report in target/bench/
	e2e/scripts/bench-mqtt.sh $(BENCH_MQTT_ARGS)

.PHONY: docs
docs: ## the manual (docs/) as a static site in target/book, with mdBook (`cargo install mdbook --locked --version $(MDBOOK_VERSION)`)
	@command -v $(MDBOOK) >/dev/null || { echo "mdbook not found: cargo install mdbook --locked --version $(MDBOOK_VERSION)" >&2; exit 1; }
	$(MDBOOK) build docs
	@echo "the manual: target/book/index.html"

.PHONY: docs-check
docs-check: ## the manual's relative links, anchors and repository paths resolve (scripts/check-doc-links.py), and mdBook builds it without a warning
	python3 scripts/check-doc-links.py
	@command -v $(MDBOOK) >/dev/null || { echo "mdbook not found: cargo install mdbook --locked --version $(MDBOOK_VERSION)" >&2; exit 1; }
	@log=$$(mktemp); rc=0; $(MDBOOK) build docs >"$$log" 2>&1 || rc=$$?; cat "$$log"; \
	if [ "$$rc" != 0 ] || grep -qE '^ *(WARN|ERROR)' "$$log"; then rm -f "$$log"; echo "docs-check: mdBook failed or warned (above)" >&2; exit 1; fi; \
	rm -f "$$log"; echo "docs-check: mdBook built the manual without a warning"

.PHONY: demo
demo: ## local control plane + agent + a ManifestWork that completes and is garbage collected
	e2e/scripts/demo.sh

.PHONY: interop-ocm-grpc
interop-ocm-grpc: ## the agent against OCM's own `server grpc` (needs OCM_MIRROR; INTEROP_ARGS="--flavor upstream" is the control); docs/interop-grpc.md
	e2e/scripts/interop-ocm-grpc.sh $(INTEROP_ARGS)

.PHONY: interop-maestro-grpc
interop-maestro-grpc: ## the agent against Maestro's gRPC broker (needs MAESTRO_BIN or MAESTRO_SRC, PostgreSQL 15); docs/interop-grpc.md
	e2e/scripts/interop-maestro-grpc.sh $(INTEROP_ARGS)

.PHONY: interop-maestro-pubsub
interop-maestro-pubsub: ## the agent against Maestro on Pub/Sub, on Google's fake server (needs MAESTRO_BIN or MAESTRO_SRC, PostgreSQL 15); docs/pubsub.md
	INTEROP_DRIVER=pubsub e2e/scripts/interop-maestro-grpc.sh $(INTEROP_ARGS)

.PHONY: bench-grpc
bench-grpc: ## ours vs upstream's agent behind OCM's `server grpc`: bursts 20/50/100, delete round trip, RSS (needs OCM_MIRROR; BENCH_GRPC_ARGS); report in docs/bench/
	e2e/scripts/bench-grpc.sh --out docs/bench $(BENCH_GRPC_ARGS)
