#!/usr/bin/env bash
# make demo: a local hub and managed cluster, the work agent, and a ManifestWork that runs a Job
# once, becomes Complete, and is garbage collected 15 s later (deploy/examples/run-once-job.yaml).
# Prints each change of the work's conditions as it happens, then the agent's completion and TTL
# metrics, and stops everything it started (also on failure or Ctrl-C).
#
# Environment: DEMO_RUN_ROOT (state, default <repo>/.run/demo), DEMO_TIMEOUT (seconds, default 180),
# DEMO_WORK (the ManifestWork file, default deploy/examples/run-once-job.yaml).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export RUN_ROOT=${DEMO_RUN_ROOT:-$ROOT/.run/demo}
CP=$HERE/controlplane.sh
WORK_FILE=${DEMO_WORK:-$ROOT/deploy/examples/run-once-job.yaml}
TIMEOUT=${DEMO_TIMEOUT:-180}
CLUSTER=cluster1
AGENT_PID=""
STARTED=()

# Bold only on a terminal, so logs and CI output stay plain text.
if [ -t 1 ]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
say() { printf '%s[demo %s]%s %s\n' "$BOLD" "$(date -u +%H:%M:%S.%3N)" "$PLAIN" "$*"; }
die() { say "FAILED: $*"; exit 1; }

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
    say "stopping the agent (pid $AGENT_PID)"
    kill -TERM "$AGENT_PID" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$AGENT_PID" 2>/dev/null || true
  fi
  local n
  for n in "${STARTED[@]}"; do
    say "stopping control plane $n"
    "$CP" down "$n" >/dev/null 2>&1 || say "WARNING: stopping $n reported an error (logs: $RUN_ROOT/$n/)"
  done
  [ "$rc" = 0 ] || say "logs: agent $RUN_ROOT/agent.log, control planes $RUN_ROOT/{hub,spoke}/*.log"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

command -v kubectl >/dev/null || die "kubectl is required"
command -v jq >/dev/null || die "jq is required"
command -v curl >/dev/null || die "curl is required"
[ -f "$WORK_FILE" ] || die "no such ManifestWork file: $WORK_FILE"
mkdir -p "$RUN_ROOT"

say "building (or reusing) the control-plane binaries"
"$HERE/build-controlplane.sh" >/dev/null

start_cp() { # NAME [--minimal]
  if "$CP" status "$1" >/dev/null 2>&1; then
    say "reusing running control plane $1"
  else
    say "starting control plane $1 ${2:-}"
    STARTED+=("$1")
    "$CP" up "$@" >/dev/null 2>"$RUN_ROOT/$1-up.log" || { tail -20 "$RUN_ROOT/$1-up.log"; die "control plane $1 did not start"; }
  fi
}
start_cp hub --minimal
start_cp spoke
HUB=$RUN_ROOT/hub/admin.kubeconfig
SPOKE=$RUN_ROOT/spoke/admin.kubeconfig

say "building the agent and installing the CRDs"
cargo build -q -p work-agent
BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/work-agent
[ -x "$BIN" ] || die "agent binary not found at $BIN"
CRDS=$(mktemp -d)
"$BIN" crd --output-dir "$CRDS" 2>/dev/null
"$CP" install-crds hub "$CRDS" >/dev/null 2>&1 || die "installing the CRDs on the hub failed"
"$CP" install-crds spoke "$CRDS"/*appliedmanifestworks* >/dev/null 2>&1 || die "installing the AppliedManifestWork CRD on the spoke failed"
rm -rf "$CRDS"
kubectl --kubeconfig "$HUB" create namespace "$CLUSTER" --dry-run=client -o yaml | kubectl --kubeconfig "$HUB" apply -f - >/dev/null

PORT=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
say "starting the agent for managed cluster $CLUSTER (metrics on http://127.0.0.1:$PORT/metrics, log $RUN_ROOT/agent.log)"
"$BIN" run --spoke-cluster-name "$CLUSTER" --hub-kubeconfig "$HUB" --spoke-kubeconfig "$SPOKE" \
  --http-address "127.0.0.1:$PORT" --health-address off --leader-elect=false --ttl-deletion-events \
  >"$RUN_ROOT/agent.log" 2>&1 &
AGENT_PID=$!
for _ in $(seq 1 300); do
  curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  kill -0 "$AGENT_PID" 2>/dev/null || { tail -20 "$RUN_ROOT/agent.log"; die "the agent exited"; }
  sleep 0.2
done
curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null || die "the agent did not become ready (see $RUN_ROOT/agent.log)"
say "agent ready"

# A leftover from an earlier run on reused control planes would hide the first transitions.
kubectl --kubeconfig "$HUB" delete -f "$WORK_FILE" --ignore-not-found --wait=true >/dev/null
say "applying $(realpath --relative-to="$ROOT" "$WORK_FILE")"
NAME=$(kubectl --kubeconfig "$HUB" apply -f "$WORK_FILE" -o jsonpath='{.metadata.name}')
[ -n "$NAME" ] || die "applying $WORK_FILE returned no name"

# One line per condition: "Type=Status Reason: message"; plus the deletion timestamp when set.
describe() {
  jq -r '(.status.conditions // [])[] | "\(.type)=\(.status) \(.reason): \(.message)"' <<<"$1"
  jq -r 'select(.metadata.deletionTimestamp) | "deleting since \(.metadata.deletionTimestamp)"' <<<"$1"
}

say "watching the work's conditions (TTL $(kubectl --kubeconfig "$HUB" -n "$CLUSTER" get manifestwork "$NAME" -o jsonpath='{.spec.deleteOption.ttlSecondsAfterFinished}')s after Complete)"
declare -A seen=()
deadline=$((SECONDS + TIMEOUT))
while :; do
  if ! json=$(kubectl --kubeconfig "$HUB" -n "$CLUSTER" get manifestwork "$NAME" -o json 2>&1); then
    if [[ "$json" == *NotFound* ]]; then
      say "ManifestWork $CLUSTER/$NAME is gone (deleted by TTL garbage collection)"
      break
    fi
  else
    while IFS= read -r line; do
      [ -n "$line" ] || continue
      key=${line%%=*}
      [ "${line:0:8}" = "deleting" ] && key=deleting
      if [ "${seen[$key]:-}" != "$line" ]; then
        seen[$key]=$line
        say "  $line"
      fi
    done < <(describe "$json")
  fi
  [ "$SECONDS" -lt "$deadline" ] || die "the work was not deleted within ${TIMEOUT}s"
  kill -0 "$AGENT_PID" 2>/dev/null || { tail -20 "$RUN_ROOT/agent.log"; die "the agent exited"; }
  sleep 0.25
done

say "Events about the work on the hub:"
kubectl --kubeconfig "$HUB" -n "$CLUSTER" get events.events.k8s.io \
  --field-selector "regarding.name=$NAME" -o custom-columns='TIME:.eventTime,REASON:.reason,NOTE:.note' 2>/dev/null || true
say "Jobs left on the managed cluster (Foreground deletion removes the Job and its Pods):"
kubectl --kubeconfig "$SPOKE" get jobs,pods -n default 2>&1 | sed 's/^/  /'

say "agent metrics:"
curl -fsS "http://127.0.0.1:$PORT/metrics" |
  grep -E '^work_agent_(completions_total|time_to_complete_seconds_(sum|count)|ttl_pending_deletions|ttl_deletions_total|ttl_deletion_lag_seconds_(sum|count)|works\{)' |
  sed 's/^/  /'
say "done"
