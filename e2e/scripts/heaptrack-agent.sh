#!/usr/bin/env bash
# heaptrack-agent.sh BIN ARGS...: runs BIN under heaptrack's preload library, keeping this
# script's pid (exec), so that a benchmark's SIGKILL reaches the agent itself; the profile goes
# to ${HEAPTRACK_DIR:-/tmp/heaptrack}/agent.<pid>.zst once the agent exits.
# Use as a benchmark's agent: a wrapper `exec e2e/scripts/heaptrack-agent.sh BIN "$@"` given as
# --agent-bin. Read it with `heaptrack_print -f FILE --print-peaks 1`.
set -euo pipefail
bin=$1
shift
dir=${HEAPTRACK_DIR:-/tmp/heaptrack}
lib=${HEAPTRACK_PRELOAD:-/usr/lib/heaptrack/libheaptrack_preload.so}
interpret=${HEAPTRACK_INTERPRET:-/usr/lib/heaptrack/libexec/heaptrack_interpret}
mkdir -p "$dir"
pipe="$dir/pipe.$$"
mkfifo "$pipe"
("$interpret" <"$pipe" | zstd -q -c >"$dir/agent.$$.zst"; rm -f "$pipe") &
export LD_PRELOAD=$lib DUMP_HEAPTRACK_OUTPUT=$pipe
exec "$bin" "$@"
