#!/usr/bin/env bash
# Start and stop a local Kubernetes control plane on free loopback ports.
#
#   controlplane.sh up NAME [--minimal]   etcd + kube-apiserver (RBAC); without --minimal also
#                                         kube-controller-manager, kube-scheduler, kwok + one Ready node
#   controlplane.sh down NAME             stop exactly the processes `up NAME` started
#   controlplane.sh status NAME           exit 0 when every saved process runs and the apiserver is ready
#   controlplane.sh install-crds NAME PATH...   server-side apply CRD files/dirs, wait for Established
#   controlplane.sh stop-apiserver NAME   stop only kube-apiserver (etcd and the rest keep running)
#   controlplane.sh start-apiserver NAME  start it again: same port, certs, flags and etcd
#   controlplane.sh restart-apiserver NAME   stop-apiserver then start-apiserver
#
# State lives in $RUN_ROOT/NAME (default: <repo>/.run/NAME): admin.kubeconfig, pki/, *.pid, *.log.
# etcd data goes to /dev/shm when present (tmpfs: fsync-free and fast). `up` is idempotent: a healthy
# running control plane of that NAME is reused; a half-dead one is stopped and started afresh.
# The admin kubeconfig path is the last line printed on stdout; progress goes to stderr.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=e2e/scripts/pki.sh
. "$HERE/pki.sh"
RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
# Seconds to wait for each readiness step; 2-core machines that also compile Rust need generous limits.
READY_TIMEOUT=${CONTROLPLANE_READY_TIMEOUT:-120}
# Processes in start order; `down` stops them in reverse.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)

usage() {
  sed -n '2,16p' "${BASH_SOURCE[0]}" >&2
  exit 2
}

NAME=""
log() { printf '[controlplane %s] %s\n' "${NAME:-?}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

kubectl_bin() {
  if [ -n "${BIN:-}" ] && [ -x "$BIN/kubectl" ]; then echo "$BIN/kubectl"; return; fi
  command -v kubectl || die "kubectl not found on PATH (needed to create the node and install CRDs)"
}

free_port() {
  python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'
}

# Prints the last lines of a component's log so a failure explains itself.
log_tail() {
  local f="$RUN/$1.log"
  if [ -f "$f" ]; then
    printf -- '----- last 40 lines of %s -----\n' "$f" >&2
    tail -n 40 "$f" >&2 || true
    printf -- '----- end of %s -----\n' "$f" >&2
  fi
}

# The pid file holds "PID BINARY"; a pid counts as ours only while /proc says it still runs BINARY,
# so a recycled pid is never killed.
pid_alive() {
  local name=$1 pid bin exe
  [ -f "$RUN/$name.pid" ] || return 1
  read -r pid bin <"$RUN/$name.pid" || return 1
  [ -n "$pid" ] && [ -n "$bin" ] || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  [ "${exe% (deleted)}" = "$bin" ]
}

saved_pid() { awk '{print $1}' "$RUN/$1.pid"; }

start() {
  local name=$1 bin=$2
  shift 2
  # stdin closed, output in a file and the lock fd closed: the process must not hold the caller's
  # terminal, pipes or the per-NAME lock open.
  "$bin" "$@" </dev/null >"$RUN/$name.log" 2>&1 9>&- &
  echo "$! $(readlink -f "$bin")" >"$RUN/$name.pid"
}

# wait_until NAME DESCRIPTION CMD...: retries CMD every second; fails early if NAME's process died.
wait_until() {
  local name=$1 what=$2 deadline=$((SECONDS + READY_TIMEOUT))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if ! pid_alive "$name"; then
      log_tail "$name"
      die "$name exited while waiting for $what (log: $RUN/$name.log)"
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      log_tail "$name"
      die "timed out after ${READY_TIMEOUT}s waiting for $what (log: $RUN/$name.log)"
    fi
    sleep 0.2
  done
}

url_has() { curl -sk --max-time 5 "$1" | grep -q "$2"; }

# The CA, the API server's serving certificate, the admin's client certificate and the
# ServiceAccount signing key (pki.sh: ECDSA P-256).
make_pki() {
  local p=$RUN/pki
  local sans=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default
  sans=$sans,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
  mkdir -p "$p"
  (
    cd "$p"
    pki_ca 3650 "work-agent-test-ca-$NAME"
    pki_leaf apiserver 3650 /CN=kube-apiserver serverAuth "$sans" digitalSignature,keyEncipherment
    pki_leaf admin 3650 /O=system:masters/CN=kubernetes-admin clientAuth "" digitalSignature,keyEncipherment
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sa.key
    openssl pkey -in sa.key -pubout -out sa.pub
  ) >"$RUN/pki.log" 2>&1 || { log_tail pki; die "creating the PKI with openssl failed"; }
}

write_kubeconfig() {
  local api_port=$1 k=$RUN/admin.kubeconfig
  b64() { base64 -w0 <"$1"; }
  umask 077
  cat >"$k" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: $NAME
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority-data: $(b64 "$RUN/pki/ca.crt")
users:
- name: $NAME-admin
  user:
    client-certificate-data: $(b64 "$RUN/pki/admin.crt")
    client-key-data: $(b64 "$RUN/pki/admin.key")
contexts:
- name: $NAME
  context:
    cluster: $NAME
    user: $NAME-admin
current-context: $NAME
EOF
  umask 022
}

etcd_data_dir() {
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then
    # Keyed by user, repo path and NAME so two checkouts or two control planes never share data.
    echo "/dev/shm/work-agent-$(id -u)-$(printf '%s' "$RUN" | cksum | cut -d' ' -f1)-$NAME-etcd"
  else
    echo "$RUN/etcd-data"
  fi
}

status() {
  local c any=0
  [ -f "$RUN/admin.kubeconfig" ] || return 1
  for c in "${COMPONENTS[@]}"; do
    [ -f "$RUN/$c.pid" ] || continue
    any=1
    pid_alive "$c" || return 1
  done
  [ "$any" = 1 ] || return 1
  local server
  server=$(sed -n 's/^ *server: *//p' "$RUN/admin.kubeconfig" | head -1)
  url_has "$server/readyz" '^ok'
}

down() {
  local c i pid
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    c=${COMPONENTS[$i]}
    [ -f "$RUN/$c.pid" ] || continue
    if pid_alive "$c"; then
      pid=$(saved_pid "$c")
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do pid_alive "$c" || break; sleep 0.1; done
      if pid_alive "$c"; then
        log "$c (pid $pid) ignored SIGTERM for 10s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
      fi
      log "stopped $c (pid $pid)"
    fi
    rm -f "$RUN/$c.pid"
  done
  if [ -f "$RUN/etcd-data-dir" ]; then
    rm -rf "$(cat "$RUN/etcd-data-dir")"
    rm -f "$RUN/etcd-data-dir"
  fi
  # Logs stay for post-mortems; credentials and endpoints go.
  rm -rf "$RUN/pki" "$RUN/admin.kubeconfig" "$RUN/apiserver" "$RUN/endpoints" "$RUN/mode" "$RUN/kube-apiserver.args"
}

create_node() {
  "$KUBECTL" --kubeconfig="$RUN/admin.kubeconfig" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-0
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: kwok-node-0, kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}
YAML
}

node_ready() {
  "$KUBECTL" --kubeconfig="$RUN/admin.kubeconfig" get node kwok-node-0 \
    -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null | grep -q True
}

# The serviceaccount controller creating `default` in `default` shows the controller-manager is
# connected and running its controllers.
kcm_working() {
  "$KUBECTL" --kubeconfig="$RUN/admin.kubeconfig" get serviceaccount default -n default >/dev/null 2>&1
}

up() {
  local minimal=$1 t0=$SECONDS
  # Reuse only a control plane of the requested kind (a minimal one lacks the controllers).
  if status && [ "$(cat "$RUN/mode" 2>/dev/null)" = "minimal=$minimal" ]; then
    log "already running"
    echo "$RUN/admin.kubeconfig"
    return 0
  fi
  down 2>/dev/null || true
  BIN=$("$HERE/build-controlplane.sh") || die "building the control-plane binaries failed"
  KUBECTL=$(kubectl_bin)
  command -v openssl >/dev/null || die "openssl is required"
  command -v curl >/dev/null || die "curl is required"
  command -v python3 >/dev/null || die "python3 is required (free port lookup)"
  mkdir -p "$RUN" "$RUN/apiserver"
  rm -f "$RUN"/*.log
  echo "minimal=$minimal" >"$RUN/mode"

  local etcd_port peer_port api_port data
  etcd_port=$(free_port)
  peer_port=$(free_port)
  api_port=$(free_port)
  make_pki
  write_kubeconfig "$api_port"
  printf 'etcd=http://127.0.0.1:%s\napiserver=https://127.0.0.1:%s\n' "$etcd_port" "$api_port" >"$RUN/endpoints"

  # etcd's request limit is raised from 1.5 MiB to 8 MiB so that a ManifestWork at the documented
  # limits (500 KiB of manifests, 256 manifestConfigs with 64 rules each, and their status) can
  # be stored: e2e/tests/agent/hostile.rs.
  data=$(etcd_data_dir)
  rm -rf "$data"
  mkdir -p "$data"
  chmod 700 "$data"
  echo "$data" >"$RUN/etcd-data-dir"
  start etcd "$BIN/etcd" --name=node0 --data-dir="$data" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="http://127.0.0.1:$peer_port" --initial-advertise-peer-urls="http://127.0.0.1:$peer_port" \
    --initial-cluster="node0=http://127.0.0.1:$peer_port" --unsafe-no-fsync=true \
    --auto-compaction-retention=1 --quota-backend-bytes=8589934592 --log-level=warn \
    --max-request-bytes=8388608
  wait_until etcd "etcd /health" url_has "http://127.0.0.1:$etcd_port/health" '"health":"true"'
  log "etcd ready on 127.0.0.1:$etcd_port ($((SECONDS - t0))s)"

  local p=$RUN/pki
  # The flags are kept so that `start-apiserver` brings it back on the same port, certs and etcd.
  printf '%s\n' --etcd-servers="http://127.0.0.1:$etcd_port" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$api_port" \
    --tls-cert-file="$p/apiserver.crt" --tls-private-key-file="$p/apiserver.key" --client-ca-file="$p/ca.crt" \
    --service-account-issuer=https://kubernetes.default.svc.cluster.local \
    --service-account-key-file="$p/sa.pub" --service-account-signing-key-file="$p/sa.key" \
    --service-cluster-ip-range=10.96.0.0/16 --authorization-mode=RBAC --allow-privileged=true \
    --disable-admission-plugins=ServiceAccount,TaintNodesByCondition --endpoint-reconciler-type=none \
    --cert-dir="$RUN/apiserver" --v=1 >"$RUN/kube-apiserver.args"
  start_apiserver "$BIN/kube-apiserver"
  log "kube-apiserver ready on https://127.0.0.1:$api_port ($((SECONDS - t0))s)"

  if [ "$minimal" = 0 ]; then
    start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$RUN/admin.kubeconfig" \
      --leader-elect=false --bind-address=127.0.0.1 --secure-port=0 \
      --service-account-private-key-file="$p/sa.key" --root-ca-file="$p/ca.crt" \
      --kube-api-qps=100 --kube-api-burst=200 --concurrent-gc-syncs=5 --v=1 \
      --controllers=job-controller,garbage-collector-controller,namespace-controller,node-lifecycle-controller,taint-eviction-controller,pod-garbage-collector-controller,ttl-after-finished-controller,deployment-controller,replicaset-controller,statefulset-controller,daemonset-controller,clusterrole-aggregation-controller,serviceaccount-controller,serviceaccount-token-controller,root-ca-certificate-publisher-controller
    start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$RUN/admin.kubeconfig" \
      --leader-elect=false --bind-address=127.0.0.1 --secure-port=0 --v=1
    # The heartbeat stage (node-heartbeat-with-lease) refreshes the node's status only every
    # 600 s and counts on a node Lease for liveness: without the Lease the node lifecycle
    # controller marked the node NotReady every ~55 s and its pods not Ready with it.
    start kwok "$BIN/kwok" --kubeconfig="$RUN/admin.kubeconfig" --config="$BIN/kwok-stages.yaml" \
      --manage-all-nodes=true --cidr=10.244.0.0/16 --node-ip=10.0.0.1 \
      --node-lease-duration-seconds=40
    wait_until kube-apiserver "creating node kwok-node-0" create_node
    wait_until kwok "node kwok-node-0 to become Ready (kwok)" node_ready
    log "node kwok-node-0 Ready ($((SECONDS - t0))s)"
    wait_until kube-controller-manager "the controller-manager to create serviceaccount default/default" kcm_working
    pid_alive kube-scheduler || { log_tail kube-scheduler; die "kube-scheduler exited (log: $RUN/kube-scheduler.log)"; }
  fi
  log "up in $((SECONDS - t0))s; logs: $RUN/*.log"
  echo "$RUN/admin.kubeconfig"
}

# start_apiserver BINARY: starts kube-apiserver with the saved flags and waits until it is ready.
# Its log is appended to, so the log of a restarted server keeps its history.
start_apiserver() {
  local bin=$1 args=() server
  mapfile -t args <"$RUN/kube-apiserver.args"
  "$bin" "${args[@]}" </dev/null >>"$RUN/kube-apiserver.log" 2>&1 9>&- &
  echo "$! $(readlink -f "$bin")" >"$RUN/kube-apiserver.pid"
  server=$(sed -n 's/^ *server: *//p' "$RUN/admin.kubeconfig" | head -1)
  wait_until kube-apiserver "kube-apiserver /readyz" url_has "$server/readyz" '^ok'
}

# stop_apiserver: SIGTERM (then SIGKILL after 10 s) the running kube-apiserver; etcd stays.
stop_apiserver() {
  local pid
  pid_alive kube-apiserver || { log "kube-apiserver is not running"; return 0; }
  pid=$(saved_pid kube-apiserver)
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do pid_alive kube-apiserver || break; sleep 0.1; done
  pid_alive kube-apiserver && kill -KILL "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do pid_alive kube-apiserver || break; sleep 0.1; done
  log "stopped kube-apiserver (pid $pid)"
}

# The binary a stopped kube-apiserver ran, from its pid file.
apiserver_bin() {
  [ -f "$RUN/kube-apiserver.args" ] || die "control plane $NAME was not started by this script version"
  awk '{print $2}' "$RUN/kube-apiserver.pid"
}

install_crds() {
  [ -f "$RUN/admin.kubeconfig" ] || die "control plane $NAME is not up"
  BIN=${BIN:-$("$HERE/build-controlplane.sh" 2>/dev/null || true)}
  KUBECTL=$(kubectl_bin)
  local files=() f out
  for f in "$@"; do
    if [ -d "$f" ]; then
      while IFS= read -r x; do files+=("$x"); done < <(find "$f" -maxdepth 1 -type f \( -name '*.yaml' -o -name '*.yml' \) | sort)
    elif [ -f "$f" ]; then
      files+=("$f")
    else
      die "no such CRD file or directory: $f"
    fi
  done
  if [ "${#files[@]}" = 0 ]; then
    log "WARNING: no CRD files in: $*"
    return 0
  fi
  local args=()
  for f in "${files[@]}"; do args+=(-f "$f"); done
  out=$("$KUBECTL" --kubeconfig="$RUN/admin.kubeconfig" apply --server-side --force-conflicts \
    --field-manager=work-agent-test-harness -o name "${args[@]}" 2>&1) ||
    die "installing CRDs failed: $out"
  local names=()
  while IFS= read -r x; do
    case "$x" in customresourcedefinition.apiextensions.k8s.io/*) names+=("${x#*/}") ;; esac
  done <<<"$out"
  [ "${#names[@]}" -gt 0 ] || die "no CustomResourceDefinition found in: ${files[*]}"
  "$KUBECTL" --kubeconfig="$RUN/admin.kubeconfig" wait --for=condition=Established \
    --timeout="${READY_TIMEOUT}s" "${names[@]/#/crd/}" >/dev/null ||
    die "CRDs did not become Established: ${names[*]}"
  log "CRDs established: ${names[*]}"
}

[ $# -ge 2 ] || usage
CMD=$1
NAME=$2
shift 2
case "$NAME" in *[!a-zA-Z0-9_-]* | "") die "NAME must match [a-zA-Z0-9_-]+" ;; esac
RUN=$RUN_ROOT/$NAME
mkdir -p "$RUN_ROOT"
# One operation per NAME at a time: concurrent `up`s of the same NAME would fight over ports and pids.
exec 9>"$RUN_ROOT/.$NAME.lock"
flock 9

case "$CMD" in
  up)
    minimal=0
    for a in "$@"; do
      case "$a" in --minimal) minimal=1 ;; *) usage ;; esac
    done
    up "$minimal"
    ;;
  down) down ;;
  status) status ;;
  stop-apiserver) stop_apiserver ;;
  start-apiserver)
    pid_alive kube-apiserver && { log "kube-apiserver already running"; exit 0; }
    start_apiserver "$(apiserver_bin)"
    log "kube-apiserver started"
    ;;
  restart-apiserver)
    bin=$(apiserver_bin)
    stop_apiserver
    start_apiserver "$bin"
    log "kube-apiserver restarted"
    ;;
  install-crds)
    [ $# -ge 1 ] || usage
    install_crds "$@"
    ;;
  *) usage ;;
esac
