#!/usr/bin/env bash
# pubsub-fake.sh build | start [PORT] | stop | run CMD [ARGS...]
# Google's own fake Pub/Sub server (pstest, cloud.google.com/go/pubsub/v2) wrapped by
# e2e/pubsub-fake with Maestro's topics and the source's subscriptions, for the Pub/Sub tests.
# `build` compiles it with Go (modules from the proxy) into ~/.cache/work-agent/pubsub-fake,
# keyed by the wrapper's sources, and prints the binary's path. `start` runs one on 127.0.0.1
# (a free port unless PORT is given), prints its address and writes PUBSUB_FAKE=127.0.0.1:PORT
# to $RUN_ROOT/pubsub-fake/fake.env; `stop` stops it. `run CMD` builds and starts it, runs CMD
# with PUBSUB_FAKE (the running server) and PUBSUB_FAKE_BIN (tests start private ones to
# restart them) exported, stops it on every exit path and exits with CMD's code.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RUN_ROOT=${RUN_ROOT:-$ROOT/.run}
DIR="$RUN_ROOT/pubsub-fake"
SRC="$ROOT/e2e/pubsub-fake"
CACHE=${WORK_AGENT_CACHE:-$HOME/.cache/work-agent}/pubsub-fake
log() { printf '[pubsub-fake] %s\n' "$*" >&2; }

build() {
  command -v go >/dev/null || { log "go is not installed (needed to build the fake Pub/Sub server)"; exit 1; }
  local key bin
  key=$(cat "$SRC/go.mod" "$SRC/go.sum" "$SRC/main.go" | sha256sum | cut -c1-16)
  bin="$CACHE/$key/pubsub-fake"
  if [ ! -x "$bin" ]; then
    log "building the fake Pub/Sub server (pstest) into $bin"
    mkdir -p "$CACHE/$key"
    (cd "$SRC" && GOFLAGS=-mod=mod go build -o "$bin.tmp" .) || { log "go build failed in $SRC"; exit 1; }
    mv "$bin.tmp" "$bin"
  fi
  echo "$bin"
}

stop() {
  if [ -f "$DIR/pid" ]; then
    local pid
    pid=$(cat "$DIR/pid")
    case "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" in
      */pubsub-fake) kill "$pid" 2>/dev/null || true ;;
    esac
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    rm -f "$DIR/pid" "$DIR/fake.env"
  fi
}

start() {
  local bin port addr
  bin=$(build)
  stop
  mkdir -p "$DIR"
  port=${1:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}
  : >"$DIR/out"
  "$bin" --address "127.0.0.1:$port" >"$DIR/out" 2>"$DIR/log" &
  echo $! >"$DIR/pid"
  for _ in $(seq 100); do
    addr=$(head -n1 "$DIR/out" 2>/dev/null || true)
    if [ "$addr" = "127.0.0.1:$port" ]; then
      echo "PUBSUB_FAKE=$addr" >"$DIR/fake.env"
      echo "$addr"
      return 0
    fi
    kill -0 "$(cat "$DIR/pid")" 2>/dev/null || break
    sleep 0.1
  done
  log "the fake Pub/Sub server did not start on 127.0.0.1:$port; see $DIR/log"
  exit 1
}

case "${1:-}" in
  build) build ;;
  start) shift; start "$@" ;;
  stop) stop ;;
  run)
    shift
    [ $# -ge 1 ] || { sed -n '2,10p' "${BASH_SOURCE[0]}" >&2; exit 2; }
    bin=$(build)
    addr=$(start)
    trap stop EXIT
    export PUBSUB_FAKE="$addr" PUBSUB_FAKE_BIN="$bin" RUN_ROOT
    log "fake Pub/Sub server on $PUBSUB_FAKE"
    "$@" # a failure ends the script with its exit code (set -e), through the EXIT trap
    ;;
  *) sed -n '2,10p' "${BASH_SOURCE[0]}" >&2; exit 2 ;;
esac
