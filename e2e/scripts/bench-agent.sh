#!/usr/bin/env bash
# bench-agent.sh [BENCH_AGENT_ARGS...]     (make bench-agent BENCH_ARGS="...")
# The agent benchmark (docs/performance.md, "Agent benchmark"). Builds bench_agent (release) and,
# for `--flavor ours` without --agent-bin, a release build of this checkout's work-agent. Runs
# against the control planes named by WORK_AGENT_{HUB,SPOKE}_KUBECONFIG or $RUN_ROOT/clusters.env
# (from `make cluster-up`); if neither is there, starts fresh ones with with-cluster.sh and stops
# them afterwards. Report: target/bench/<label>.{md,json}; `bench_agent --help` lists the options.
#
# --flavor ours|ocm (default ours): which agent runs. `ocm` is upstream's OCM work agent (`work
# agent`, kube driver), given the same QPS/burst (--kube-api-qps/-burst for the spoke,
# --hub-kube-api-qps/-burst for the hub) and sync period (--status-sync-interval) as ours; its
# binary is --agent-bin, or else ocm-bins.sh's (OCM_REF, default v1.3.1: cached in
# ~/.cache/work-agent/ocm-<ref>/, built from OCM_MIRROR if not). Every request figure is the API
# servers'; upstream has no request counter of its own (n/a) and its status latency is not timed
# (it polls feedback at its sync interval). Needs curl (its health endpoint is HTTPS).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
CARGO=${CARGO:-cargo}
log() { printf '[bench-agent] %s\n' "$*" >&2; }
cd "$ROOT"

# shellcheck source=e2e/scripts/bench-lib.sh
. "$HERE/bench-lib.sh"

extra=()
flavor=$(arg_value --flavor ours "$@")
if [ "$flavor" = ours ] && ! has_arg --agent-bin "$@"; then
  bench_build bench_agent agent
else
  bench_build bench_agent
fi
if [ "$flavor" = ocm ] && ! has_arg --agent-bin "$@"; then
  ocm_dir=$("$HERE/ocm-bins.sh" | tail -1)
  extra+=(--agent-bin "$ocm_dir/work" --agent-commit "ocm-${OCM_REF:-v1.3.1}" --agent-profile release)
  has_arg --label "$@" || extra+=(--label "bench-agent-ocm-${OCM_REF:-v1.3.1}")
elif ! has_arg --agent-bin "$@"; then
  commit=$(checkout_commit)
  extra+=(--agent-bin "$TARGET_DIR/release/work-agent" --agent-commit "$commit" --agent-profile release)
  has_arg --label "$@" || extra+=(--label "bench-agent-$commit")
fi

if [ -z "${WORK_AGENT_SPOKE_KUBECONFIG:-}" ] && [ -f "$RUN_ROOT/clusters.env" ]; then
  log "using the running control planes of $RUN_ROOT/clusters.env"
  # shellcheck disable=SC1091
  . "$RUN_ROOT/clusters.env"
fi
export WORK_AGENT_RUN_DIR=$RUN_ROOT
if [ -n "${WORK_AGENT_HUB_KUBECONFIG:-}" ] && [ -n "${WORK_AGENT_SPOKE_KUBECONFIG:-}" ]; then
  export WORK_AGENT_HUB_KUBECONFIG WORK_AGENT_SPOKE_KUBECONFIG
  exec "$BENCH" "${extra[@]}" "$@"
fi
log "no running control planes: starting them for this run"
exec "$HERE/with-cluster.sh" "$BENCH" "${extra[@]}" "$@"
