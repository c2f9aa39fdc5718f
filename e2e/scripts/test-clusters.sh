#!/usr/bin/env bash
# The three control planes the integration suite uses, started together:
#   hub           minimal (etcd + apiserver), our CRDs from deploy/crds/
#   hub-upstream  minimal, the upstream OCM CRDs vendored in e2e/upstream-crds/
#   spoke         full (controller-manager, scheduler, kwok node), our AppliedManifestWork CRD
#
#   test-clusters.sh up     start (or reuse) all three; writes $RUN_ROOT/clusters.env with the
#                           WORK_AGENT_*_KUBECONFIG exports and prints it
#   test-clusters.sh down   stop all three (only processes they started)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
CP=$HERE/controlplane.sh
OUR_CRDS=${OUR_CRDS:-$ROOT/deploy/crds}
UPSTREAM_CRDS=${UPSTREAM_CRDS:-$ROOT/e2e/upstream-crds}
ENV_FILE=$RUN_ROOT/clusters.env
log() { printf '[test-clusters] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Our CRD files, or none while engineer A's generator has not produced them yet (a warning, not an
# error: once files exist, a failure to install them fails the run).
our_crds() {
  [ -d "$OUR_CRDS" ] || return 0
  find "$OUR_CRDS" -maxdepth 1 -type f \( -name '*.yaml' -o -name '*.yml' \) | sort
}

up() {
  local t0=$SECONDS
  mkdir -p "$RUN_ROOT"
  rm -f "$ENV_FILE"
  # Build (or find cached) binaries once, before the parallel starts race to do it.
  "$HERE/build-controlplane.sh" >/dev/null || die "building the control-plane binaries failed"
  local pids=() names=(hub hub-upstream spoke) rc=0 i
  "$CP" up hub --minimal >/dev/null &
  pids+=($!)
  "$CP" up hub-upstream --minimal >/dev/null &
  pids+=($!)
  "$CP" up spoke >/dev/null &
  pids+=($!)
  for i in 0 1 2; do
    if ! wait "${pids[$i]}"; then
      log "control plane ${names[$i]} failed to start (logs: $RUN_ROOT/${names[$i]}/*.log)"
      rc=1
    fi
  done
  [ "$rc" = 0 ] || return 1

  local ours=() applied=() f
  while IFS= read -r f; do ours+=("$f"); done < <(our_crds)
  if [ "${#ours[@]}" = 0 ]; then
    log "WARNING: no CRDs in $OUR_CRDS yet (run 'make crds'); hub and spoke start without them"
  else
    "$CP" install-crds hub "${ours[@]}"
    for f in "${ours[@]}"; do
      case "$(basename "$f")" in *appliedmanifestwork*) applied+=("$f") ;; esac
    done
    [ "${#applied[@]}" -gt 0 ] || die "no AppliedManifestWork CRD (*appliedmanifestwork*) among ${ours[*]}"
    "$CP" install-crds spoke "${applied[@]}"
  fi
  [ -d "$UPSTREAM_CRDS" ] || die "upstream CRDs missing: $UPSTREAM_CRDS"
  "$CP" install-crds hub-upstream "$UPSTREAM_CRDS"

  cat >"$ENV_FILE" <<ENV
export WORK_AGENT_HUB_KUBECONFIG=$RUN_ROOT/hub/admin.kubeconfig
export WORK_AGENT_HUB_UPSTREAM_KUBECONFIG=$RUN_ROOT/hub-upstream/admin.kubeconfig
export WORK_AGENT_SPOKE_KUBECONFIG=$RUN_ROOT/spoke/admin.kubeconfig
ENV
  log "all control planes up in $((SECONDS - t0))s; environment in $ENV_FILE:"
  cat "$ENV_FILE"
}

down() {
  local rc=0 n
  rm -f "$ENV_FILE"
  for n in spoke hub-upstream hub; do
    "$CP" down "$n" || rc=1
  done
  return "$rc"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) sed -n '2,10p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
