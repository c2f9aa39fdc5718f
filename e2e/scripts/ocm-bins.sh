#!/usr/bin/env bash
# ocm-bins.sh: builds OCM's `server` (the CloudEvents gRPC server: `server grpc`) and `work` (the
# upstream work agent: `work agent`) from a git directory of open-cluster-management-io/ocm, once
# per ref, into ~/.cache/work-agent/ocm-<ref>/. Prints that directory (last line on stdout).
#
# Environment: OCM_MIRROR (git directory of the OCM repository; required unless the binaries are
# cached), OCM_REF (default v1.3.1), OCM_BIN_CACHE (default ~/.cache/work-agent/ocm-<ref>).
# The build is `go build -mod=vendor` (OCM vendors its modules: no network). Used by
# interop-ocm-grpc.sh and bench-grpc.sh; CI never runs it.
set -euo pipefail
REF=${OCM_REF:-v1.3.1}
OUT=${OCM_BIN_CACHE:-$HOME/.cache/work-agent/ocm-$REF}
log() { printf '[ocm-bins] %s\n' "$*" >&2; }

if [ -x "$OUT/server" ] && [ -x "$OUT/work" ] && [ -f "$OUT/.complete" ]; then
  log "cached: $OUT"
  echo "$OUT"
  exit 0
fi
[ -n "${OCM_MIRROR:-}" ] || { log "set OCM_MIRROR to a git directory of open-cluster-management-io/ocm (with tag $REF)"; exit 2; }
command -v go >/dev/null || { log "go is not installed"; exit 1; }
mkdir -p "$OUT"
# One build at a time: two scripts started together must not both compile for minutes.
exec 8>"$OUT/.lock"
flock 8
if [ -f "$OUT/.complete" ]; then echo "$OUT"; exit 0; fi

SRC="$OUT/src"
rm -rf "$SRC"
git -c advice.detachedHead=false clone -q --no-checkout "$OCM_MIRROR" "$SRC"
git -C "$SRC" -c advice.detachedHead=false checkout -q "$REF"
t0=$(date +%s)
log "building server and work at $REF ($(git -C "$SRC" rev-parse --short HEAD)) with -mod=vendor"
(cd "$SRC" && GOFLAGS=-buildvcs=false go build -mod=vendor -o "$OUT/server" ./cmd/server &&
  GOFLAGS=-buildvcs=false go build -mod=vendor -o "$OUT/work" ./cmd/work)
git -C "$SRC" rev-parse HEAD >"$OUT/commit"
rm -rf "$SRC"
touch "$OUT/.complete"
log "built in $(($(date +%s) - t0))s"
echo "$OUT"
