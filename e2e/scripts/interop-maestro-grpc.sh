#!/usr/bin/env bash
# interop-maestro-grpc.sh [--flavor ours|maestro-go] [--agent-bin BIN] [--keep]
# The agent against Maestro's gRPC broker (`maestro server --message-broker-type=grpc`, TLS 1.3 with
# client certificates), Maestro on a private PostgreSQL 15, bundles created, updated and deleted
# through Maestro's own CLI (gRPC source API) and checked through its REST API; the agent on a
# private spoke with Maestro's agent command line and --workload-source-driver=grpc. Scenarios,
# each PASS/FAIL with its facts: create, update, status feedback, delete. docs/interop-grpc.md.
# INTEROP_DRIVER=pubsub: the same against Maestro on Pub/Sub (`--message-broker-type=pubsub`) on
# Google's fake server (e2e/scripts/pubsub-fake.sh), the agent with --workload-source-driver=pubsub
# (docs/pubsub.md).
#
#   --flavor ours        (default) this repository's agent (--agent-bin, else target/release/work-agent)
#   --flavor maestro-go  `maestro agent` from the same binary: a control for the script itself
#   --keep               leave the temp dir in place
#
# Environment: MAESTRO_BIN (default /tmp/maestro-bin/maestro; built when missing from MAESTRO_SRC,
# a work tree of openshift-online/maestro, with Go modules from the proxy), PostgreSQL 15 binaries
# (initdb, pg_ctl; run as the postgres user when this script runs as root). CI never runs this.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
DRIVER=${INTEROP_DRIVER:-grpc}
GE_NAME=interop-maestro-$DRIVER
GE_CLUSTER=cluster1
# shellcheck source=e2e/scripts/ocm-grpc-env.sh
. "$HERE/ocm-grpc-env.sh"

ge_interop_args 16 "$@"
MB=${MAESTRO_BIN:-/tmp/maestro-bin/maestro}
PG_PID_DIR="" MAESTRO_PID="" FAKE_PID=""

cleanup() {
  local rc=$?
  ge_agent_stop
  ge_stop_pid "$MAESTRO_PID"
  ge_stop_pid "$FAKE_PID"
  if [ -n "$PG_PID_DIR" ]; then as_pg pg_ctl -D "$PG_PID_DIR" -m fast stop >/dev/null 2>&1 || true; fi
  local n
  for n in "${GE_CP_UP[@]}"; do RUN_ROOT="$GE_DIR/run" "$HERE/controlplane.sh" down "$n" >/dev/null 2>&1 || true; done
  ge_remove_dir "$rc"
  exit "$rc"
}
trap cleanup EXIT INT TERM

as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }

if [ ! -x "$MB" ]; then
  [ -n "${MAESTRO_SRC:-}" ] || ge_die "no $MB: set MAESTRO_BIN, or MAESTRO_SRC to a work tree of openshift-online/maestro"
  mkdir -p "$(dirname "$MB")"
  # One build shared by everything on this machine that wants the binary.
  flock /tmp/maestro-build.lock sh -c "test -x '$MB' || (cd '$MAESTRO_SRC' && go build -o '$MB' ./cmd/maestro)"
fi
case "$FLAVOR" in
  ours) BIN=${BIN:-$ROOT/target/release/work-agent} ;;
  maestro-go) BIN=$MB ;;
  *) ge_die "unknown flavor $FLAVOR" ;;
esac
[ -x "$BIN" ] || ge_die "no agent binary $BIN"

GE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/$GE_NAME.XXXXXX")
chmod 755 "$GE_DIR"
ge_log "state in $GE_DIR"

# --- spoke --------------------------------------------------------------------------------------------
GE_CP_UP+=(spoke)
RUN_ROOT="$GE_DIR/run" "$HERE/controlplane.sh" up spoke --minimal >/dev/null 2>"$GE_DIR/controlplane-spoke.log" ||
  { tail -20 "$GE_DIR/controlplane-spoke.log" >&2; ge_die "the spoke did not start"; }
GE_SPOKE_KC=$GE_DIR/run/spoke/admin.kubeconfig
RUN_ROOT="$GE_DIR/run" "$HERE/controlplane.sh" install-crds spoke \
  "$GE_CRDS/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml" >/dev/null 2>&1 ||
  ge_die "installing the AppliedManifestWork CRD failed"
spokectl create namespace interop >/dev/null

# --- PostgreSQL -------------------------------------------------------------------------------------
PGPORT=$(ge_free_port)
install -d -m 700 -o "$(id -u postgres 2>/dev/null || id -u)" "$GE_DIR/pg"
as_pg initdb -D "$GE_DIR/pg/data" -A trust -U maestro >"$GE_DIR/pg-init.log" 2>&1 || ge_die "initdb failed: $GE_DIR/pg-init.log"
as_pg pg_ctl -D "$GE_DIR/pg/data" -l "$GE_DIR/pg/log" -w \
  -o "-p $PGPORT -k $GE_DIR/pg -c listen_addresses=127.0.0.1" start >/dev/null || ge_die "PostgreSQL did not start"
PG_PID_DIR=$GE_DIR/pg/data
psql -h 127.0.0.1 -p "$PGPORT" -U maestro -d postgres -qc 'CREATE DATABASE maestro' >/dev/null
for kv in host=127.0.0.1 port=$PGPORT name=maestro user=maestro password=unused; do
  printf '%s' "${kv#*=}" >"$GE_DIR/db.${kv%%=*}"
done
DB=(--db-host-file="$GE_DIR/db.host" --db-port-file="$GE_DIR/db.port" --db-name-file="$GE_DIR/db.name"
  --db-user-file="$GE_DIR/db.user" --db-password-file="$GE_DIR/db.password" --db-sslmode=disable)

# --- Maestro ----------------------------------------------------------------------------------------------
HTTP_PORT=$(ge_free_port) GRPC_PORT=$(ge_free_port) BROKER_PORT=$(ge_free_port)
METRICS_PORT=$(ge_free_port) HEALTH_PORT=$(ge_free_port)
p=$GE_DIR/pki
case "$DRIVER" in
  grpc)
    mkdir -p "$p"
    (
      cd "$p"
      pki_ca 2 maestro-grpc-interop-ca
      pki_leaf server 2 /CN=maestro-grpc-broker serverAuth IP:127.0.0.1,DNS:localhost
      pki_leaf client 2 "/CN=$GE_CLUSTER-work-agent" clientAuth
    ) >"$GE_DIR/pki.log" 2>&1 || ge_die "openssl failed: $GE_DIR/pki.log"
    BROKER_ARGS=(--message-broker-type=grpc --grpc-broker-bindport="$BROKER_PORT"
      --grpc-broker-tls-cert-file="$p/server.crt" --grpc-broker-tls-key-file="$p/server.key"
      --grpc-broker-client-ca-file="$p/ca.crt")
    ;;
  pubsub)
    # Google's fake with Maestro's topics, the server's subscriptions and the consumer's (what
    # Maestro's charts create); Maestro's server config as its Makefile writes it, with disableTLS.
    FAKE_BIN=$("$HERE/pubsub-fake.sh" build)
    FAKE_ADDR=127.0.0.1:$(ge_free_port)
    "$FAKE_BIN" --address="$FAKE_ADDR" --consumers="$GE_CLUSTER" </dev/null >"$GE_DIR/pubsub-fake.out" 2>"$GE_DIR/pubsub-fake.log" &
    FAKE_PID=$!
    ge_wait 30 "the fake Pub/Sub server on $FAKE_ADDR" grep -qx "$FAKE_ADDR" "$GE_DIR/pubsub-fake.out" ||
      ge_die "the fake Pub/Sub server did not start: $GE_DIR/pubsub-fake.log"
    # A config on the fake: publish to one side's topics, read the other side's events through
    # the subscriptions named with SUFFIX (the server's own, or the consumer's).
    pubsub_config() { # FILE PUBLISHES READS SUFFIX
      local pp=projects/maestro-test
      cat >"$1" <<EOF
projectID: maestro-test
endpoint: $FAKE_ADDR
disableTLS: true
topics:
  ${2}Events: $pp/topics/${2}events
  ${2}Broadcast: $pp/topics/${2}broadcast
subscriptions:
  ${3}Events: $pp/subscriptions/${3}events-$4
  ${3}Broadcast: $pp/subscriptions/${3}broadcast-$4
EOF
    }
    pubsub_config "$GE_DIR/maestro-pubsub.yaml" source agent maestro
    BROKER_ARGS=(--message-broker-type=pubsub --message-broker-config-file="$GE_DIR/maestro-pubsub.yaml")
    ;;
  *) ge_die "INTEROP_DRIVER=$DRIVER: grpc or pubsub" ;;
esac
export MAESTRO_ENV=development
"$MB" migration "${DB[@]}" >"$GE_DIR/migration.log" 2>&1 || { tail -20 "$GE_DIR/migration.log" >&2; ge_die "maestro migration failed"; }
"$MB" server "${DB[@]}" "${BROKER_ARGS[@]}" \
  --http-server-bindport="$HTTP_PORT" --grpc-server-bindport="$GRPC_PORT" \
  --metrics-server-bindport="$METRICS_PORT" --health-check-server-bindport="$HEALTH_PORT" \
  </dev/null >"$GE_DIR/maestro.log" 2>&1 &
MAESTRO_PID=$!
export MAESTRO_REST_URL=http://127.0.0.1:$HTTP_PORT MAESTRO_GRPC_SERVER_ADDRESS=127.0.0.1:$GRPC_PORT
rest() { curl -sf --max-time 10 "$MAESTRO_REST_URL/api/maestro/v1/$1"; }
ge_wait 60 "Maestro's REST API" rest consumers || { tail -20 "$GE_DIR/maestro.log" >&2; ge_die "Maestro did not come up"; }
if [ "$DRIVER" = grpc ]; then
  ge_wait 30 "Maestro's gRPC broker on 127.0.0.1:$BROKER_PORT" \
    sh -c "openssl s_client -connect 127.0.0.1:$BROKER_PORT -CAfile $p/ca.crt -cert $p/client.crt -key $p/client.key </dev/null 2>/dev/null | grep -q 'Verify return code: 0'" ||
    { tail -20 "$GE_DIR/maestro.log" >&2; ge_die "Maestro's gRPC broker did not come up"; }
fi
"$MB" consumer create "$GE_CLUSTER" >"$GE_DIR/consumer.log" 2>&1 || { cat "$GE_DIR/consumer.log" >&2; ge_die "consumer create failed"; }
ge_log "Maestro up (REST $HTTP_PORT, source gRPC $GRPC_PORT, broker $DRIVER)"

if [ "$DRIVER" = grpc ]; then
  GE_URL=127.0.0.1:$BROKER_PORT
  BROKER_DESC="$GE_URL (TLS 1.3, client certificate)"
  cat >"$GE_DIR/agent-config.yaml" <<EOF
url: $GE_URL
caFile: $p/ca.crt
clientCertFile: $p/client.crt
clientKeyFile: $p/client.key
EOF
else
  # The agent's Secret as Maestro's agent chart writes it (maestro-agent-pubsub, config.yaml).
  BROKER_DESC="$FAKE_ADDR (Google's pstest, plain HTTP/2)"
  pubsub_config "$GE_DIR/agent-config.yaml" agent source "$GE_CLUSTER"
fi

# Maestro's agent chart command line (charts/maestro-agent), plus a private HTTP listener.
start_agent() {
  GE_AGENT_N=$((GE_AGENT_N + 1))
  GE_AGENT_LOG=$GE_DIR/agent-$GE_AGENT_N-$FLAVOR.log
  local args=(agent --consumer-name="$GE_CLUSTER" --workload-source-driver="$DRIVER"
    --workload-source-config="$GE_DIR/agent-config.yaml" --cloudevents-client-id="$GE_CLUSTER-work-agent"
    --kubeconfig="$GE_SPOKE_KC" -v=2 --status-sync-interval=5s)
  case "$FLAVOR" in
    ours) args+=(--http-address=127.0.0.1:0 --health-address=127.0.0.1:0) ;;
    maestro-go) args+=(--listen="127.0.0.1:$(ge_free_port)") ;;
  esac
  echo "$BIN ${args[*]}" >"$GE_AGENT_LOG"
  "$BIN" "${args[@]}" </dev/null >>"$GE_AGENT_LOG" 2>&1 &
  GE_AGENT_PID=$!
  ge_log "agent $FLAVOR started (pid $GE_AGENT_PID, log $GE_AGENT_LOG)"
}
start_agent

# --- scenarios ----------------------------------------------------------------------------------------
RESULTS=()
result() {
  RESULTS+=("$(printf '%-8s %-4s %s' "$1" "$2" "$3")")
  ge_log "$2 $1: $3"
}
now_ms() { date +%s%3N; }
# bundle_get ID PYEXPR: evaluates PYEXPR on the REST object b (prints nothing when absent).
bundle_get() {
  rest "resource-bundles/$1" 2>/dev/null | python3 -c "import json,sys
b=json.load(sys.stdin); s=b.get('status') or {}
conds={c.get('type'):c.get('status') for c in (s.get('conditions') or [])}
print($2)" 2>/dev/null
}
bundle_applied() { [ "$(bundle_get "$1" "conds.get('Applied')=='True' and conds.get('Available')=='True'")" = True ]; }
bundle_observed() { [ "$(bundle_get "$1" "s.get('ObservedVersion')")" = "$2" ]; }
bundle_gone() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$MAESTRO_REST_URL/api/maestro/v1/resource-bundles/$1")" = 404 ]; }
cm_value() { spokectl -n interop get configmap "$1" -o jsonpath='{.data.key}' 2>/dev/null; }
cm_is() { [ "$(cm_value "$1")" = "$2" ]; }
cm_gone() { ! spokectl -n interop get configmap "$1" >/dev/null 2>&1; }

# apply_bundle FILE: `maestro resourcebundle apply`; prints the bundle id.
apply_bundle() {
  "$MB" resourcebundle apply -f "$1" >"$1.out" 2>&1 || { cat "$1.out" >&2; return 1; }
  sed -n 's/^ID: *//p' "$1.out" | head -1
}
cm_bundle() { # FILE NAME VALUE [ID VERSION]
  python3 - "$@" <<'EOF'
import json, sys
f, name, value = sys.argv[1:4]
b = {"name": name, "consumer_name": "cluster1",
     "manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "cm-" + name, "namespace": "interop"}, "data": {"key": value}}]}
if len(sys.argv) > 5:
    b["id"], b["version"] = sys.argv[4], int(sys.argv[5])
json.dump(b, open(f, "w"))
EOF
}

ID1="" ID2=""
scenario_create() {
  local t0 t1
  cm_bundle "$GE_DIR/b1.json" b1 v1
  t0=$(now_ms)
  ID1=$(apply_bundle "$GE_DIR/b1.json") || { result create FAIL "resourcebundle apply failed: $(cat "$GE_DIR/b1.json.out")"; return; }
  if ge_wait "$T" "b1 Applied+Available in Maestro" bundle_applied "$ID1" && cm_is cm-b1 v1; then
    t1=$(now_ms)
    result create PASS "bundle $ID1: spoke cm-b1 key=$(cm_value cm-b1); REST status Applied/Available True, ObservedVersion=$(bundle_get "$ID1" "s.get('ObservedVersion')") after $((t1 - t0)) ms"
  else
    result create FAIL "REST status: $(bundle_get "$ID1" 'conds'); cm-b1 key=$(cm_value cm-b1)"
  fi
}

scenario_update() {
  local ver
  ver=$(bundle_get "$ID1" "b.get('version')")
  cm_bundle "$GE_DIR/b1u.json" b1 v2 "$ID1" "$ver"
  apply_bundle "$GE_DIR/b1u.json" >/dev/null || { result update FAIL "apply failed: $(cat "$GE_DIR/b1u.json.out")"; return; }
  local want=$((ver + 1))
  if ge_wait "$T" "cm-b1 key=v2" cm_is cm-b1 v2 && ge_wait "$T" "ObservedVersion $want" bundle_observed "$ID1" "$want"; then
    result update PASS "version $ver -> $want: spoke cm-b1 key=$(cm_value cm-b1); REST ObservedVersion=$want, Applied=$(bundle_get "$ID1" "conds.get('Applied')")"
  else
    result update FAIL "cm-b1 key=$(cm_value cm-b1); REST ObservedVersion=$(bundle_get "$ID1" "s.get('ObservedVersion')") (want $want)"
  fi
}

feedback() {
  # REST shows resourceStatus as the list of manifest conditions (older servers: {manifests: [...]}).
  bundle_get "$ID2" "' '.join(v['name']+'='+str((v.get('fieldValue') or {}).get('integer')) for m in (lambda r: r.get('manifests') or [] if isinstance(r, dict) else r or [])(s.get('resourceStatus')) for v in ((m.get('statusFeedback') or {}).get('values') or []))"
}
feedback_has() { feedback | grep -qw "$1"; }

scenario_feedback() {
  cat >"$GE_DIR/b2.json" <<'EOF'
{"name": "b2", "consumer_name": "cluster1",
 "manifests": [{"apiVersion": "apps/v1", "kind": "Deployment",
   "metadata": {"name": "dep-b2", "namespace": "interop"},
   "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "b2"}},
            "template": {"metadata": {"labels": {"app": "b2"}},
                         "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}],
 "manifest_configs": [{"resourceIdentifier": {"group": "apps", "resource": "deployments", "name": "dep-b2", "namespace": "interop"},
   "feedbackRules": [{"type": "WellKnownStatus"}]}]}
EOF
  ID2=$(apply_bundle "$GE_DIR/b2.json") || { result feedback FAIL "apply failed: $(cat "$GE_DIR/b2.json.out")"; return; }
  ge_wait "$T" "b2 Applied" sh -c "kubectl --kubeconfig=$GE_SPOKE_KC -n interop get deployment dep-b2" ||
    { result feedback FAIL "dep-b2 never created on the spoke"; return; }
  spokectl -n interop patch deployment dep-b2 --subresource=status --type=merge \
    -p '{"status":{"observedGeneration":1,"replicas":2,"readyReplicas":2,"availableReplicas":2,"updatedReplicas":2}}' >/dev/null
  if ge_wait "$T" "ReadyReplicas=2 in Maestro's status" feedback_has ReadyReplicas=2; then
    result feedback PASS "spoke status readyReplicas=2 -> Maestro REST statusFeedback: $(feedback)"
  else
    result feedback FAIL "Maestro REST statusFeedback: '$(feedback)'; status: $(rest "resource-bundles/$ID2" | cut -c1-600)"
  fi
}

scenario_delete() {
  local t0 t1 id ok=1
  t0=$(now_ms)
  for id in "$ID1" "$ID2"; do
    [ -n "$id" ] || continue
    "$MB" resourcebundle delete "$id" -y >/dev/null 2>&1 || ok=0
  done
  for id in "$ID1" "$ID2"; do
    [ -n "$id" ] || continue
    ge_wait "$T" "bundle $id gone from REST" bundle_gone "$id" || ok=0
  done
  t1=$(now_ms)
  ge_wait 10 "cm-b1 gone" cm_gone cm-b1 || ok=0
  ge_wait 10 "dep-b2 gone" sh -c "! kubectl --kubeconfig=$GE_SPOKE_KC -n interop get deployment dep-b2" || ok=0
  ge_wait 10 "no AppliedManifestWork left" sh -c "[ -z \"\$(kubectl --kubeconfig=$GE_SPOKE_KC get appliedmanifestwork -o name)\" ]" || ok=0
  if [ "$ok" = 1 ]; then
    result delete PASS "2 bundles deleted through Maestro: 404 over REST (Maestro hard-deletes on the agent's Deleted status) after $((t1 - t0)) ms; ConfigMap, Deployment and AppliedManifestWorks gone from the spoke"
  else
    result delete FAIL "REST: $(rest resource-bundles | python3 -c 'import json,sys;print([(i["id"],i.get("deleted_at")) for i in json.load(sys.stdin).get("items",[])])' 2>/dev/null); spoke AppliedManifestWorks: $(spokectl get appliedmanifestwork -o name | tr '\n' ' ')"
  fi
}

scenario_create
scenario_update
scenario_feedback
scenario_delete

fails=0
{
  echo "interop with Maestro's $DRIVER broker ($MB) - agent $FLAVOR: $BIN"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  broker: $BROKER_DESC"
  for r in "${RESULTS[@]}"; do echo "$r"; done
} | tee "$GE_DIR/results.txt"
for r in "${RESULTS[@]}"; do case "$r" in *" FAIL "*) fails=$((fails + 1)) ;; esac; done
[ "$fails" = 0 ] && ge_log "all scenarios PASS" || ge_log "$fails FAIL"
[ "$fails" = 0 ]
