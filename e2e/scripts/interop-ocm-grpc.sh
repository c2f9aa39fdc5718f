#!/usr/bin/env bash
# interop-ocm-grpc.sh [--flavor ours|upstream] [--agent-bin BIN] [--keep]
# The agent against OCM's own CloudEvents gRPC server (`server grpc`, built from the OCM repository
# by ocm-bins.sh) on a private hub, works created as ManifestWorks on the hub with kubectl, the
# agent on --workload-source-driver=grpc with a bearer token over TLS. Scenarios, each PASS/FAIL
# with the facts it checked: create, update, status feedback, resync across an agent restart
# (work created and work deleted while the agent is down), delete. docs/interop-grpc.md.
#
#   --flavor ours      (default) this repository's agent: --agent-bin, else target/release/work-agent
#   --flavor upstream  OCM's `work agent` from the same build: a control for the script itself
#   --keep             leave the temp dir (logs, configs) in place; it is printed either way
#
# Environment: OCM_MIRROR (git directory of open-cluster-management-io/ocm; not needed once the
# binaries are cached), OCM_REF (default v1.3.1). CI never runs this.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GE_NAME=interop-ocm-grpc
# shellcheck source=e2e/scripts/ocm-grpc-env.sh
. "$HERE/ocm-grpc-env.sh"

ge_interop_args 15 "$@"

trap ge_exit EXIT INT TERM

ge_up
case "$FLAVOR" in
  ours) BIN=${BIN:-$ROOT/target/release/work-agent} ;;
  upstream) BIN=${BIN:-$GE_BINS/work} ;;
esac
[ -x "$BIN" ] || ge_die "no agent binary $BIN (cargo build --release -p work-agent, or --agent-bin)"
HASH=$(ge_hub_hash)

# --- helpers ---------------------------------------------------------------------------------------
RESULTS=()
result() { # NAME PASS|FAIL FACTS
  RESULTS+=("$(printf '%-8s %-4s %s' "$1" "$2" "$3")")
  ge_log "$2 $1: $3"
}
now_ms() { date +%s%3N; }
cond() { hubctl -n "$GE_CLUSTER" get manifestwork "$1" -o jsonpath="{.status.conditions[?(@.type==\"$2\")].$3}" 2>/dev/null; }
cond_true() { [ "$(cond "$1" "$2" status)" = True ]; }
cond_gen() { [ "$(cond "$1" "$2" status)" = True ] && [ "$(cond "$1" "$2" observedGeneration)" = "$3" ]; }
cm_value() { spokectl -n interop get configmap "$1" -o jsonpath='{.data.key}' 2>/dev/null; }
cm_is() { [ "$(cm_value "$1")" = "$2" ]; }
cm_gone() { ! spokectl -n interop get configmap "$1" >/dev/null 2>&1; }
work_gone() { ! hubctl -n "$GE_CLUSTER" get manifestwork "$1" >/dev/null 2>&1; }
amw_exists() { spokectl get appliedmanifestwork "$HASH-$1" >/dev/null 2>&1; }
amw_gone() { ! amw_exists "$1"; }
finalizers() { hubctl -n "$GE_CLUSTER" get manifestwork "$1" -o jsonpath='{.metadata.finalizers}' 2>/dev/null; }
has_finalizer() { finalizers "$1" | grep -q manifest-work-cleanup; }
applied() { cond_true "$1" Applied && cond_true "$1" Available; }

# apply_cm_work NAME VALUE: a ManifestWork of one ConfigMap (interop/cm-NAME, data.key=VALUE).
apply_cm_work() {
  hubctl apply -f - >/dev/null <<EOF
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata: {name: $1, namespace: $GE_CLUSTER}
spec:
  workload:
    manifests:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: cm-$1, namespace: interop}
      data: {key: "$2"}
EOF
}

# --- scenarios -----------------------------------------------------------------------------------------
ge_agent_start "$FLAVOR" "$BIN"

scenario_create() {
  local t0 t1
  t0=$(now_ms)
  apply_cm_work w1 v1
  if ge_wait "$T" "w1 Applied+Available" applied w1 && ge_wait 10 "cm-w1" cm_is cm-w1 v1 &&
    ge_wait 10 "AppliedManifestWork $HASH-w1" amw_exists w1 && ge_wait 10 "the hub finalizer" has_finalizer w1; then
    t1=$(now_ms)
    result create PASS "spoke cm-w1 key=$(cm_value cm-w1); hub Applied/Available True; AppliedManifestWork <sha256(url)>-w1 present; hub finalizers $(finalizers w1); create->Available seen after $((t1 - t0)) ms"
  else
    result create FAIL "Applied=$(cond w1 Applied status) Available=$(cond w1 Available status) cm=$(cm_value cm-w1) amw=$(amw_exists w1 && echo yes || echo no) finalizers=$(finalizers w1)"
  fi
}

scenario_update() {
  local uid0 uid1
  uid0=$(spokectl -n interop get configmap cm-w1 -o jsonpath='{.metadata.uid}' 2>/dev/null || true)
  apply_cm_work w1 v2
  local gen
  gen=$(hubctl -n "$GE_CLUSTER" get manifestwork w1 -o jsonpath='{.metadata.generation}')
  if ge_wait "$T" "cm-w1 key=v2" cm_is cm-w1 v2 && ge_wait "$T" "w1 Applied at generation $gen" cond_gen w1 Applied "$gen"; then
    uid1=$(spokectl -n interop get configmap cm-w1 -o jsonpath='{.metadata.uid}')
    result update PASS "generation $gen: spoke cm-w1 key=$(cm_value cm-w1), same object (uid $([ "$uid0" = "$uid1" ] && echo kept || echo CHANGED)); hub Applied observedGeneration=$(cond w1 Applied observedGeneration)"
  else
    result update FAIL "cm-w1 key=$(cm_value cm-w1); Applied observedGeneration=$(cond w1 Applied observedGeneration) (want $gen)"
  fi
}

feedback_values() {
  hubctl -n "$GE_CLUSTER" get manifestwork w2 -o jsonpath='{range .status.resourceStatus.manifests[*].statusFeedback.values[*]}{.name}={.fieldValue.integer}{.fieldValue.string} {end}' 2>/dev/null
}
feedback_has() { feedback_values | grep -qw "$1"; }

scenario_feedback() {
  hubctl apply -f - >/dev/null <<EOF
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata: {name: w2, namespace: $GE_CLUSTER}
spec:
  workload:
    manifests:
    - apiVersion: apps/v1
      kind: Deployment
      metadata: {name: dep-w2, namespace: interop}
      spec:
        replicas: 2
        selector: {matchLabels: {app: w2}}
        template:
          metadata: {labels: {app: w2}}
          spec: {containers: [{name: c, image: registry.k8s.io/pause:3.10}]}
  manifestConfigs:
  - resourceIdentifier: {group: apps, resource: deployments, name: dep-w2, namespace: interop}
    feedbackRules:
    - type: WellKnownStatus
    - type: JSONPaths
      jsonPaths: [{name: observed, path: .status.observedGeneration}]
EOF
  if ! ge_wait "$T" "w2 Applied" cond_true w2 Applied; then
    result feedback FAIL "w2 never Applied: $(cond w2 Applied message)"
    return
  fi
  # The spoke runs no controllers: play the deployment controller and write a status.
  spokectl -n interop patch deployment dep-w2 --subresource=status --type=merge \
    -p '{"status":{"observedGeneration":1,"replicas":2,"readyReplicas":2,"availableReplicas":2,"updatedReplicas":2}}' >/dev/null
  if ge_wait "$T" "feedback ReadyReplicas=2 on the hub" feedback_has ReadyReplicas=2 && feedback_has observed=1; then
    result feedback PASS "spoke status readyReplicas=2 -> hub statusFeedback: $(feedback_values)"
  else
    result feedback FAIL "hub statusFeedback after the spoke status write: '$(feedback_values)'"
  fi
}

scenario_restart() {
  apply_cm_work w4 v1
  ge_wait "$T" "w4 Applied" applied w4 || { result resync FAIL "w4 never Applied"; return; }
  local amw_uid0 amw_uid1 cm2_uid0 cm2_uid1
  amw_uid0=$(spokectl get appliedmanifestwork "$HASH-w2" -o jsonpath='{.metadata.uid}')
  cm2_uid0=$(spokectl -n interop get deployment dep-w2 -o jsonpath='{.metadata.uid}')
  ge_agent_stop
  apply_cm_work w3 v1
  hubctl -n "$GE_CLUSTER" delete manifestwork w4 --wait=false >/dev/null
  apply_cm_work w1 v3
  sleep 3
  # While the agent is away nothing moves on the spoke.
  local idle="cm-w3 $(cm_gone cm-w3 && echo absent || echo PRESENT), cm-w4 $(cm_gone cm-w4 && echo gone || echo present), cm-w1 key=$(cm_value cm-w1)"
  ge_agent_start "$FLAVOR" "$BIN"
  if ge_wait "$T" "w3 applied after the restart" applied w3 && ge_wait "$T" "cm-w1 key=v3" cm_is cm-w1 v3 &&
    ge_wait "$T" "w4 gone from the hub" work_gone w4 && ge_wait 10 "cm-w4 gone" cm_gone cm-w4 && ge_wait 10 "AppliedManifestWork of w4 gone" amw_gone w4; then
    amw_uid1=$(spokectl get appliedmanifestwork "$HASH-w2" -o jsonpath='{.metadata.uid}')
    cm2_uid1=$(spokectl -n interop get deployment dep-w2 -o jsonpath='{.metadata.uid}')
    if [ "$amw_uid0" = "$amw_uid1" ] && [ "$cm2_uid0" = "$cm2_uid1" ]; then
      result resync PASS "agent down: [$idle]; after restart: w3 applied, w1 updated (key=$(cm_value cm-w1)), w4 deleted on the hub and the spoke; w2's AppliedManifestWork and Deployment kept (same uids)"
    else
      result resync FAIL "w2 re-created across the restart: AppliedManifestWork uid $amw_uid0 -> $amw_uid1, Deployment uid $cm2_uid0 -> $cm2_uid1"
    fi
  else
    result resync FAIL "after restart: w3 Applied=$(cond w3 Applied status), cm-w1 key=$(cm_value cm-w1), w4 $(work_gone w4 && echo gone || echo "still on the hub, finalizers $(finalizers w4)"), cm-w4 $(cm_gone cm-w4 && echo gone || echo present)"
  fi
}

scenario_delete() {
  local t0 t1 w ok=1
  t0=$(now_ms)
  for w in w1 w2 w3; do hubctl -n "$GE_CLUSTER" delete manifestwork "$w" --wait=false >/dev/null; done
  for w in w1 w2 w3; do ge_wait "$T" "$w gone from the hub" work_gone "$w" || ok=0; done
  t1=$(now_ms)
  for w in w1 w3; do ge_wait 10 "cm-$w gone" cm_gone "cm-$w" || ok=0; done
  ge_wait 10 "dep-w2 gone" sh -c "! kubectl --kubeconfig=$GE_SPOKE_KC -n interop get deployment dep-w2" || ok=0
  for w in w1 w2 w3; do ge_wait 10 "AppliedManifestWork of $w gone" amw_gone "$w" || ok=0; done
  if [ "$ok" = 1 ]; then
    result delete PASS "3 works deleted on the hub: gone from the hub (finalizer released by the server on Deleted) after $((t1 - t0)) ms; their ConfigMaps, Deployment and AppliedManifestWorks gone from the spoke"
  else
    result delete FAIL "hub works left: $(hubctl -n "$GE_CLUSTER" get manifestwork -o name | tr '\n' ' '); spoke AppliedManifestWorks: $(spokectl get appliedmanifestwork -o name | tr '\n' ' ')"
  fi
}

scenario_create
scenario_update
scenario_feedback
scenario_restart
scenario_delete

fails=0
{
  echo "interop with OCM's server grpc ($(cat "$GE_BINS/commit" 2>/dev/null | cut -c1-12), ${OCM_REF:-v1.3.1}) - agent $FLAVOR: $BIN"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  url: $GE_URL  hub hash: $HASH"
  for r in "${RESULTS[@]}"; do echo "$r"; done
} | tee "$GE_DIR/results.txt"
for r in "${RESULTS[@]}"; do case "$r" in *" FAIL "*) fails=$((fails + 1)) ;; esac; done
if grep -q -i -E 'panic|fatal' "$GE_DIR"/agent-*.log; then
  ge_log "the agent log mentions panic/fatal:"
  grep -i -E 'panic|fatal' "$GE_DIR"/agent-*.log | head -5 >&2
  fails=$((fails + 1))
fi
[ "$fails" = 0 ] && ge_log "all scenarios PASS" || ge_log "$fails FAIL"
[ "$fails" = 0 ]
