#!/usr/bin/env bash
# fleet.sh [FLEET_ARGS...]   (--agents N, --works M, --lifecycles K, --idle SECONDS)
# Builds the agent (release) and the fleet benchmark, then runs N agents against the hub and
# spoke named by WORK_AGENT_{HUB,SPOKE}_KUBECONFIG (or $RUN_ROOT/clusters.env) and prints the
# hub's figures. `make bench-fleet` runs it on fresh control planes (with-cluster.sh).
#   FLEET_UPDATE_DOCS=1   write the figures into the Fleet section of docs/performance.md
#   FLEET_AGENT_LOG=...   the agents' --log-level (default warn; e.g. debug,kube=info to trace writes)
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
CARGO=${CARGO:-cargo}
log() { printf '[fleet.sh] %s\n' "$*" >&2; }
cd "$ROOT"
if [ -z "${WORK_AGENT_SPOKE_KUBECONFIG:-}" ] && [ -f "$RUN_ROOT/clusters.env" ]; then
  # shellcheck disable=SC1091
  . "$RUN_ROOT/clusters.env"
fi
for v in WORK_AGENT_HUB_KUBECONFIG WORK_AGENT_SPOKE_KUBECONFIG; do
  [ -n "${!v:-}" ] && [ -f "${!v}" ] || { log "ERROR: $v not set or not a file; use 'make bench-fleet'"; exit 1; }
done
export WORK_AGENT_HUB_KUBECONFIG WORK_AGENT_SPOKE_KUBECONFIG
log "building work-agent (release) and the fleet benchmark"
"$CARGO" build -q --release -p work-agent --bin work-agent
"$CARGO" build -q -p e2e --bin fleet
TARGET_DIR=$("$CARGO" metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
export WORK_AGENT_BIN=$TARGET_DIR/release/work-agent
export WORK_AGENT_RUN_DIR=$RUN_ROOT
out=$RUN_ROOT/fleet-report.md
"$TARGET_DIR/debug/fleet" --report "$out" "$@"
if [ "${FLEET_UPDATE_DOCS:-0}" = 1 ]; then
  python3 - "$ROOT/docs/performance.md" "$out" "$*" \
    "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import datetime, re, sys
doc, report, args, commit = sys.argv[1:]
text = open(doc).read()
stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
block = f"<!-- fleet:begin -->\nRun of {stamp} at {commit}: `make bench-fleet{(' FLEET_ARGS=' + repr(args)) if args else ''}`.\n\n{open(report).read().strip()}\n<!-- fleet:end -->"
pattern = re.compile(r"<!-- fleet:begin -->.*?<!-- fleet:end -->", re.S)
if not pattern.search(text):
    sys.exit(f"{doc} has no fleet markers")
open(doc, "w").write(pattern.sub(lambda _: block, text))
PY
  log "docs/performance.md updated"
fi
