#!/usr/bin/env bash
# chaos.sh [CHAOS_ARGS...]   (see `chaos --help`: --hub H, --seed N, --duration S, --long, --soak)
# Builds the agent and the fault-injection driver, then runs the driver against the control planes
# named by WORK_AGENT_{HUB,SPOKE}_KUBECONFIG (or $RUN_ROOT/clusters.env), once per hub: the
# Kubernetes hub, then a Maestro-shaped source over MQTT (a private mosquitto), then a gRPC source
# (both in the driver's process, on free ports). `--hub kube|mqtt|grpc` in the arguments runs that
# one only; `--soak` runs on the Kubernetes hub only. The driver restarts and stops the hub's and
# spoke's kube-apiservers through controlplane.sh, so run it on control planes of its own
# (`make chaos` starts fresh ones with with-cluster.sh).
#   CHAOS_HUBS="kube mqtt grpc pubsub"  the hubs when no --hub is given
#   CHAOS_BROKER_SECONDS=S  length of the fault phase behind a broker (default: the driver's,
#                           120 s, or 1200 s with --long; a --duration in the arguments otherwise)
#   CHAOS_PROFILE=release   agent built with --release (default: debug, as the integration suite)
#   CHAOS_UPDATE_DOCS=1     write each report into docs/reliability.md (and, for --long/--soak runs
#                           on the Kubernetes hub, the RSS curve to docs/soak-rss-<mode>.{csv,svg})
# Exits 0 when every run's invariant counts are all 0, else with the last failing run's code.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
CARGO=${CARGO:-cargo}
PROFILE=${CHAOS_PROFILE:-debug}
log() { printf '[chaos.sh] %s\n' "$*" >&2; }
cd "$ROOT"

if [ -z "${WORK_AGENT_SPOKE_KUBECONFIG:-}" ] && [ -f "$RUN_ROOT/clusters.env" ]; then
  # shellcheck disable=SC1091
  . "$RUN_ROOT/clusters.env"
fi
for v in WORK_AGENT_HUB_KUBECONFIG WORK_AGENT_SPOKE_KUBECONFIG; do
  [ -n "${!v:-}" ] && [ -f "${!v}" ] || { log "ERROR: $v not set or not a file; use 'make chaos'"; exit 1; }
done
export WORK_AGENT_HUB_KUBECONFIG WORK_AGENT_SPOKE_KUBECONFIG

release=()
[ "$PROFILE" = release ] && release=(--release)
log "building work-agent ($PROFILE) and the chaos driver"
"$CARGO" build -q -p work-agent --bin work-agent "${release[@]}"
"$CARGO" build -q -p e2e --bin chaos
# The Pub/Sub hub runs on Google's fake server.
PUBSUB_FAKE_BIN=$("$HERE/pubsub-fake.sh" build)
export PUBSUB_FAKE_BIN
TARGET_DIR=$("$CARGO" metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
# The run uses copies: a build during an hour-long run must not change the agent the driver
# restarts after each kill, nor the driver.
mkdir -p "$RUN_ROOT/bin"
cp "$TARGET_DIR/$PROFILE/work-agent" "$RUN_ROOT/bin/work-agent"
cp "$TARGET_DIR/debug/chaos" "$RUN_ROOT/bin/chaos"
export WORK_AGENT_BIN=$RUN_ROOT/bin/work-agent
export WORK_AGENT_RUN_DIR=$RUN_ROOT

base=default hub_arg="" prev=""
for a in "$@"; do
  case "$a" in --long) base=long ;; --soak) base=soak ;; esac
  [ "$prev" = --hub ] && hub_arg=$a
  prev=$a
done
if [ -n "$hub_arg" ]; then
  hubs=$hub_arg
elif [ "$base" = soak ]; then
  hubs=kube
else
  hubs=${CHAOS_HUBS:-kube mqtt grpc pubsub}
fi

# One run of the driver on hub $1; its mode names the report directory and the docs block.
run_one() {
  local hub=$1 mode out rc
  shift
  local args=("$@")
  case "$hub:$base" in
    kube:*) mode=$base ;;
    *:long) mode=$hub-long ;;
    *) mode=$hub ;;
  esac
  if [ "$hub" != kube ]; then
    [ -n "$hub_arg" ] || args+=(--hub "$hub")
    [ -z "${CHAOS_BROKER_SECONDS:-}" ] || args+=(--duration "$CHAOS_BROKER_SECONDS")
  fi
  out=$RUN_ROOT/chaos-$mode
  mkdir -p "$out"
  set +e
  "$RUN_ROOT/bin/chaos" --report "$out/report.md" --csv "$out/samples.csv" --svg "$out/rss.svg" "${args[@]}"
  rc=$?
  set -e
  log "$hub: report $out/report.md (exit $rc)"
  if [ "${CHAOS_UPDATE_DOCS:-0}" = 1 ] && [ -f "$out/report.md" ]; then
    update_docs "$mode" "$out"
  fi
  return "$rc"
}

update_docs() {
  local mode=$1 out=$2
  python3 - "$ROOT/docs/reliability.md" "$mode" "$out/report.md" "$PROFILE" \
    "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)" <<'PY'
import datetime, re, sys
doc, mode, report, profile, commit = sys.argv[1:]
text = open(doc).read()
body = open(report).read().strip()
stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
block = f"<!-- chaos-{mode}:begin -->\nRun of {stamp}, {profile} agent build of {commit}.\n\n{body}\n<!-- chaos-{mode}:end -->"
pattern = re.compile(rf"<!-- chaos-{mode}:begin -->.*?<!-- chaos-{mode}:end -->", re.S)
if not pattern.search(text):
    sys.exit(f"{doc} has no chaos-{mode} markers")
open(doc, "w").write(pattern.sub(lambda _: block, text))
PY
  if [ "$mode" = long ] || [ "$mode" = soak ]; then
    cp "$out/samples.csv" "$ROOT/docs/soak-rss-$mode.csv"
    cp "$out/rss.svg" "$ROOT/docs/soak-rss-$mode.svg"
    # A PNG as well when matplotlib is there (optional: the SVG needs nothing).
    python3 "$HERE/plot-soak.py" "$out/samples.csv" "$ROOT/docs/soak-rss-$mode.png" \
      "work-agent, chaos --$mode" || true
  fi
  log "docs/reliability.md updated ($mode)"
}

# Every hub runs, also after a failed one: each report says what held.
status=0
for hub in $hubs; do
  run_one "$hub" "$@" || status=$?
done
exit "$status"
