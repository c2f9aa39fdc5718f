#!/usr/bin/env bash
# bench-grpc.sh [--flavors "ours upstream"] [--agent-bin BIN] [--bursts 20,50,100] [--rounds N]
#               [--out DIR] [--label L] [--agent-arg ARG]... [--timeout SECONDS] [--keep]
#               [--agent-commit C]
# CloudEvents over gRPC, our agent and upstream's `work agent` one after the other behind the same
# OCM `server grpc`, hub and spoke (ocm-grpc-env.sh): bursts of 20, 50, 100 ManifestWorks created
# on the hub -> first status and Applied+Available on the hub (p50/p99), delete -> work gone (the
# server releases its finalizer on the agent's Deleted status), agent RSS and CPU (bench-grpc.py).
# Writes DIR/grpc-<label>.{json,md} (default DIR target/bench; `make bench-grpc` writes docs/bench)
# with the load average before and after each agent. Needs OCM_MIRROR (or cached OCM binaries);
# --agent-bin defaults to a release build of this checkout (built first); --agent-arg adds an
# argument to our agent's command line (e.g. --log-level=debug); --timeout bounds each burst's wait
# for statuses and for deletes (default 180 s; what is missing then is counted); --keep leaves the
# temp dir (logs). CI never runs it.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
GE_NAME=bench-grpc
# shellcheck source=e2e/scripts/ocm-grpc-env.sh
. "$HERE/ocm-grpc-env.sh"

FLAVORS="ours upstream" BIN="" BURSTS=20,50,100 ROUNDS=1 OUT=$ROOT/target/bench LABEL="" KEEP=0 OURS_ARGS=() TIMEOUT=180 AGENT_COMMIT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --flavors) FLAVORS=$2; shift 2 ;;
    --agent-bin) BIN=$2; shift 2 ;;
    --bursts) BURSTS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --label) LABEL=$2; shift 2 ;;
    --agent-arg) OURS_ARGS+=("$2"); shift 2 ;;
    --keep) KEEP=1; shift ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --agent-commit) AGENT_COMMIT=$2; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "bench-grpc.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -z "$BIN" ]; then
  ge_log "building work-agent (release)"
  (cd "$ROOT" && "${CARGO:-cargo}" build --release -p work-agent --bin work-agent)
  BIN=$ROOT/target/release/work-agent
fi
BIN=$(readlink -f "$BIN")
# The commit our binary was built from (--agent-commit when it is not this checkout's HEAD).
commit=${AGENT_COMMIT:-$(git -C "$ROOT" rev-parse --short HEAD)}
LABEL=${LABEL:-$commit}
mkdir -p "$OUT"
OUT=$(readlink -f "$OUT")

trap ge_exit EXIT INT TERM

ge_up
[ -x "$BIN" ] || ge_die "no agent binary $BIN"
hub_server=$(sed -n 's/^ *server: *//p' "$GE_HUB_KC" | head -1)
pki=$GE_DIR/run/hub/pki
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

runs=()
for round in $(seq "$ROUNDS"); do
  for flavor in $FLAVORS; do
    case "$flavor" in
      ours) bin=$BIN extra=("${OURS_ARGS[@]}") ;;
      upstream) bin=$GE_BINS/work extra=() ;;
      *) ge_die "unknown flavor $flavor" ;;
    esac
    load0=$(loadavg)
    ge_agent_start "$flavor" "$bin" "${extra[@]}"
    # Connected and resynced: a first work goes through inside bench-grpc.py (its warm-up).
    sleep 3
    kill -0 "$GE_AGENT_PID" 2>/dev/null || { tail -20 "$GE_AGENT_LOG" >&2; ge_die "the $flavor agent exited"; }
    res=$GE_DIR/$flavor-$round.json
    ge_log "round $round: $flavor (load $load0)"
    python3 "$HERE/bench-grpc.py" --server "$hub_server" --ca "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
      --namespace "$GE_CLUSTER" --bursts "$BURSTS" --agent-pid "$GE_AGENT_PID" --prefix "r$round-$flavor" --timeout "$TIMEOUT" >"$res" ||
      { tail -20 "$GE_AGENT_LOG" >&2; ge_die "the benchmark of $flavor failed"; }
    load1=$(loadavg)
    ge_agent_stop
    python3 - "$res" "$flavor" "$round" "$bin" "$load0" "$load1" <<'EOF'
import json, sys, hashlib
p, flavor, rnd, binary, l0, l1 = sys.argv[1:]
d = json.load(open(p))
d.update(flavor=flavor, round=int(rnd), binary=binary, loadavg_before=l0, loadavg_after=l1,
         binary_sha256=hashlib.sha256(open(binary, "rb").read()).hexdigest())
json.dump(d, open(p, "w"), indent=1)
EOF
    runs+=("$res")
  done
done

python3 - "$OUT/grpc-$LABEL" "$commit" "$(cat "$GE_BINS/commit" 2>/dev/null || echo unknown)" "${OCM_REF:-v1.3.1}" "$BURSTS" "${runs[@]}" <<'EOF'
import json, sys, platform, os, datetime
base, commit, ocm_commit, ocm_ref, bursts, *runs = sys.argv[1:]
docs = [json.load(open(r)) for r in runs]
report = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": commit, "ocm_ref": ocm_ref, "ocm_commit": ocm_commit, "cpus": os.cpu_count(),
    "kernel": platform.release(), "bursts": bursts, "runs": docs,
}
json.dump(report, open(base + ".json", "w"), indent=1)

def f(v):
    return "–" if v is None else (f"{v:.0f}" if isinstance(v, (int, float)) else str(v))

md = [f"# CloudEvents over gRPC: work agents behind OCM's `server grpc` ({report['date']})", "",
      f"Commit {commit}; OCM {ocm_ref} ({ocm_commit[:12]}) `server grpc` and `work agent`, built from the "
      f"OCM repository; {report['cpus']} CPUs. Hub and spoke: minimal local control planes; works: "
      "ManifestWorks of one ConfigMap (~2 KiB) created on the hub as fast as one client can; times "
      "measured on the hub from each create / delete request. Command: `e2e/scripts/bench-grpc.sh`.", "",
      "| agent | round | burst | first status p50 / p99 (ms) | Applied+Available p50 / p99 (ms) | all applied (s) | delete → gone p50 / p99 (ms) | hub status writes per work | RSS after (MiB) | load before → after |",
      "|---|---|---|---|---|---|---|---|---|---|"]
for d in docs:
    for b in d["bursts"]:
        fs, ap, dl = b["first_status"], b["applied_available"], b["delete_round_trip"]
        miss = ""
        if b["missing_applied"] or b["missing_deleted"]:
            miss = f" (missing: {b['missing_applied']} applied, {b['missing_deleted']} deleted)"
        a = b.get("agent_after") or {}
        md.append(f"| {d['flavor']} | {d['round']} | {b['burst']}{miss} | {f(fs.get('p50_ms'))} / {f(fs.get('p99_ms'))} "
                  f"| {f(ap.get('p50_ms'))} / {f(ap.get('p99_ms'))} | {b['all_applied_s']} "
                  f"| {f(dl.get('p50_ms'))} / {f(dl.get('p99_ms'))} | {b['hub_updates_per_work_until_applied']} "
                  f"| {a.get('rss_mib', '–')} | {d['loadavg_before']} → {d['loadavg_after']} |")
md += ["", "| agent | round | RSS at start / end (MiB) | peak RSS (MiB) | CPU over the run (s) | binary |", "|---|---|---|---|---|---|"]
for d in docs:
    s, e = d.get("agent_start") or {}, d.get("agent_end") or {}
    md.append(f"| {d['flavor']} | {d['round']} | {s.get('rss_mib', '–')} / {e.get('rss_mib', '–')} | {e.get('hwm_mib', '–')} "
              f"| {e.get('cpu_s', '–')} | `{os.path.basename(d['binary'])}` sha256 {d['binary_sha256'][:12]} |")
open(base + ".md", "w").write("\n".join(md) + "\n")
print(base + ".md")
EOF
cat "$OUT/grpc-$LABEL.md"
