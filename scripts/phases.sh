#!/usr/bin/env bash
# phases.sh NAME CMD [NAME CMD ...]
# Runs each CMD (a shell command line) in order, stops at the first that fails, and prints how
# long each phase took as a table at the end, on every exit path (a failure, Ctrl-C), so the slow
# phase of a `make test` is named rather than guessed. Exits with the failed phase's code.
#   PHASES_REPORT=FILE  also writes the table there (markdown), e.g. for docs/testing.md.
set -uo pipefail
[ $(($# % 2)) = 0 ] && [ $# -ge 2 ] || { sed -n '2,6p' "${BASH_SOURCE[0]}" >&2; exit 2; }

names=()
times=()
results=()
t_all=$SECONDS

fmt() { printf '%dm %02ds' $(($1 / 60)) $(($1 % 60)); }

report() {
  local i total=$((SECONDS - t_all)) out
  out=$(
    printf '| phase | time | result |\n| --- | ---: | --- |\n'
    for i in "${!names[@]}"; do
      printf '| %s | %s | %s |\n' "${names[$i]}" "$(fmt "${times[$i]}")" "${results[$i]}"
    done
    printf '| **total** | **%s** | |\n' "$(fmt "$total")"
  )
  printf '\n[phases] how long each phase took:\n%s\n' "$out" >&2
  if [ -n "${PHASES_REPORT:-}" ]; then printf '%s\n' "$out" >"$PHASES_REPORT"; fi
}

# A phase cut short by a signal still shows, with the time it ran.
current=""
t_phase=$SECONDS
on_signal() {
  if [ -n "$current" ]; then
    names+=("$current"); times+=($((SECONDS - t_phase))); results+=("interrupted")
  fi
  report
  exit 130
}
trap on_signal INT TERM

rc=0
while [ $# -gt 0 ]; do
  current=$1 cmd=$2
  shift 2
  printf '\n[phases] %s: %s\n' "$current" "$cmd" >&2
  t_phase=$SECONDS
  bash -c "$cmd"
  rc=$?
  names+=("$current"); times+=($((SECONDS - t_phase)))
  if [ "$rc" = 0 ]; then results+=("ok"); else results+=("FAILED (exit $rc)"); fi
  current=""
  [ "$rc" = 0 ] || break
done
report
exit "$rc"
