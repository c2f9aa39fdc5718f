#!/usr/bin/env bash
# interop-maestro.sh   (make interop-maestro)
# This agent against a real Maestro server built from its repository, and a cluster switched
# between Maestro's Go agent (`maestro agent`) and ours both ways. Everything is private: a
# PostgreSQL 15 cluster, a mosquitto, Maestro's server, a minimal spoke control plane, on free
# loopback ports, state in $INTEROP_DIR (default: a new /tmp/interop-maestro.XXXXXX). Prints
# PASS/FAIL per scenario with the facts checked (also in $INTEROP_DIR/results.txt); exits 1 if
# any scenario failed. docs/interop-maestro.md says what each scenario checks.
#
# Environment:
#   MAESTRO_REPO   Maestro's git repository (default /work/.mirror/openshift-online+maestro/repo)
#   MAESTRO_SRC    its source tree (default /tmp/maestro-src: a worktree of MAESTRO_REPO's HEAD)
#   MAESTRO_BIN    the maestro binary (default /tmp/maestro-bin/maestro; built when missing)
#   AGENT_BIN      our agent (default: `cargo build --release -p work-agent`, then a copy);
#                  AGENT_COMMIT names its commit in the results (default: this checkout's)
#   AMW_CRD        the AppliedManifestWork CRD (default: from the OCM API module of MAESTRO_SRC)
#   PG_BIN         PostgreSQL's bin directory (default /usr/lib/postgresql/15/bin)
#   INTEROP_DIR    state and logs; INTEROP_KEEP=1 keeps every process running at the end
#   DELETE_ROUNDS  delete round trips to measure (default 5)
#   MQTT_MAX_PACKET  the broker's max_packet_size in bytes (default 4194304; AWS IoT Core: 131072)
#   INTEROP_FILLER   works created through Maestro before the scenarios of our agent run, and
#                  deleted after them (default 0); with them, a broker restart scenario too
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
MAESTRO_REPO=${MAESTRO_REPO:-/work/.mirror/openshift-online+maestro/repo}
MAESTRO_SRC=${MAESTRO_SRC:-/tmp/maestro-src}
MAESTRO_BIN=${MAESTRO_BIN:-/tmp/maestro-bin/maestro}
PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
DELETE_ROUNDS=${DELETE_ROUNDS:-5}
MQTT_MAX_PACKET=${MQTT_MAX_PACKET:-4194304}
FILLER=${INTEROP_FILLER:-0}
DIR=${INTEROP_DIR:-$(mktemp -d /tmp/interop-maestro.XXXXXX)}
KEEP=${INTEROP_KEEP:-0}
CLUSTER=cluster1
CLIENT_ID=$CLUSTER-work-agent
NS=default
TIMEOUT=${INTEROP_TIMEOUT:-90}
# A restarted agent sends every status again, and Maestro takes them one at a time: the waits
# grow with the works held (3,000: 390 s).
TIMEOUT=$((TIMEOUT + ${INTEROP_FILLER:-0} / 10))
mkdir -p "$DIR/logs" "$DIR/bundles"
DIR=$(cd "$DIR" && pwd)
: >"$DIR/results.txt"

log() { printf '[interop-maestro %s] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
now() { date +%s.%N; }
ms_since() { python3 -c "import sys;print(round((float(sys.argv[2])-float(sys.argv[1]))*1000))" "$1" "$(now)"; }

FAILED=0
# result NAME PASS|FAIL FACTS...
result() {
  local name=$1 verdict=$2
  shift 2
  [ "$verdict" = PASS ] || FAILED=$((FAILED + 1))
  printf '%s %s: %s\n' "$verdict" "$name" "$*" | tee -a "$DIR/results.txt"
}

# ---------------------------------------------------------------------------------------------
# Processes: every one this script starts is recorded with its binary, so cleanup stops exactly
# those (and a recycled pid is never killed).
declare -A PIDS=()
spawn() { # NAME LOG CMD... (backgrounds CMD, records its pid)
  local name=$1 logf=$2
  shift 2
  "$@" </dev/null >>"$logf" 2>&1 &
  PIDS[$name]="$! $(readlink -f "$(command -v "$1")")"
}
alive() {
  local pid bin
  [ -n "${PIDS[$1]:-}" ] || return 1
  read -r pid bin <<<"${PIDS[$1]}"
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null | sed 's/ (deleted)$//')" = "$bin" ]
}
stop() { # NAME: SIGTERM, then SIGKILL after 15 s
  local pid
  alive "$1" || { unset "PIDS[$1]"; return 0; }
  pid=${PIDS[$1]%% *}
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 150); do alive "$1" || break; sleep 0.1; done
  if alive "$1"; then kill -KILL "$pid" 2>/dev/null || true; sleep 0.2; fi
  unset "PIDS[$1]"
}

AS_PG=()
[ "$(id -u)" = 0 ] && AS_PG=(runuser -u postgres --)
cleanup() {
  local rc=$?
  if [ "$KEEP" = 1 ]; then
    log "INTEROP_KEEP=1: left running; state in $DIR"
    exit "$rc"
  fi
  for name in "${!PIDS[@]}"; do stop "$name"; done
  [ -f "$DIR/pg/data/postmaster.pid" ] && "${AS_PG[@]}" "$PG_BIN/pg_ctl" -D "$DIR/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  [ -f "$DIR/run/spoke/admin.kubeconfig" ] && RUN_ROOT=$DIR/run "$HERE/controlplane.sh" down spoke 2>/dev/null || true
  log "logs in $DIR/logs; results in $DIR/results.txt"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# wait_until DESCRIPTION CMD...: retries CMD every 0.2 s for $TIMEOUT s; 1 on timeout.
wait_until() {
  local what=$1 deadline=$((SECONDS + TIMEOUT))
  shift
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      log "timed out after ${TIMEOUT}s: $what"
      return 1
    fi
    sleep 0.2
  done
}

# ---------------------------------------------------------------------------------------------
# Binaries
build_maestro() {
  if [ ! -x "$MAESTRO_BIN" ]; then
    if [ ! -d "$MAESTRO_SRC" ]; then
      [ -d "$MAESTRO_REPO" ] || die "no Maestro repository at $MAESTRO_REPO (set MAESTRO_REPO or MAESTRO_SRC)"
      git -C "$MAESTRO_REPO" worktree add --detach "$MAESTRO_SRC" HEAD >&2
    fi
    mkdir -p "$(dirname "$MAESTRO_BIN")"
    log "building Maestro from $MAESTRO_SRC (Go modules from the proxy; a few minutes)"
    flock /tmp/maestro-build.lock sh -c "test -x '$MAESTRO_BIN' || (cd '$MAESTRO_SRC' && go build -o '$MAESTRO_BIN' ./cmd/maestro)" >&2
  fi
  MAESTRO_COMMIT=$(git -C "$MAESTRO_SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
}

build_agent() {
  if [ -z "${AGENT_BIN:-}" ]; then
    log "building work-agent (release)"
    (cd "$ROOT" && cargo build --release -p work-agent --bin work-agent) >&2
    local target
    target=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
    # A copy: other builds in the same target directory must not swap the binary mid-run.
    cp "$target/release/work-agent" "$DIR/work-agent"
    AGENT_BIN=$DIR/work-agent
  fi
  [ -x "$AGENT_BIN" ] || die "no agent binary at $AGENT_BIN"
  if [ -z "${AGENT_COMMIT:-}" ]; then
    AGENT_COMMIT=$(git -C "$ROOT" rev-parse --short HEAD)
    git -C "$ROOT" diff --quiet HEAD -- crates || AGENT_COMMIT="$AGENT_COMMIT+uncommitted"
  fi
}

# The AppliedManifestWork CRD of the OCM API module Maestro's agent is built with.
amw_crd() {
  if [ -n "${AMW_CRD:-}" ]; then echo "$AMW_CRD"; return; fi
  local api
  [ -d "$MAESTRO_SRC" ] || die "no Maestro source tree at $MAESTRO_SRC to take the AppliedManifestWork CRD from (set MAESTRO_SRC or AMW_CRD)"
  api=$(cd "$MAESTRO_SRC" && go list -m -f '{{.Dir}}' open-cluster-management.io/api) ||
    die "go list -m open-cluster-management.io/api failed in $MAESTRO_SRC"
  ls "$api"/work/v1/*appliedmanifestworks.crd.yaml
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL, mosquitto, spoke, Maestro
start_postgres() {
  PG_PORT=$(free_port)
  mkdir -p "$DIR/pg"
  [ "$(id -u)" = 0 ] && chown postgres "$DIR/pg"
  "${AS_PG[@]}" "$PG_BIN/initdb" -D "$DIR/pg/data" -U maestro --auth=trust -E UTF8 >"$DIR/logs/initdb.log" 2>&1 ||
    die "initdb failed (log: $DIR/logs/initdb.log)"
  "${AS_PG[@]}" "$PG_BIN/pg_ctl" -D "$DIR/pg/data" -l "$DIR/pg/postgres.log" -w \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -k $DIR/pg -c fsync=off" start >/dev/null ||
    die "PostgreSQL did not start (log: $DIR/pg/postgres.log)"
  "${AS_PG[@]}" "$PG_BIN/createdb" -h 127.0.0.1 -p "$PG_PORT" -U maestro maestro
  mkdir -p "$DIR/db"
  printf 127.0.0.1 >"$DIR/db/host"
  printf '%s' "$PG_PORT" >"$DIR/db/port"
  printf maestro >"$DIR/db/user"
  printf maestro >"$DIR/db/password"
  printf maestro >"$DIR/db/name"
  log "PostgreSQL on 127.0.0.1:$PG_PORT"
}
psql_maestro() { "${AS_PG[@]}" "$PG_BIN/psql" -h 127.0.0.1 -p "$PG_PORT" -U maestro -d maestro -qAt -c "$1"; }

start_mosquitto() {
  MQTT_PORT=$(free_port)
  mkdir -p "$DIR/mqtt"
  cat >"$DIR/mqtt/mosquitto.conf" <<CONF
listener $MQTT_PORT 127.0.0.1
allow_anonymous true
persistence false
max_packet_size $MQTT_MAX_PACKET
log_dest file $DIR/mqtt/mosquitto.log
log_type all
CONF
  # Running as root, mosquitto drops to its own user, which must be able to write the log.
  [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1 && chown -R mosquitto "$DIR/mqtt"
  run_mosquitto
  BROKER=127.0.0.1:$MQTT_PORT
  log "mosquitto on $BROKER"
}
run_mosquitto() {
  spawn mosquitto "$DIR/logs/mosquitto.out" "$(command -v mosquitto || echo /usr/sbin/mosquitto)" -c "$DIR/mqtt/mosquitto.conf"
  wait_until "mosquitto on $MQTT_PORT" bash -c "exec 3<>/dev/tcp/127.0.0.1/$MQTT_PORT" || die "mosquitto did not start"
}
# The largest PUBLISH payload mosquitto received from our agent (its log, log_type all).
largest_from_agent() {
  grep "Received PUBLISH from $CLIENT_ID-client" "$DIR/mqtt/mosquitto.log" | sed -E 's/.*\.\.\. \(([0-9]+) bytes\).*/\1/' | sort -n | tail -1
}

start_spoke() {
  SPOKE=$(RUN_ROOT=$DIR/run "$HERE/controlplane.sh" up spoke --minimal | tail -1)
  RUN_ROOT=$DIR/run "$HERE/controlplane.sh" install-crds spoke "$(amw_crd)"
  log "spoke: $SPOKE"
}
k() { kubectl --kubeconfig="$SPOKE" "$@"; }

write_configs() {
  cat >"$DIR/maestro-mqtt.yaml" <<YAML
brokerHost: $BROKER
topics:
  sourceEvents: sources/maestro/consumers/+/sourceevents
  agentEvents: sources/maestro/consumers/+/agentevents
YAML
  # The agent's secret as Maestro's agent chart writes it.
  cat >"$DIR/agent-mqtt.yaml" <<YAML
brokerHost: $BROKER
topics:
  sourceEvents: sources/maestro/consumers/$CLUSTER/sourceevents
  agentEvents: sources/maestro/consumers/$CLUSTER/agentevents
YAML
  HUB_HASH=$(printf '%s' "$BROKER" | sha256sum | cut -d' ' -f1)
}

DB_FLAGS=()
maestro_ports() {
  HTTP_PORT=$(free_port)
  GRPC_PORT=$(free_port)
  BROKER_PORT=$(free_port)
  METRICS_PORT=$(free_port)
  HEALTH_PORT=$(free_port)
  REST=http://127.0.0.1:$HTTP_PORT
  DB_FLAGS=(--db-host-file="$DIR/db/host" --db-port-file="$DIR/db/port" --db-user-file="$DIR/db/user"
    --db-password-file="$DIR/db/password" --db-name-file="$DIR/db/name" --db-sslmode=disable)
  MAESTRO_ENV=development "$MAESTRO_BIN" migration "${DB_FLAGS[@]}" >"$DIR/logs/migration.log" 2>&1 ||
    die "maestro migration failed (log: $DIR/logs/migration.log)"
}

# start_maestro [shared|broadcast]
start_maestro() {
  local mode=${1:-shared}
  MAESTRO_ENV=development spawn maestro "$DIR/logs/maestro-server.log" "$MAESTRO_BIN" server "${DB_FLAGS[@]}" \
    --message-broker-type=mqtt --message-broker-config-file="$DIR/maestro-mqtt.yaml" \
    --subscription-type="$mode" \
    --http-server-bindport="$HTTP_PORT" --grpc-server-bindport="$GRPC_PORT" \
    --grpc-broker-bindport="$BROKER_PORT" --metrics-server-bindport="$METRICS_PORT" \
    --health-check-server-bindport="$HEALTH_PORT" -v=4
  wait_until "Maestro REST on $HTTP_PORT" curl -sf "$REST/api/maestro/v1/consumers" || die "Maestro did not start (log: $DIR/logs/maestro-server.log)"
  log "Maestro server ($mode subscription) REST $REST gRPC 127.0.0.1:$GRPC_PORT"
}
stop_maestro() { stop maestro; }

maestro_cli() {
  MAESTRO_REST_URL=$REST MAESTRO_GRPC_SERVER_ADDRESS=127.0.0.1:$GRPC_PORT "$MAESTRO_BIN" "$@"
}

# ---------------------------------------------------------------------------------------------
# Agents: Maestro's chart command line, plus private listen addresses.
start_ours() {
  local http health
  http=$(free_port)
  health=$(free_port)
  OURS_METRICS=http://127.0.0.1:$http/metrics
  spawn ours "$DIR/logs/ours.log" "$AGENT_BIN" agent --consumer-name="$CLUSTER" \
    --workload-source-driver=mqtt --workload-source-config="$DIR/agent-mqtt.yaml" \
    --cloudevents-client-id="$CLIENT_ID" --kubeconfig="$SPOKE" -v=2 \
    --http-address="127.0.0.1:$http" --listen="127.0.0.1:$health"
  echo "----- started $(date +%T.%N)" >>"$DIR/logs/ours.log"
  log "our agent started (pid ${PIDS[ours]%% *})"
}
start_go() {
  spawn go "$DIR/logs/go-agent.log" "$MAESTRO_BIN" agent --consumer-name="$CLUSTER" \
    --workload-source-driver=mqtt --workload-source-config="$DIR/agent-mqtt.yaml" \
    --cloudevents-client-id="$CLIENT_ID" --kubeconfig="$SPOKE" -v=2 \
    --listen="127.0.0.1:$(free_port)"
  log "Maestro's Go agent started (pid ${PIDS[go]%% *})"
}
metric() { # NAME: the sum of a metric's samples at our agent's /metrics
  { curl -sf "$OURS_METRICS" || true; } | awk -v m="$1" '$1 == m || index($1, m "{") == 1 {s += $2} END {print s + 0}'
}

# ---------------------------------------------------------------------------------------------
# Bundles (Maestro's REST/gRPC API through its CLI)
# cm_manifest NAME VALUE: a ConfigMap in $NS
cm_manifest() {
  printf '{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"%s","namespace":"%s"},"data":{"key":"%s"}}' "$1" "$NS" "$2"
}
# deploy_manifest NAME: a Deployment (no controllers on the spoke: its status is patched by hand)
deploy_manifest() {
  printf '{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"%s","namespace":"%s"},"spec":{"replicas":1,"selector":{"matchLabels":{"app":"%s"}},"template":{"metadata":{"labels":{"app":"%s"}},"spec":{"containers":[{"name":"c","image":"registry.k8s.io/pause:3.10"}]}}}}' "$1" "$NS" "$1" "$1"
}
# Feedback on a ConfigMap: a scalar and a raw JSON value (Maestro's agent always enables
# RawFeedbackJsonString).
cm_feedback() {
  printf '[{"resourceIdentifier":{"group":"","resource":"configmaps","name":"%s","namespace":"%s"},"feedbackRules":[{"type":"JSONPaths","jsonPaths":[{"name":"key","path":".data.key"},{"name":"data","path":".data"}]}]}]' "$1" "$NS"
}
deploy_feedback() {
  printf '[{"resourceIdentifier":{"group":"apps","resource":"deployments","name":"%s","namespace":"%s"},"feedbackRules":[{"type":"WellKnownStatus"},{"type":"JSONPaths","jsonPaths":[{"name":"conditions","path":".status.conditions"}]}]}]' "$1" "$NS"
}

# apply_bundle FILE-STEM MANIFEST [MANIFEST_CONFIGS] [ID]: prints the bundle id
apply_bundle() {
  local stem=$1 manifest=$2 configs=${3:-[]} id=${4:-} f out
  f=$DIR/bundles/$stem.json
  jq -n --arg c "$CLUSTER" --arg id "$id" --argjson m "$manifest" --argjson mc "$configs" \
    '{consumer_name: $c, manifests: [$m], manifest_configs: $mc} + (if $id == "" then {} else {id: $id} end)' >"$f"
  out=$(maestro_cli resourcebundle apply -f "$f" 2>>"$DIR/logs/cli.log") || { log "apply $stem failed: $out"; return 1; }
  if [ -n "$id" ]; then echo "$id"; else sed -n 's/^ID: //p' <<<"$out"; fi
}
bundle() { curl -sf "$REST/api/maestro/v1/resource-bundles/$1"; }
bundle_code() { curl -s -o /dev/null -w '%{http_code}' "$REST/api/maestro/v1/resource-bundles/$1"; }
delete_bundle() { curl -sf -X DELETE -o /dev/null "$REST/api/maestro/v1/resource-bundles/$1"; }
# bundle_version ID: the version Maestro holds
bundle_version() { bundle "$1" | jq -r '.version'; }
# Maestro's view of a bundle's status (REST): a condition, the observed version, a feedback value.
cond() { bundle "$1" | jq -r --arg t "$2" '[.status.conditions[]? | select(.type == $t) | .status][0] // "none"'; }
observed() { bundle "$1" | jq -r '.status.ObservedVersion // 0'; }
feedback() {
  bundle "$1" | jq -c --arg n "$2" '[.status.resourceStatus[]?.statusFeedback.values[]? | select(.name == $n) | .fieldValue | (.integer // .string // .boolean // .jsonRaw)][0] // "none"'
}
# applied ID VERSION: Maestro shows Applied=True for VERSION
applied() { [ "$(bundle "$1" | jq -r '"\(.status.ObservedVersion // 0) \([.status.conditions[]? | select(.type == "Applied") | .status][0])"')" = "$2 True" ]; }
gone() { [ "$(bundle_code "$1")" = 404 ]; }
feedback_is() { [ "$(feedback "$1" "$2")" = "$3" ]; }
cm_value() { k get configmap -n "$NS" "$1" -o jsonpath='{.data.key}' 2>/dev/null; }
cm_is() { [ "$(cm_value "$1")" = "$2" ]; }
absent() { ! k get -n "$NS" "$1" >/dev/null 2>&1; }
amw_name() { echo "$HUB_HASH-$1"; }
amw_exists() { k get appliedmanifestwork "$(amw_name "$1")" >/dev/null 2>&1; }
amw_absent() { ! amw_exists "$1"; }
uid_of() { k get -n "$NS" "$1" -o jsonpath='{.metadata.uid}'; }

# snapshot FILE: "key uid resourceVersion deleting evicting content" for every ConfigMap and
# Deployment named interop-* and every AppliedManifestWork, sorted. `content` hashes the object
# without resourceVersion, managedFields, generation, status and our agent's applied-by label, so
# a write that changed anything else shows.
snapshot() {
  { k get configmaps,deployments -n "$NS" -o json; k get appliedmanifestworks -o json; } |
    python3 -c '
import hashlib, json, sys
text, pos, dec, out = sys.stdin.read(), 0, json.JSONDecoder(), []
while text[pos:].strip():
    while text[pos].isspace():
        pos += 1
    doc, pos = dec.raw_decode(text, pos)
    for o in doc["items"]:
        m, kind = o["metadata"], o["kind"]
        if kind != "AppliedManifestWork" and not m["name"].startswith("interop-"):
            continue
        c = json.loads(json.dumps(o))
        for f in ("resourceVersion", "managedFields", "generation"):
            c["metadata"].pop(f, None)
        labels = c["metadata"].pop("labels", None) or {}
        labels.pop("work.open-cluster-management.io/applied-by", None)
        if labels:
            c["metadata"]["labels"] = labels
        status = c.pop("status", None) or {}
        digest = hashlib.sha256(json.dumps(c, sort_keys=True).encode()).hexdigest()[:12]
        key = ("amw" if kind == "AppliedManifestWork" else kind) + "/" + m["name"]
        flags = [str("deletionTimestamp" in m).lower(), str("evictionStartTime" in status).lower()]
        out.append(" ".join([key, m["uid"], m["resourceVersion"], *flags, digest]))
print("\n".join(sorted(out)))' >"$1"
}
# compare BEFORE AFTER [strict]: prints what changed; 1 if any object was re-created, deleted or
# is being deleted, and with `strict` also if one was rewritten (a write that changed more than
# our agent's applied-by label).
compare() {
  python3 - "$1" "$2" "${3:-}" <<'PY'
import sys
def load(p):
    d = {}
    for line in open(p):
        key, uid, rv, deleting, evicting, digest = line.split()
        d[key] = (uid, rv, deleting == "true", evicting == "true", digest)
    return d
a, b, strict = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3] == "strict"
def short(k):
    kind, name = k.split("/", 1)
    return f"amw/…{name[-8:]}" if kind == "amw" else k
missing = [short(k) for k in a if k not in b]
recreated = [short(k) for k in a if k in b and a[k][0] != b[k][0]]
deleting = [short(k) for k in a if k in b and b[k][2]]
kept = [k for k in a if k in b and a[k][0] == b[k][0]]
written = [k for k in kept if a[k][1] != b[k][1]]
rewritten = [short(k) for k in written if a[k][4] != b[k][4]]
label_only = [short(k) for k in written if a[k][4] == b[k][4]]
print(f"objects={len(a)} same-uid={len(kept)} recreated={recreated} missing={missing} deleting={deleting} "
      f"written={len(written)} (applied-by label only: {label_only}; other changes: {rewritten})")
sys.exit(1 if missing or recreated or deleting or (strict and rewritten) else 0)
PY
}
# watch_window SECONDS BEFORE: polls the spoke every 0.5 s for SECONDS after an agent start;
# prints what it saw (and which AppliedManifestWorks had an evictionStartTime), 1 if any object
# from BEFORE was deleted, re-created or marked deleting.
watch_window() {
  local secs=$1 before=$2 end=$((SECONDS + $1)) polls=0 bad=0 f=$DIR/window.snap
  : >"$DIR/window.evicting"
  while [ "$SECONDS" -lt "$end" ]; do
    snapshot "$f"
    polls=$((polls + 1))
    awk '$5 == "true" {print substr($1, length($1) - 35)}' "$f" >>"$DIR/window.evicting"
    compare "$before" "$f" strict >/dev/null || { bad=1; compare "$before" "$f" strict >&2 || true; break; }
    sleep 0.5
  done
  echo "window=${secs}s polls=$polls evictionStartTime-seen-on=[$(sort -u "$DIR/window.evicting" | paste -sd, -)]"
  return "$bad"
}
# conds ID: the bundle's condition types, statuses and reasons at Maestro (work, then resources).
conds() {
  bundle "$1" | jq -c '[.status.conditions[]? | "\(.type)=\(.status)/\(.reason)"] + [.status.resourceStatus[]?.conditions[]? | "resource:\(.type)=\(.status)/\(.reason)"] | sort'
}

# ---------------------------------------------------------------------------------------------
# Scenarios. Each ends with result NAME PASS|FAIL FACTS.
declare -A ID=()

# The Go agent applies two works (a ConfigMap with scalar and raw-JSON feedback, a Deployment).
sc_go_applies() {
  local ok=PASS
  ID[sw-cm]=$(apply_bundle sw-cm "$(cm_manifest interop-sw-cm v1)" "$(cm_feedback interop-sw-cm)")
  ID[sw-deploy]=$(apply_bundle sw-deploy "$(deploy_manifest interop-sw-deploy)" "$(deploy_feedback interop-sw-deploy)")
  wait_until "sw-cm Applied" applied "${ID[sw-cm]}" 1 || ok=FAIL
  wait_until "sw-deploy Applied" applied "${ID[sw-deploy]}" 1 || ok=FAIL
  wait_until "sw-cm feedback key=v1" feedback_is "${ID[sw-cm]}" key '"v1"' || ok=FAIL
  GO_RAW=$(feedback "${ID[sw-cm]}" data)
  [ "$GO_RAW" != none ] || ok=FAIL
  GO_CONDS=$(conds "${ID[sw-cm]}")
  amw_exists "${ID[sw-cm]}" && amw_exists "${ID[sw-deploy]}" || ok=FAIL
  result go-agent-applies "$ok" "2 bundles Applied at Maestro (version 1); feedback key=$(feedback "${ID[sw-cm]}" key) data=$GO_RAW; conditions $GO_CONDS;" \
    "AppliedManifestWorks $(amw_name "${ID[sw-cm]}" | cut -c1-12)…-${ID[sw-cm]} and …-${ID[sw-deploy]}"
}

# switch NAME FROM TO VALUE: stop agent FROM, start agent TO on the same spoke; nothing is
# re-created or deleted in the window after the start; an update is applied and reported by TO
# with the feedback and conditions Maestro got from its Go agent.
switch() {
  local name=$1 from=$2 to=$3 value=$4 ok=PASS window facts switched before=$DIR/$1.before mid=$DIR/$1.mid after=$DIR/$1.after seq0 seq1 v raw c
  stop "$from"
  snapshot "$before"
  seq0=$(bundle "${ID[sw-cm]}" | jq -r .status.SequenceID)
  if [ "$to" = ours ]; then start_ours; else start_go; fi
  window=$(watch_window 20 "$before") || ok=FAIL
  snapshot "$mid"
  switched=$(compare "$before" "$mid" strict) || ok=FAIL
  v=$(($(bundle_version "${ID[sw-cm]}") + 1))
  apply_bundle sw-cm "$(cm_manifest interop-sw-cm "$value")" "$(cm_feedback interop-sw-cm)" "${ID[sw-cm]}" >/dev/null || ok=FAIL
  wait_until "sw-cm version $v Applied" applied "${ID[sw-cm]}" "$v" || ok=FAIL
  wait_until "sw-cm data $value on the spoke" cm_is interop-sw-cm "$value" || ok=FAIL
  wait_until "sw-cm feedback key=$value" feedback_is "${ID[sw-cm]}" key "\"$value\"" || ok=FAIL
  raw=$(feedback "${ID[sw-cm]}" data)
  c=$(conds "${ID[sw-cm]}")
  [ "$c" = "$GO_CONDS" ] || ok=FAIL
  seq1=$(bundle "${ID[sw-cm]}" | jq -r .status.SequenceID)
  [ "$seq1" != "$seq0" ] || ok=FAIL
  snapshot "$after"
  facts=$(compare "$before" "$after") || ok=FAIL
  # The raw JSON feedback has the same shape from both agents.
  [ "$(jq -c 'fromjson | keys' <<<"$raw" 2>/dev/null)" = "$(jq -c 'fromjson | keys' <<<"$GO_RAW" 2>/dev/null)" ] || ok=FAIL
  amw_exists "${ID[sw-cm]}" && amw_exists "${ID[sw-deploy]}" || ok=FAIL
  result "$name" "$ok" "$window; after the window: $switched;" \
    "update to version $v Applied and reported by the new agent (sequenceid $seq0 -> $seq1), feedback key=$(feedback "${ID[sw-cm]}" key) data=$raw," \
    "conditions $([ "$c" = "$GO_CONDS" ] && echo "as from the Go agent" || echo "$c (Go agent: $GO_CONDS)"); after the update: $facts"
}

sc_create() {
  local ok=PASS t0 ms amw
  t0=$(now)
  ID[a]=$(apply_bundle a "$(cm_manifest interop-a a1)")
  ID[b]=$(apply_bundle b "$(cm_manifest interop-b b1)")
  wait_until "a Applied" applied "${ID[a]}" 1 || ok=FAIL
  ms=$(ms_since "$t0")
  wait_until "b Applied" applied "${ID[b]}" 1 || ok=FAIL
  cm_is interop-a a1 || ok=FAIL
  # Our agent records its own ID (generated from the hub hash and the cluster name: two clusters'
  # agents on one spoke must not take each other's works); upstream's records the hub hash.
  OURS_ID=$(sed -n 's/.*agent ID agent_id=\([^ ]*\).*/\1/p' "$DIR/logs/ours.log" | tail -1)
  amw=$(k get appliedmanifestwork "$(amw_name "${ID[a]}")" -o json 2>/dev/null | jq -r '"\(.spec.hubHash == "'"$HUB_HASH"'") \(.spec.agentID == "'"$OURS_ID"'") \(.spec.manifestWorkName) \(.status.appliedResources | length)"') || ok=FAIL
  [ "$amw" = "true true ${ID[a]} 1" ] || ok=FAIL
  A_UID=$(uid_of configmap/interop-a)
  result create "$ok" "bundle a Applied=$(cond "${ID[a]}" Applied) Available=$(cond "${ID[a]}" Available) at Maestro ${ms} ms after the CLI call;" \
    "ConfigMap interop-a key=$(cm_value interop-a); AppliedManifestWork sha256(brokerHost)-<resource id> with hubHash=sha256(\"$BROKER\"), agentID=$OURS_ID (ours), manifestWorkName=resource id, 1 applied resource"
}

sc_update() {
  local ok=PASS
  apply_bundle a "$(cm_manifest interop-a a2)" "" "${ID[a]}" >/dev/null || ok=FAIL
  wait_until "a version 2 Applied" applied "${ID[a]}" 2 || ok=FAIL
  wait_until "interop-a data a2" cm_is interop-a a2 || ok=FAIL
  [ "$(uid_of configmap/interop-a)" = "$A_UID" ] || ok=FAIL
  result update "$ok" "version $(bundle_version "${ID[a]}"), ObservedVersion $(observed "${ID[a]}"), Applied=$(cond "${ID[a]}" Applied); ConfigMap key=$(cm_value interop-a), same uid"
}

sc_feedback() {
  local ok=PASS
  ID[f]=$(apply_bundle f "$(deploy_manifest interop-f)" "$(deploy_feedback interop-f)")
  wait_until "f Applied" applied "${ID[f]}" 1 || ok=FAIL
  k patch deployment -n "$NS" interop-f --subresource=status --type=merge \
    -p '{"status":{"replicas":1,"readyReplicas":1,"availableReplicas":1,"conditions":[{"type":"Available","status":"True","reason":"Interop","message":"set by hand"}]}}' >/dev/null
  wait_until "f feedback ReadyReplicas=1" feedback_is "${ID[f]}" ReadyReplicas 1 || ok=FAIL
  wait_until "f feedback conditions" bash -c "[ \"\$(curl -sf $REST/api/maestro/v1/resource-bundles/${ID[f]} | jq -r '[.status.resourceStatus[]?.statusFeedback.values[]? | select(.name == \"conditions\") | .fieldValue.jsonRaw][0] // \"\"' | jq -r '.[0].type' 2>/dev/null)\" = Available ]" || ok=FAIL
  result feedback "$ok" "Deployment status set on the spoke -> Maestro shows ReadyReplicas=$(feedback "${ID[f]}" ReadyReplicas)" \
    "AvailableReplicas=$(feedback "${ID[f]}" AvailableReplicas) conditions(jsonRaw)=$(feedback "${ID[f]}" conditions | cut -c1-80)…"
}

# delete_rounds NAME: create a bundle, wait Applied, DELETE over REST, wait for 404; N times.
delete_rounds() {
  local name=$1 ok=PASS i id t0 created=() deleted=()
  for i in $(seq "$DELETE_ROUNDS"); do
    t0=$(now)
    id=$(apply_bundle "$name-$i" "$(cm_manifest "interop-$name-$i" x)")
    wait_until "$name-$i Applied" applied "$id" 1 || ok=FAIL
    created+=("$(ms_since "$t0")")
    t0=$(now)
    delete_bundle "$id" || ok=FAIL
    wait_until "$name-$i gone from Maestro" gone "$id" || ok=FAIL
    deleted+=("$(ms_since "$t0")")
    absent "configmap/interop-$name-$i" || ok=FAIL
    amw_absent "$id" || ok=FAIL
  done
  result "$name" "$ok" "$DELETE_ROUNDS rounds: create -> Applied at Maestro ms [${created[*]}];" \
    "REST DELETE -> 404 (Deleted accepted, hard delete) ms [${deleted[*]}]; ConfigMaps and AppliedManifestWorks gone"
}

# Agent down: a updated, b deleted, c created; agent started: all converge.
sc_spec_resync() {
  local ok=PASS t0 ms soft
  stop ours
  apply_bundle a "$(cm_manifest interop-a a3)" "" "${ID[a]}" >/dev/null || ok=FAIL
  delete_bundle "${ID[b]}" || ok=FAIL
  ID[c]=$(apply_bundle c "$(cm_manifest interop-c c1)")
  soft=$(bundle "${ID[b]}" | jq -r '.deleted_at != null')
  t0=$(now)
  start_ours
  wait_until "a version 3 Applied" applied "${ID[a]}" 3 || ok=FAIL
  wait_until "interop-a data a3" cm_is interop-a a3 || ok=FAIL
  wait_until "b gone" gone "${ID[b]}" || ok=FAIL
  wait_until "interop-b deleted" absent configmap/interop-b || ok=FAIL
  wait_until "c Applied" applied "${ID[c]}" 1 || ok=FAIL
  ms=$(ms_since "$t0")
  amw_absent "${ID[b]}" || ok=FAIL
  [ "$(uid_of configmap/interop-a)" = "$A_UID" ] || ok=FAIL
  result spec-resync "$ok" "while the agent was down: a updated, b deleted (soft-deleted at Maestro: $soft), c created;" \
    "agent started -> a v3 applied (same uid), b gone from Maestro and the spoke, c Applied: ${ms} ms after the start"
}

# each_filler FN: `FN i` for every filler work i, eight at a time (the jobs waited by pid: the
# servers this script started are its children too).
each_filler() {
  local jobs=() i
  for i in $(seq 1 "$FILLER"); do
    "$1" "$i" &
    jobs+=($!)
    [ "${#jobs[@]}" -lt 8 ] || { wait "${jobs[@]}"; jobs=(); }
  done
  [ "${#jobs[@]}" = 0 ] || wait "${jobs[@]}"
}
apply_filler() { apply_bundle "fill-$1" "$(cm_manifest "interop-fill-$1" v1)" >"$DIR/bundles/fill-$1.id"; }
delete_filler() { delete_bundle "$(cat "$DIR/bundles/fill-$1.id")"; }
filler_configmaps() { k get configmap -n "$NS" --no-headers 2>/dev/null | grep -c '^interop-fill-' || true; }

# Many works: FILLER bundles of one ConfigMap each through Maestro, all applied by our agent.
sc_filler_apply() {
  local ok=PASS t0 ms i have
  t0=$(now)
  each_filler apply_filler
  fillers_applied() { [ "$(filler_configmaps)" -ge "$FILLER" ]; }
  TIMEOUT=$((FILLER / 5 + 120)) wait_until "$FILLER filler ConfigMaps" fillers_applied || ok=FAIL
  for i in 1 $((FILLER / 2)) "$FILLER"; do
    wait_until "fill-$i Applied" applied "$(cat "$DIR/bundles/fill-$i.id")" 1 || ok=FAIL
  done
  ms=$(ms_since "$t0")
  have=$(filler_configmaps)
  result many-works "$ok" "$FILLER bundles created through Maestro (broker max_packet_size $MQTT_MAX_PACKET):" \
    "$have ConfigMaps on the spoke, the first, middle and last bundle Applied at Maestro, ${ms} ms"
}

# With the many works held: the broker restarts while a work is updated and another deleted at
# Maestro. The agent's spec resync request cannot list every work under the ceiling: it lists
# what fits, Maestro sends the rest back, and both changes arrive.
sc_broker_restart() {
  local ok=PASS t0 ms largest unconfirmed
  stop mosquitto
  apply_bundle a "$(cm_manifest interop-a a4)" "" "${ID[a]}" >/dev/null || ok=FAIL
  delete_bundle "${ID[c]}" || ok=FAIL
  t0=$(now)
  run_mosquitto
  wait_until "a version 4 Applied" applied "${ID[a]}" 4 || ok=FAIL
  wait_until "interop-a data a4" cm_is interop-a a4 || ok=FAIL
  wait_until "c gone" gone "${ID[c]}" || ok=FAIL
  wait_until "interop-c deleted" absent configmap/interop-c || ok=FAIL
  ms=$(ms_since "$t0")
  grep -q "the broker's ceiling leaves works out" "$DIR/logs/ours.log" || ok=FAIL
  largest=$(largest_from_agent)
  [ "${largest:-0}" -le "$MQTT_MAX_PACKET" ] || ok=FAIL
  unconfirmed=$({ curl -sf "$OURS_METRICS" || true; } | awk '$1 == "work_agent_source_desync_total{kind=\"unconfirmed\"}" {print $2}')
  unconfirmed=${unconfirmed:-0}
  [ "$unconfirmed" = 0 ] || ok=FAIL
  result broker-restart "$ok" "mosquitto restarted with $((FILLER + 3)) works held while a was updated and c deleted:" \
    "a v4 applied, c gone from Maestro and the spoke ${ms} ms after the broker was back; the request listed what fits;" \
    "largest payload from the agent at the broker $largest bytes (ceiling $MQTT_MAX_PACKET); desync counted $unconfirmed"
}

# The many works deleted through Maestro's REST API, all at once.
sc_filler_delete() {
  local ok=PASS t0 ms i
  t0=$(now)
  each_filler delete_filler
  fillers_gone() { [ "$(filler_configmaps)" = 0 ]; }
  TIMEOUT=$((FILLER / 5 + 120)) wait_until "filler ConfigMaps deleted" fillers_gone || ok=FAIL
  wait_until "the last filler bundle gone at Maestro" gone "$(cat "$DIR/bundles/fill-$FILLER.id")" || ok=FAIL
  ms=$(ms_since "$t0")
  result many-works-deleted "$ok" "$FILLER bundles deleted through Maestro: every ConfigMap gone, the last bundle hard-deleted, ${ms} ms"
}

# A work hard-deleted at Maestro while the agent is down: after the start its AppliedManifestWork
# is only marked for eviction (grace period 60 min), nothing is deleted.
sc_no_eviction() {
  local ok=PASS cmuid amw
  ID[e]=$(apply_bundle e "$(cm_manifest interop-e e1)")
  wait_until "e Applied" applied "${ID[e]}" 1 || ok=FAIL
  cmuid=$(uid_of configmap/interop-e)
  stop ours
  psql_maestro "DELETE FROM resources WHERE id = '${ID[e]}'" >/dev/null || ok=FAIL
  start_ours
  wait_until "e's AppliedManifestWork marked for eviction" bash -c \
    "kubectl --kubeconfig='$SPOKE' get appliedmanifestwork '$(amw_name "${ID[e]}")' -o jsonpath='{.status.evictionStartTime}' | grep -q ." || ok=FAIL
  sleep 5
  amw=$(k get appliedmanifestwork "$(amw_name "${ID[e]}")" -o json | jq -r '"evictionStartTime=\(.status.evictionStartTime) deleting=\(.metadata.deletionTimestamp != null)"') || ok=FAIL
  [ "$(uid_of configmap/interop-e)" = "$cmuid" ] || ok=FAIL
  case "$amw" in *deleting=false) ;; *) ok=FAIL ;; esac
  result restart-no-eviction "$ok" "bundle e removed from Maestro's database while the agent was down; after the start:" \
    "its AppliedManifestWork $amw, ConfigMap interop-e kept (same uid); eviction only after the 60 min grace period"
}

# Maestro down while a status changes; Maestro restarted (broadcast subscription: its status
# resync request is addressed to the consumer's name) -> the agent answers, the change arrives.
sc_status_resync() {
  local ok=PASS r0 r1 r2
  r0=$(metric resources_status_resync_duration_seconds_count)
  stop_maestro
  k patch deployment -n "$NS" interop-f --subresource=status --type=merge \
    -p '{"status":{"replicas":2,"readyReplicas":2,"availableReplicas":2}}' >/dev/null
  sleep 3
  start_maestro broadcast
  wait_until "f feedback ReadyReplicas=2 after Maestro's restart" feedback_is "${ID[f]}" ReadyReplicas 2 || ok=FAIL
  r1=$(metric resources_status_resync_duration_seconds_count)
  [ "$r1" -gt "$r0" ] || ok=FAIL
  result status-resync "$ok" "status changed while Maestro was down (ReadyReplicas 1 -> 2); Maestro restarted with --subscription-type=broadcast:" \
    "status resync requests answered by the agent $r0 -> $r1, Maestro shows ReadyReplicas=$(feedback "${ID[f]}" ReadyReplicas)"
  # Back to Maestro's default (shared) subscription, the same change while it is down. Its
  # resync request goes to the consumer's id there, so the agent never sees it: recorded as a
  # fact about Maestro, not checked.
  stop_maestro
  k patch deployment -n "$NS" interop-f --subresource=status --type=merge \
    -p '{"status":{"replicas":3,"readyReplicas":3,"availableReplicas":3}}' >/dev/null
  sleep 3
  start_maestro shared
  sleep 15
  r2=$(metric resources_status_resync_duration_seconds_count)
  SHARED_RESYNC="status resync requests answered by the agent $r1 -> $r2; ReadyReplicas 2 -> 3 on the spoke while Maestro was down, Maestro shows $(feedback "${ID[f]}" ReadyReplicas) 15 s after its start"
  log "Maestro restarted with the shared subscription: $SHARED_RESYNC"
}

sc_go_deletes_ours() {
  local ok=PASS
  delete_bundle "${ID[c]}" || ok=FAIL
  wait_until "c gone" gone "${ID[c]}" || ok=FAIL
  wait_until "interop-c deleted" absent configmap/interop-c || ok=FAIL
  amw_absent "${ID[c]}" || ok=FAIL
  result go-deletes-ours "$ok" "bundle c (applied by our agent) deleted with the Go agent running: gone from Maestro, ConfigMap and AppliedManifestWork gone"
}

# ---------------------------------------------------------------------------------------------
main() {
  command -v jq >/dev/null || die "jq is required"
  command -v kubectl >/dev/null || die "kubectl is required"
  build_maestro
  build_agent
  log "state in $DIR; Maestro $MAESTRO_COMMIT; agent $AGENT_COMMIT"
  start_postgres
  start_mosquitto
  write_configs
  start_spoke
  maestro_ports
  start_maestro shared
  maestro_cli consumer create "$CLUSTER" >>"$DIR/logs/cli.log" 2>&1 || die "consumer create failed (log: $DIR/logs/cli.log)"

  start_go
  sc_go_applies
  switch switch-go-to-ours go ours v2
  [ "$FILLER" = 0 ] || sc_filler_apply
  sc_create
  sc_update
  sc_feedback
  delete_rounds delete-ours
  sc_spec_resync
  sc_no_eviction
  sc_status_resync
  if [ "$FILLER" != 0 ]; then
    sc_broker_restart
    sc_filler_delete
  fi
  switch switch-ours-to-go ours go v3
  sc_go_deletes_ours
  delete_rounds delete-go

  {
    echo "date: $(date -u +%FT%TZ)  agent: $AGENT_COMMIT  Maestro: $MAESTRO_COMMIT  broker: $BROKER"
    echo "Maestro restarted with its default (shared) subscription: $SHARED_RESYNC"
  } | tee -a "$DIR/results.txt"
  if [ "$FAILED" -gt 0 ]; then
    log "$FAILED scenario(s) FAILED; logs in $DIR/logs"
    return 1
  fi
  log "all scenarios passed"
}

main "$@"
