# shellcheck shell=bash
# ocm-grpc-env.sh: sourced by interop-ocm-grpc.sh, interop-maestro-grpc.sh and bench-grpc.sh. A private OCM hub served over
# CloudEvents gRPC by OCM's own `server grpc` (built by ocm-bins.sh), a spoke, and one work agent
# (ours or upstream's `work agent`) with --workload-source-driver=grpc:
#
#   hub    minimal control plane (etcd + kube-apiserver), OCM's hub CRDs; ManifestWorks are
#          created here with kubectl, as on any OCM hub
#   server `server grpc --server-config=...`: TLS (its own CA), agents authenticate with a bearer
#          token (TokenReview on the hub) and are authorised by SubjectAccessReview
#   spoke  minimal control plane, the AppliedManifestWork CRD
#   agent  the config file upstream's agent reads: url, caFile, tokenFile
#
# Everything lives under $GE_DIR (a fresh temp dir) and on free loopback ports; ge_down stops
# exactly the processes ge_up and ge_agent_start started.
#
# Needs: HERE (the scripts dir), ROOT (the repository), OCM_MIRROR or cached OCM binaries.

# shellcheck source=e2e/scripts/pki.sh
. "$HERE/pki.sh"

GE_CLUSTER=${GE_CLUSTER:-cluster1}
GE_DIR="" GE_BINS="" GE_HUB_KC="" GE_SPOKE_KC="" GE_URL="" GE_SERVER_PID="" GE_AGENT_PID=""
GE_AGENT_LOG="" GE_AGENT_N=0 GE_CP_UP=()
GE_CRDS=${GE_CRDS:-$ROOT/e2e/upstream-crds}

ge_log() { printf '[%s %s] %s\n' "${GE_NAME:-ocm-grpc}" "$(date +%H:%M:%S)" "$*" >&2; }
ge_die() { ge_log "ERROR: $*"; exit 1; }

ge_free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# hubctl/spokectl ARGS...: kubectl against the hub / the spoke as admin.
hubctl() { kubectl --kubeconfig="$GE_HUB_KC" "$@"; }
spokectl() { kubectl --kubeconfig="$GE_SPOKE_KC" "$@"; }

# ge_wait SECONDS DESCRIPTION CMD...: retries CMD every 0.2 s; fails with DESCRIPTION on timeout.
ge_wait() {
  local secs=$1 what=$2 deadline
  shift 2
  deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    [ "$SECONDS" -lt "$deadline" ] || { ge_log "timed out after ${secs}s waiting for $what"; return 1; }
    sleep 0.2
  done
}

# Stops a pid we started: SIGTERM, then SIGKILL after 10 s.
# ge_interop_args HELP_END ARGS...: the interop scripts' command line: --flavor F (FLAVOR, default
# ours), --agent-bin B (BIN), --keep (KEEP=1); -h prints the script's lines 2 to HELP_END. Sets T,
# the wait of each step (INTEROP_TIMEOUT, default 90 s).
ge_interop_args() {
  local help_end=$1
  shift
  FLAVOR=ours BIN="" KEEP=0
  while [ $# -gt 0 ]; do
    case "$1" in
      --flavor) FLAVOR=$2; shift 2 ;;
      --agent-bin) BIN=$2; shift 2 ;;
      --keep) KEEP=1; shift ;;
      -h | --help) sed -n "2,${help_end}p" "$0"; exit 0 ;;
      *) echo "$(basename "$0"): unknown argument $1" >&2; exit 2 ;;
    esac
  done
  T=${INTEROP_TIMEOUT:-90}
}

# ge_remove_dir RC: removes $GE_DIR after a run that exited with RC 0, unless KEEP=1; else says
# where it is (its logs tell what happened).
ge_remove_dir() {
  if [ "${KEEP:-0}" = 0 ] && [ "$1" = 0 ] && [ -n "$GE_DIR" ]; then rm -rf "$GE_DIR"; else ge_log "kept $GE_DIR"; fi
}

# ge_exit: the exit trap of a script that only runs what ge_up started (trap ge_exit EXIT INT
# TERM): everything stopped, the directory removed as ge_remove_dir says, the exit code kept.
ge_exit() {
  local rc=$?
  ge_down
  ge_remove_dir "$rc"
  exit "$rc"
}

ge_stop_pid() {
  local pid=$1
  [ -n "$pid" ] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

ge_down() {
  ge_agent_stop
  ge_stop_pid "$GE_SERVER_PID"
  GE_SERVER_PID=""
  local n
  for n in "${GE_CP_UP[@]}"; do
    RUN_ROOT="$GE_DIR/run" "$HERE/controlplane.sh" down "$n" >/dev/null 2>&1 || true
  done
  GE_CP_UP=()
}

# OCM's hub CRDs beyond ManifestWork, from the OCM repository at the ref the binaries come from:
# the server watches ManagedClusters and ManagedClusterAddOns too, and logs list errors without them.
ge_extra_hub_crds() {
  local out=$1 ref=${OCM_REF:-v1.3.1} p
  mkdir -p "$out"
  [ -n "${OCM_MIRROR:-}" ] || return 0
  for p in cluster/v1/0000_00_clusters.open-cluster-management.io_managedclusters.crd.yaml \
    addon/v1alpha1/0000_01_addon.open-cluster-management.io_managedclusteraddons.crd.yaml; do
    git -C "$OCM_MIRROR" show "$ref:vendor/open-cluster-management.io/api/$p" >"$out/$(basename "$p")" 2>/dev/null ||
      rm -f "$out/$(basename "$p")"
  done
}

# The server's TLS material: a CA and a serving certificate for 127.0.0.1 (pki.sh).
ge_pki() {
  mkdir -p "$GE_DIR/pki"
  (
    cd "$GE_DIR/pki"
    pki_ca 2 ocm-grpc-interop-ca
    pki_leaf server 2 /CN=ocm-grpc-server serverAuth IP:127.0.0.1,DNS:localhost
  ) >"$GE_DIR/pki.log" 2>&1 || ge_die "openssl failed: $GE_DIR/pki.log"
}

# The agent's identity on the hub: a ServiceAccount in the cluster namespace with what the
# server's SubjectAccessReviews ask for (watch/list works, update their status), and a token.
ge_agent_identity() {
  hubctl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Namespace
metadata: {name: $GE_CLUSTER}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: work-agent, namespace: $GE_CLUSTER}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: work-agent, namespace: $GE_CLUSTER}
rules:
- apiGroups: [work.open-cluster-management.io]
  resources: [manifestworks]
  verbs: [get, list, watch, update, patch]
- apiGroups: [work.open-cluster-management.io]
  resources: [manifestworks/status]
  verbs: [update, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: work-agent, namespace: $GE_CLUSTER}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: work-agent}
subjects:
- {kind: ServiceAccount, name: work-agent, namespace: $GE_CLUSTER}
EOF
  umask 077
  hubctl -n "$GE_CLUSTER" create token work-agent --duration=24h >"$GE_DIR/agent.token"
  umask 022
  [ -s "$GE_DIR/agent.token" ] || ge_die "no token for the agent's ServiceAccount"
}

# ge_up: control planes, CRDs, PKI, server. Sets GE_HUB_KC, GE_SPOKE_KC, GE_URL.
ge_up() {
  GE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/${GE_NAME:-ocm-grpc}.XXXXXX")
  ge_log "state in $GE_DIR"
  GE_BINS=$("$HERE/ocm-bins.sh") || ge_die "no OCM binaries (set OCM_MIRROR)"
  local n
  for n in hub spoke; do
    GE_CP_UP+=("$n")
    RUN_ROOT="$GE_DIR/run" "$HERE/controlplane.sh" up "$n" --minimal >/dev/null 2>"$GE_DIR/controlplane-$n.log" ||
      { tail -20 "$GE_DIR/controlplane-$n.log" >&2; ge_die "control plane $n did not start"; }
  done
  GE_HUB_KC=$GE_DIR/run/hub/admin.kubeconfig
  GE_SPOKE_KC=$GE_DIR/run/spoke/admin.kubeconfig
  ge_extra_hub_crds "$GE_DIR/hub-crds"
  RUN_ROOT="$GE_DIR/run" "$HERE/controlplane.sh" install-crds hub \
    "$GE_CRDS/0000_00_work.open-cluster-management.io_manifestworks.crd.yaml" "$GE_DIR/hub-crds" >/dev/null 2>&1 ||
    ge_die "installing the hub CRDs failed"
  RUN_ROOT="$GE_DIR/run" "$HERE/controlplane.sh" install-crds spoke \
    "$GE_CRDS/0000_01_work.open-cluster-management.io_appliedmanifestworks.crd.yaml" >/dev/null 2>&1 ||
    ge_die "installing the spoke CRD failed"
  ge_pki
  ge_agent_identity

  local gport lport
  gport=$(ge_free_port)
  lport=$(ge_free_port)
  GE_URL=127.0.0.1:$gport
  cat >"$GE_DIR/server-config.yaml" <<EOF
tls_cert_file: $GE_DIR/pki/server.crt
tls_key_file: $GE_DIR/pki/server.key
client_ca_file: $GE_DIR/pki/ca.crt
server_bind_port: "$gport"
EOF
  # As the cluster-manager runs it (grpc-server deployment), with the hub admin's kubeconfig and a
  # private port for its own health/metrics listener.
  "$GE_BINS/server" grpc --server-config="$GE_DIR/server-config.yaml" --kubeconfig="$GE_HUB_KC" \
    --namespace=open-cluster-management-hub --listen="127.0.0.1:$lport" -v=2 \
    </dev/null >"$GE_DIR/server.log" 2>&1 &
  GE_SERVER_PID=$!
  ge_wait 60 "OCM's gRPC server on $GE_URL" \
    sh -c "openssl s_client -connect $GE_URL -CAfile $GE_DIR/pki/ca.crt </dev/null 2>/dev/null | grep -q 'Verify return code: 0'" ||
    { tail -20 "$GE_DIR/server.log" >&2; ge_die "OCM's gRPC server did not come up"; }
  ge_log "OCM server grpc on $GE_URL (pid $GE_SERVER_PID, log $GE_DIR/server.log)"

  cat >"$GE_DIR/agent-config.yaml" <<EOF
url: $GE_URL
caFile: $GE_DIR/pki/ca.crt
tokenFile: $GE_DIR/agent.token
EOF
  spokectl create namespace interop >/dev/null
}

# The hub hash upstream derives for a gRPC source: sha256 of the configured url.
ge_hub_hash() { printf '%s' "$GE_URL" | sha256sum | cut -d' ' -f1; }

# ge_agent_start FLAVOR BIN [EXTRA...]: FLAVOR ours (work-agent) or upstream (OCM's `work`), with
# the command line the klusterlet gives upstream's agent in gRPC mode.
ge_agent_start() {
  local flavor=$1 bin=$2
  shift 2
  GE_AGENT_N=$((GE_AGENT_N + 1))
  GE_AGENT_LOG=$GE_DIR/agent-$GE_AGENT_N-$flavor.log
  local args=(agent --spoke-cluster-name="$GE_CLUSTER" --workload-source-driver=grpc
    --workload-source-config="$GE_DIR/agent-config.yaml" --cloudevents-client-id="$GE_CLUSTER-work-agent"
    --spoke-kubeconfig="$GE_SPOKE_KC" --disable-leader-election
    --status-sync-interval="${GE_STATUS_SYNC:-10s}")
  case "$flavor" in
    upstream) args+=(--kubeconfig="$GE_SPOKE_KC" --listen="127.0.0.1:$(ge_free_port)") ;;
    ours) args+=(--http-address=127.0.0.1:0 --health-address=127.0.0.1:0) ;;
    *) ge_die "unknown agent flavor $flavor" ;;
  esac
  args+=("$@")
  echo "$bin ${args[*]}" >"$GE_AGENT_LOG"
  "$bin" "${args[@]}" </dev/null >>"$GE_AGENT_LOG" 2>&1 &
  GE_AGENT_PID=$!
  ge_log "agent $flavor started (pid $GE_AGENT_PID, log $GE_AGENT_LOG)"
}

ge_agent_stop() {
  [ -n "$GE_AGENT_PID" ] || return 0
  ge_stop_pid "$GE_AGENT_PID"
  wait "$GE_AGENT_PID" 2>/dev/null || true
  GE_AGENT_PID=""
}
