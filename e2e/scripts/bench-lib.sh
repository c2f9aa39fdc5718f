# shellcheck shell=bash
# bench-lib.sh: sourced by bench-agent.sh and bench-mqtt.sh: what both do before their benchmark
# runs. Needs CARGO and a `log` function.
#
#   has_arg NAME ARGS...        whether ARGS hold NAME or NAME=...
#   arg_value NAME DEFAULT ARGS...  the value of the last NAME=V or NAME V in ARGS, else DEFAULT
#   bench_build BIN [agent]     release build of the e2e binary BIN and, with `agent`, of the
#                               work-agent binary; sets TARGET_DIR and BENCH (the built BIN)
#   checkout_commit             this checkout's short HEAD, with "+uncommitted" when crates/ changed

has_arg() {
  local want=$1 a
  shift
  for a in "$@"; do
    case "$a" in "$want" | "$want="*) return 0 ;; esac
  done
  return 1
}

arg_value() {
  local want=$1 value=$2 prev="" a
  shift 2
  for a in "$@"; do
    case "$a" in "$want="*) value=${a#"$want="} ;; esac
    [ "$prev" = "$want" ] && value=$a
    prev=$a
  done
  printf '%s\n' "$value"
}

bench_build() {
  # Built with work-agent either way: building e2e alone unifies features differently (log,
  # tracing-core and regex-automata lose features work-agent turns on), which rebuilds kube,
  # hyper, rustls, tonic and every workspace crate. Without `agent` only the work-agent library
  # is built beside BIN: the same features as the full build, without the agent binary's link.
  if [ "${2:-}" = agent ]; then
    log "building work-agent and $1 (release)"
    "$CARGO" build --release -p work-agent --bin work-agent -p e2e --bin "$1"
  else
    log "building $1 (release; the agent binary is given)"
    "$CARGO" build --release -p work-agent --lib -p e2e --bin "$1"
  fi
  TARGET_DIR=$("$CARGO" metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
  BENCH=$TARGET_DIR/release/$1
  [ -x "$BENCH" ] || { log "ERROR: $BENCH was not built"; exit 1; }
}

checkout_commit() {
  local commit
  commit=$(git rev-parse --short HEAD)
  git diff --quiet HEAD -- crates || commit="$commit+uncommitted"
  printf '%s\n' "$commit"
}
