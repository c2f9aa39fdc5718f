#!/usr/bin/env bash
# with-cluster.sh CMD [ARGS...]
# Builds the control-plane binaries if needed, starts the hub, hub-upstream and spoke control
# planes (see test-clusters.sh), exports WORK_AGENT_{HUB,HUB_UPSTREAM,SPOKE}_KUBECONFIG, runs CMD
# and stops every control plane again on every exit path (CMD failure, Ctrl-C, a failed start).
# Exits with CMD's exit code; a control plane that cannot start fails the run (never a skip).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
log() { printf '[with-cluster] %s\n' "$*" >&2; }
[ $# -ge 1 ] || { sed -n '2,7p' "${BASH_SOURCE[0]}" >&2; exit 2; }

# One run per RUN_ROOT at a time: a second run would share (and at its end stop) the first run's
# control planes and reap its agents. Taken before any trap, so a waiting run cleans up nothing.
mkdir -p "$RUN_ROOT"
exec 8>"$RUN_ROOT/.with-cluster.lock"
if ! flock -n 8; then
  log "another with-cluster.sh run is using $RUN_ROOT; waiting for it (or set RUN_ROOT to run side by side)"
  flock 8
fi

# Agents spawned by test-support write "PID TEST_PID BINARY" files here; a test process killed
# hard cannot reap its agent, so the cleanup does (only pids that still run that binary). An agent
# whose parent is still the test that started it is left alone: that test is alive (another run,
# e.g. run-integration.sh started by hand against other control planes, may share this
# directory) and stops its agent itself. Killing such agents once made two gc tests time out.
reap_agents() {
  local f pid parent bin exe ppid
  for f in "$RUN_ROOT"/agent-logs/*.pid; do
    [ -e "$f" ] || continue
    read -r pid parent bin <"$f" || true
    case "$parent" in
      '' | *[!0-9]*) bin="$parent${bin:+ $bin}"; parent="" ;; # old "PID BINARY" format
    esac
    exe=$(readlink "/proc/${pid:-0}/exe" 2>/dev/null || true)
    ppid=$(awk '/^PPid:/ {print $2}' "/proc/${pid:-0}/status" 2>/dev/null || true)
    if [ -n "$parent" ] && [ "$ppid" = "$parent" ]; then
      continue
    fi
    if [ -n "$pid" ] && [ -n "$bin" ] && [ "${exe% (deleted)}" = "$bin" ]; then
      log "killing leftover agent pid $pid ($f)"
      kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  reap_agents
  "$HERE/test-clusters.sh" down || log "WARNING: stopping the control planes reported an error"
  exit "$rc"
}
CMD_PID=""
# A signal stops CMD's whole process group (cargo and the test binaries) before the cleanup.
on_signal() {
  if [ -n "$CMD_PID" ]; then
    kill -TERM -- "-$CMD_PID" 2>/dev/null || true
    wait "$CMD_PID" 2>/dev/null || true
  fi
  exit "$1"
}
trap cleanup EXIT
trap 'on_signal 130' INT
trap 'on_signal 143' TERM

t0=$SECONDS
# Logs and credentials of an earlier run would only confuse the post-mortem of this one.
reap_agents
rm -rf "$RUN_ROOT/agent-logs" "$RUN_ROOT/kubeconfigs"
if ! "$HERE/test-clusters.sh" up 8>&- >&2; then
  log "FAILED: the control planes did not start; see the log tail above and $RUN_ROOT/*/*.log"
  exit 1
fi
log "control planes ready in $((SECONDS - t0))s"
# shellcheck disable=SC1091
. "$RUN_ROOT/clusters.env"

# CMD runs in its own process group, in the background, so that a signal to this script is
# handled at once (bash defers traps while a foreground command runs) and reaches all of CMD.
set -m
"$@" 8>&- &
CMD_PID=$!
set +m
set +e
wait "$CMD_PID"
rc=$?
set -e
CMD_PID=""
if [ "$rc" != 0 ]; then
  log "command failed (exit $rc): $*"
  log "control-plane logs: $RUN_ROOT/{hub,hub-upstream,spoke}/*.log; agent logs: $RUN_ROOT/agent-logs/"
fi
exit "$rc"
