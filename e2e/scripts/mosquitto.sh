#!/usr/bin/env bash
# mosquitto.sh start [PORT] | stop | install | run CMD [ARGS...]
# Starts a throw-away MQTT 5 broker (Debian's mosquitto) on 127.0.0.1 for the CloudEvents tests:
# anonymous, no persistence, state in $RUN_ROOT/mosquitto. Installs the package first when it is
# missing and the script runs as root. `start` prints the port (a free one unless PORT is given)
# and writes MQTT_BROKER=127.0.0.1:PORT to $RUN_ROOT/mosquitto/broker.env; `stop` stops it.
# `run CMD` starts it, runs CMD with MQTT_BROKER and MOSQUITTO_SCRIPT exported (the tests restart
# the broker through it), stops it on every exit path and exits with CMD's code.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
DIR="$RUN_ROOT/mosquitto"
log() { printf '[mosquitto] %s\n' "$*" >&2; }
usage() { sed -n '2,8p' "${BASH_SOURCE[0]}" >&2; exit 2; }

find_bin() { command -v mosquitto || { [ -x /usr/sbin/mosquitto ] && echo /usr/sbin/mosquitto; } || true; }

stop() {
  if [ -f "$DIR/pid" ]; then
    local pid
    pid=$(cat "$DIR/pid")
    if [ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" = "$(readlink -f "$(find_bin)")" ]; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$DIR/pid" "$DIR/broker.env"
  fi
}

install() {
  local bin
  bin=$(find_bin)
  if [ -z "$bin" ]; then
    [ "$(id -u)" = 0 ] || { log "mosquitto is not installed; run as root or: apt-get install -y mosquitto"; exit 1; }
    log "installing mosquitto"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null 2>&1 ||
      { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null; }
    bin=$(find_bin)
    [ -n "$bin" ] || { log "installing mosquitto failed"; exit 1; }
  fi
}

start() {
  local bin port
  install
  bin=$(find_bin)
  stop
  mkdir -p "$DIR"
  port=${1:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
  cat >"$DIR/mosquitto.conf" <<CONF
listener $port 127.0.0.1
allow_anonymous true
persistence false
max_packet_size 4194304
log_dest file $DIR/mosquitto.log
CONF
  # Running as root, mosquitto drops to the "mosquitto" user; the log must stay writable for it.
  [ "$(id -u)" = 0 ] && id mosquitto >/dev/null 2>&1 && chown -R mosquitto "$DIR" 2>/dev/null || true
  "$bin" -c "$DIR/mosquitto.conf" -d
  for _ in $(seq 50); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      pgrep -n -f "mosquitto -c $DIR/mosquitto.conf" >"$DIR/pid" || true
      echo "MQTT_BROKER=127.0.0.1:$port" >"$DIR/broker.env"
      echo "$port"
      return 0
    fi
    sleep 0.1
  done
  log "mosquitto did not listen on 127.0.0.1:$port; see $DIR/mosquitto.log"
  exit 1
}

case "${1:-}" in
  start) shift; start "$@" ;;
  stop) stop ;;
  install) install ;;
  run)
    shift
    [ $# -ge 1 ] || usage
    trap stop EXIT
    port=$(start)
    export MQTT_BROKER="127.0.0.1:$port" MOSQUITTO_SCRIPT="$HERE/mosquitto.sh" RUN_ROOT
    log "broker on $MQTT_BROKER"
    "$@" # a failure ends the script with its exit code (set -e), through the EXIT trap
    ;;
  *) usage ;;
esac
