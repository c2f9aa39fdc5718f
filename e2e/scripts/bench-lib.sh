# shellcheck shell=bash
# bench-lib.sh: sourced by bench-agent.sh and bench-mqtt.sh: what both do before their benchmark
# runs. Needs CARGO and a `log` function.
#
#   has_arg NAME ARGS...   whether ARGS hold NAME or NAME=...
#   bench_build BIN        release build of work-agent and the e2e binary BIN; sets TARGET_DIR and
#                          BENCH (the built BIN)
#   checkout_commit        this checkout's short HEAD, with "+uncommitted" when crates/ changed

has_arg() {
  local want=$1 a
  shift
  for a in "$@"; do
    case "$a" in "$want" | "$want="*) return 0 ;; esac
  done
  return 1
}

bench_build() {
  # Always both: building e2e alone unifies features differently and rebuilds the dependencies.
  log "building work-agent and $1 (release)"
  "$CARGO" build --release -p work-agent --bin work-agent -p e2e --bin "$1"
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
