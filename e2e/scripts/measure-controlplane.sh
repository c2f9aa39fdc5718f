#!/usr/bin/env bash
# measure-controlplane.sh [ROUNDS]
# Measures, on this machine, what docs/testing.md reports: the warm start time of a full control
# plane (`controlplane.sh up` with cached binaries, until the kwok node is Ready) and of a minimal
# one, the start time of all three suite control planes together (test-clusters.sh up), and the
# RSS of every process once the three are idle and again after the smoke tests ran.
# Uses its own RUN_ROOT, so running control planes of the suite are not touched.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
ROUNDS=${1:-3}
export RUN_ROOT=${MEASURE_RUN_ROOT:-$ROOT/.run/measure}
CP=$HERE/controlplane.sh
trap '"$HERE/test-clusters.sh" down >/dev/null 2>&1 || true; "$CP" down full >/dev/null 2>&1 || true; "$CP" down minimal >/dev/null 2>&1 || true' EXIT

"$HERE/build-controlplane.sh" >/dev/null
now() { date +%s.%N; }
secs() { python3 -c "import sys;print(f'{float(sys.argv[2])-float(sys.argv[1]):.1f}')" "$1" "$2"; }

rss_table() {
  local dir pidf pid name
  printf '%-14s %-24s %8s\n' cluster process RSS_MiB
  for dir in "$RUN_ROOT"/*/; do
    for pidf in "$dir"*.pid; do
      [ -e "$pidf" ] || continue
      read -r pid _ <"$pidf"
      name=$(basename "$pidf" .pid)
      awk -v c="$(basename "$dir")" -v n="$name" '/^VmRSS/ {printf "%-14s %-24s %8.0f\n", c, n, $2/1024}' "/proc/$pid/status"
    done
  done
}

echo "## $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "## warm start, $ROUNDS rounds each (binaries cached)"
for kind in full minimal; do
  for i in $(seq 1 "$ROUNDS"); do
    flag=""
    [ "$kind" = minimal ] && flag=--minimal
    t0=$(now)
    # shellcheck disable=SC2086
    "$CP" up "$kind" $flag >/dev/null 2>&1
    t1=$(now)
    echo "$kind control plane ready in $(secs "$t0" "$t1") s"
    "$CP" down "$kind" >/dev/null 2>&1
  done
done

t0=$(now)
"$HERE/test-clusters.sh" up >/dev/null 2>&1
t1=$(now)
echo "hub + hub-upstream + spoke (parallel, CRDs installed) ready in $(secs "$t0" "$t1") s"
sleep 10
echo
echo "## RSS after start (idle 10 s)"
rss_table
# shellcheck disable=SC1091
. "$RUN_ROOT/clusters.env"
if WORK_AGENT_BIN=${WORK_AGENT_BIN:-/bin/true} cargo test -q -p e2e --test api_server -- smoke:: --skip agent_process >/dev/null 2>&1; then
  echo
  echo "## RSS after the smoke tests"
  rss_table
else
  echo "(smoke tests failed; RSS after tests not measured)"
fi
echo
echo "## load after: $(cut -d' ' -f1-3 /proc/loadavg)"
