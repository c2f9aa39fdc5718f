#!/usr/bin/env bash
# cel-parity.sh [ROUNDS]     (make bench-cel-parity ROUNDS=3)
# Our condition-rule evaluation against cel-go with the Kubernetes CEL environment, on the same
# machine at the same time: ROUNDS rounds (default 3), each running our `cpu_time/new_version`
# and `cpu_time/no_cache` benchmarks (benches/evaluate.rs: a new object version, conversion
# included, with the object cache on and off; thread CPU time) and then the cel-go program in
# benches/celgo (same rules and fixtures, the object bound as an unstructured map as the upstream
# OCM agent does; process CPU time with GOMAXPROCS=1, so the garbage collector's work counts).
# Report: target/bench-cel-parity/report.{md,json}.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
ROUNDS=${1:-${ROUNDS:-3}}
CARGO=${CARGO:-cargo}
GO=${GO:-go}
log() { printf '[cel-parity] %s\n' "$*" >&2; }
cd "$ROOT"

TARGET_DIR=$("$CARGO" metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
OUT=$TARGET_DIR/bench-cel-parity
# Criterion writes its results under $CARGO_TARGET_DIR, or else under ./target of the package it
# runs in (crates/conditions/target), not where this script reads them.
export CARGO_TARGET_DIR=$TARGET_DIR
mkdir -p "$OUT"
rm -f "$OUT"/round-*.jsonl

log "building the cel-go benchmark"
(cd "$HERE/celgo" && "$GO" build -o "$OUT/celgo" .)
log "building our benchmark (bench profile)"
"$CARGO" bench -p conditions --bench evaluate --no-run

load() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(load)
for round in $(seq 1 "$ROUNDS"); do
  log "round $round/$ROUNDS: ours"
  "$CARGO" bench -p conditions --bench evaluate -- --warm-up-time 1 --measurement-time 3 \
    'cpu_time/(new_version|no_cache)' >"$OUT/round-$round-ours.log" 2>&1
  python3 - "$TARGET_DIR/criterion/cpu_time" >"$OUT/round-$round-ours.jsonl" <<'PY'
import json, os, sys
base = sys.argv[1]
for d in sorted(os.listdir(base)):
    for kind, who in (("new_version_", "ours"), ("no_cache_", "ours_no_cache")):
        if d.startswith(kind):
            with open(os.path.join(base, d, "new", "estimates.json")) as f:
                median = json.load(f)["median"]["point_estimate"]
            print(json.dumps({"rule": d[len(kind):], "who": who, "cpu_ns": median}))
PY
  log "round $round/$ROUNDS: cel-go"
  GOMAXPROCS=1 "$OUT/celgo" -fixtures "$HERE/fixtures" -benchtime 3s >"$OUT/round-$round-celgo.jsonl"
done
LOAD_END=$(load)

python3 - "$OUT" "$ROUNDS" "$LOAD_START" "$LOAD_END" "$(git rev-parse --short HEAD)" "$(nproc)" <<'PY'
import datetime, json, statistics, sys
out, rounds, load_start, load_end, commit, cores = sys.argv[1:]
results = {}
for r in range(1, int(rounds) + 1):
    for file in ("ours", "celgo"):
        with open(f"{out}/round-{r}-{file}.jsonl") as f:
            for line in f:
                row = json.loads(line)
                who = row.get("who", file)
                rule = results.setdefault(row["rule"], {"ours": [], "ours_no_cache": [], "celgo": []})
                rule[who].append(row["cpu_ns"] / 1000)
def fmt(xs):
    return f"{statistics.median(xs):.1f} ({min(xs):.1f}-{max(xs):.1f})" if xs else "-"
lines = [
    "# Condition rules: ours vs cel-go",
    "",
    f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}, {cores} cores, "
    f"load average {load_start} at the start, {load_end} at the end; {rounds} interleaved rounds.",
    "",
    "CPU µs per evaluation of the rule on a new object version (conversion included), median (range over rounds).",
    "Ours: thread CPU time, with the default object cache (`cpu_time/new_version`: a new resourceVersion",
    "every call) and with the cache off (`cpu_time/no_cache`); cel-go: process CPU time with GOMAXPROCS=1.",
    "",
    "| Rule | ours | ours, cache off | cel-go | ours / cel-go | ours ≤ cel-go |",
    "|---|---|---|---|---|---|",
]
summary = {}
for rule, r in results.items():
    if not r["ours"] or not r["celgo"]:
        continue
    ratio = statistics.median(r["ours"]) / statistics.median(r["celgo"])
    met = "yes" if ratio <= 1 else "no"
    lines.append(f"| `{rule}` | {fmt(r['ours'])} | {fmt(r['ours_no_cache'])} | {fmt(r['celgo'])} | {ratio:.2f} | {met} |")
    summary[rule] = {"ours_us": r["ours"], "ours_no_cache_us": r["ours_no_cache"], "celgo_us": r["celgo"], "ratio": ratio}
with open(f"{out}/report.md", "w") as f:
    f.write("\n".join(lines) + "\n")
with open(f"{out}/report.json", "w") as f:
    json.dump({"commit": commit, "load_start": load_start, "load_end": load_end, "rules": summary}, f, indent=1)
print("\n".join(lines))
PY
log "report: $OUT/report.md"
