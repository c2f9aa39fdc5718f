#!/usr/bin/env bash
# run-integration.sh [CARGO_TEST_ARGS...] [-- TEST_BINARY_ARGS...]
# Builds the work-agent binary (debug) and the fake Pub/Sub server, exports WORK_AGENT_BIN and
# PUBSUB_FAKE_BIN and runs `cargo test -p e2e`
# against the control planes named by WORK_AGENT_{HUB,HUB_UPSTREAM,SPOKE}_KUBECONFIG.
# Without those variables it reads $RUN_ROOT/clusters.env (written by `make cluster-up`);
# if neither is there it fails: integration tests never silently skip.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
CARGO=${CARGO:-cargo}
log() { printf '[run-integration] %s\n' "$*" >&2; }
cd "$ROOT"

if [ -z "${WORK_AGENT_SPOKE_KUBECONFIG:-}" ] && [ -f "$RUN_ROOT/clusters.env" ]; then
  log "using control planes from $RUN_ROOT/clusters.env"
  # shellcheck disable=SC1091
  . "$RUN_ROOT/clusters.env"
fi
missing=()
for v in WORK_AGENT_HUB_KUBECONFIG WORK_AGENT_HUB_UPSTREAM_KUBECONFIG WORK_AGENT_SPOKE_KUBECONFIG; do
  if [ -z "${!v:-}" ]; then
    missing+=("$v")
  elif [ ! -f "${!v}" ]; then
    log "ERROR: $v=${!v} does not exist"
    missing+=("$v")
  fi
done
if [ "${#missing[@]}" -gt 0 ]; then
  log "ERROR: ${missing[*]} not set or not a file. Start the control planes with 'make cluster-up'"
  log "       (then 'make integration'), or run everything with 'make test'."
  exit 1
fi
export WORK_AGENT_HUB_KUBECONFIG WORK_AGENT_HUB_UPSTREAM_KUBECONFIG WORK_AGENT_SPOKE_KUBECONFIG

log "building work-agent (debug)"
"$CARGO" build -p work-agent --bin work-agent
TARGET_DIR=$("$CARGO" metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
export WORK_AGENT_BIN=$TARGET_DIR/debug/work-agent
[ -x "$WORK_AGENT_BIN" ] || { log "ERROR: $WORK_AGENT_BIN was not built"; exit 1; }
export WORK_AGENT_RUN_DIR=$RUN_ROOT
# The Pub/Sub cases start private fake servers (Google's pstest) from this binary, as the MQTT
# cases start private mosquittos.
log "building the fake Pub/Sub server"
PUBSUB_FAKE_BIN=$("$HERE/pubsub-fake.sh" build)
export PUBSUB_FAKE_BIN

# Split our arguments into cargo's and the test binary's, and give the test binary a thread
# count unless the caller chose one (tests use unique namespaces, so they can run in parallel).
cargo_args=()
test_args=()
seen_sep=0
for a in "$@"; do
  if [ "$seen_sep" = 0 ] && [ "$a" = "--" ]; then seen_sep=1; continue; fi
  if [ "$seen_sep" = 0 ]; then cargo_args+=("$a"); else test_args+=("$a"); fi
done
case " ${test_args[*]-} " in
  *" --test-threads"*) ;;
  *) test_args+=("--test-threads=${E2E_TEST_THREADS:-3}") ;;
esac
# Every test binary runs even when an earlier one failed: one failure must not hide the others.
case " ${cargo_args[*]-} " in
  *" --fail-fast"* | *" --no-fail-fast"*) ;;
  *) cargo_args+=(--no-fail-fast) ;;
esac
log "cargo test -p e2e ${cargo_args[*]} -- ${test_args[*]}"
exec "$CARGO" test -p e2e "${cargo_args[@]}" -- "${test_args[@]}"
