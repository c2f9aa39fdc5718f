#!/usr/bin/env bash
# bench-mqtt.sh [BENCH_MQTT_ARGS...]     (make bench-mqtt BENCH_MQTT_ARGS="...")
# The MQTT benchmark (docs/performance.md, "CloudEvents over MQTT"): one agent started with
# Maestro's agent command line behind a Maestro-shaped test source on a private mosquitto.
# Builds bench_mqtt (release) and, for `--flavor ours` without --agent-bin, a release build of this
# checkout's work-agent. `--flavor maestro-go` needs --agent-bin (a `maestro` binary; default
# $MAESTRO_BIN or /tmp/maestro-bin/maestro; its source tree $MAESTRO_SRC, default /tmp/maestro-src,
# names the commit). The spoke is WORK_AGENT_SPOKE_KUBECONFIG
# when set, else a minimal control plane `bench-mqtt-spoke` under $RUN_ROOT with the
# AppliedManifestWork CRD, started here (reused if it already runs) and stopped at the end unless
# BENCH_MQTT_KEEP_SPOKE=1 (so that two runs share one spoke). Report: target/bench/<label>.{md,json};
# `bench_mqtt --help` lists the options.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
CARGO=${CARGO:-cargo}
SPOKE_NAME=bench-mqtt-spoke
log() { printf '[bench-mqtt] %s\n' "$*" >&2; }
cd "$ROOT"

# shellcheck source=e2e/scripts/bench-lib.sh
. "$HERE/bench-lib.sh"

flavor=$(arg_value --flavor ours "$@")

[ -n "$(command -v mosquitto || true)" ] || [ -x /usr/sbin/mosquitto ] || "$HERE/mosquitto.sh" install

extra=()
if [ "$flavor" = ours ] && ! has_arg --agent-bin "$@"; then
  bench_build bench_mqtt agent
else
  bench_build bench_mqtt
fi
if ! has_arg --agent-bin "$@"; then
  case "$flavor" in
    ours)
      commit=$(checkout_commit)
      # A copy: a later build in the shared target directory must not replace it mid-run.
      mkdir -p "$RUN_ROOT/bench-mqtt"
      cp "$TARGET_DIR/release/work-agent" "$RUN_ROOT/bench-mqtt/work-agent"
      extra+=(--agent-bin "$RUN_ROOT/bench-mqtt/work-agent" --agent-commit "$commit")
      has_arg --label "$@" || extra+=(--label "mqtt-ours-$commit")
      ;;
    maestro-go)
      bin=${MAESTRO_BIN:-/tmp/maestro-bin/maestro}
      [ -x "$bin" ] || {
        log "ERROR: no maestro binary at $bin: build Maestro (go build -o $bin ./cmd/maestro in its"
        log "repository) and pass --agent-bin or MAESTRO_BIN"
        exit 2
      }
      extra+=(--agent-bin "$bin")
      # The maestro binary has no --version: name the commit of its source tree when known.
      src=${MAESTRO_SRC:-/tmp/maestro-src}
      version=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
      has_arg --agent-commit "$@" || extra+=(--agent-commit "maestro $version")
      has_arg --label "$@" || extra+=(--label mqtt-maestro-go)
      ;;
    *) log "ERROR: --flavor must be ours or maestro-go, not $flavor"; exit 2 ;;
  esac
fi

export WORK_AGENT_RUN_DIR=$RUN_ROOT
started_spoke=""
stop_spoke() {
  if [ -n "$started_spoke" ] && [ "${BENCH_MQTT_KEEP_SPOKE:-0}" != 1 ]; then
    "$HERE/controlplane.sh" down "$SPOKE_NAME" || log "WARNING: stopping the spoke reported an error"
  fi
}
if [ -z "${WORK_AGENT_SPOKE_KUBECONFIG:-}" ]; then
  log "starting (or reusing) the spoke control plane $SPOKE_NAME"
  "$HERE/build-controlplane.sh" >/dev/null
  started_spoke=1
  trap stop_spoke EXIT
  kubeconfig=$("$HERE/controlplane.sh" up "$SPOKE_NAME" --minimal | tail -n1)
  crd=$(find "$ROOT/deploy/crds" -maxdepth 1 -name '*appliedmanifestwork*' | head -n1)
  [ -n "$crd" ] || { log "ERROR: no AppliedManifestWork CRD in deploy/crds"; exit 1; }
  "$HERE/controlplane.sh" install-crds "$SPOKE_NAME" "$crd" >&2
  export WORK_AGENT_SPOKE_KUBECONFIG=$kubeconfig
  # Stopped after the run: what the run leaves on it needs no cleanup (100,000
  # AppliedManifestWorks take minutes to remove one by one).
  [ "${BENCH_MQTT_KEEP_SPOKE:-0}" = 1 ] || export BENCH_MQTT_SPOKE_DISPOSABLE=1
fi
log "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
rc=0
"$BENCH" "${extra[@]}" "$@" || rc=$?
exit "$rc"
