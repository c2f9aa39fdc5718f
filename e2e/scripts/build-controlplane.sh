#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok from the Go module
# proxy into a cache under ~/.cache keyed by their versions. Prints the cache directory on stdout
# (last line); progress and step timings go to stderr. A second run with the cache present builds
# nothing. kubectl (used by the scripts to create the node and install CRDs) is taken from PATH;
# on a machine without one it is built from the same modules into the cache as well
# (BUILD_KUBECTL=1 forces that).
set -euo pipefail
K8S=${K8S:-1.35.4}
ETCD=${ETCD:-3.6.16}
KWOK=${KWOK:-0.8.0}
OUT=${TESTBIN_DIR:-$HOME/.cache/work-agent/testbins/k8s-$K8S-etcd-$ETCD-kwok-$KWOK}
log() { printf '[build-controlplane] %s\n' "$*" >&2; }
need_kubectl() {
  [ ! -x "$OUT/kubectl" ] && { [ "${BUILD_KUBECTL:-0}" = 1 ] || ! command -v kubectl >/dev/null; }
}
if [ -f "$OUT/.complete" ] && ! need_kubectl; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null || { log "go is not installed"; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
mkdir -p "$OUT"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
step_start=0
step() { step_start=$(date +%s); log "$1 ..."; }
step_done() { log "$1 took $(( $(date +%s) - step_start ))s"; }

MINOR=$(echo "$K8S" | cut -d. -f2)
SV="v0.${K8S#1.}"

# kubectl only: the main binaries are cached, this machine just lacks kubectl.
ONLY_KUBECTL=0
[ -f "$OUT/.complete" ] && ONLY_KUBECTL=1
KUBE_CMDS=(k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)
[ "$ONLY_KUBECTL" = 1 ] && KUBE_CMDS=()
need_kubectl && KUBE_CMDS+=(k8s.io/kubernetes/cmd/kubectl)

step "kube: resolving modules (k8s.io/kubernetes v$K8S)"
mkdir "$W/kube"
cd "$W/kube"
KMOD=$(go mod download -json "k8s.io/kubernetes@v$K8S" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
if grep '=>' "$KMOD" | grep -qv '\./staging/'; then
  log "unexpected non-staging replace in k8s.io/kubernetes go.mod"; exit 1
fi
{
  printf 'module local/kubebins\n\n'
  grep -E '^(go|godebug) ' "$KMOD"
  echo
  printf 'tool (\n'
  printf '\t%s\n' "${KUBE_CMDS[@]}"
  printf ')\n\n'
  printf 'require k8s.io/kubernetes v%s\n\nreplace (\n' "$K8S"
  sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/src/.*#\1#p' "$KMOD" |
    while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$SV"; done
  printf ')\n'
} > go.mod
go mod tidy
step_done "kube: module resolution"

step "kube: building ${KUBE_CMDS[*]##*/}"
LD="-s -w"
NOW=$(date -u +%Y-%m-%dT%H:%M:%SZ)
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LD="$LD -X $p.gitVersion=v$K8S -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=$NOW"
done
go build -trimpath -tags=selinux,notest,grpcnotrace -ldflags="$LD" -o "$OUT/" "${KUBE_CMDS[@]}"
step_done "kube: build"
if [ "$ONLY_KUBECTL" = 1 ]; then
  "$OUT/kubectl" version --client >&2
  echo "$OUT"
  exit 0
fi

step "etcd v$ETCD"
mkdir "$W/etcd"
cd "$W/etcd"
printf 'module local/etcdbin\n\ngo 1.25.0\n\ntool go.etcd.io/etcd/server/v3\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD" > go.mod
go mod tidy
go build -trimpath -ldflags="-s -w" -o "$OUT/etcd" go.etcd.io/etcd/server/v3
step_done "etcd"

step "kwok v$KWOK"
GOBIN="$OUT" go install -trimpath -ldflags="-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK"
S=$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK/kustomize/stage
for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
  pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
  echo '---'
  cat "$S/$f"
done > "$OUT/kwok-stages.yaml"
step_done "kwok"

"$OUT/kube-apiserver" --version >&2
# sed reads all of etcd's output: `head -1` may close the pipe first, and pipefail turns that SIGPIPE into a failed build.
"$OUT/etcd" --version | sed -n 1p >&2
touch "$OUT/.complete"
echo "$OUT"
