#!/usr/bin/env bash
# cel-conformance.sh [--update]     (make cel-conformance)
# Our CEL environment against cel-go v0.26 with the Kubernetes environment, on upstream's own
# test tables: the expressions of cel-go's ext and cel tests (the latter hold its optional
# library: first, last, unwrapOpt, optional.unwrap), k8s.io/apiserver/pkg/cel/library's tests
# and apiextensions-apiserver's validation rule tables (benches/celgo -extract), answered by
# cel-go (benches/celgo -eval) and by us (examples/conformance). Needs Go and the modules in the
# Go module cache (`go mod download` in benches/celgo fetches them); CI does not run it, it runs
# tests/cel/upstream_tables.rs on the committed answers instead. --update rewrites those answers
# (tests/fixtures/celgo_tables.jsonl). Report: target/cel-conformance/{ours.jsonl,summary}.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
CARGO=${CARGO:-cargo}
GO=${GO:-go}
cd "$ROOT"
TARGET_DIR=$("$CARGO" metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')
OUT=$TARGET_DIR/cel-conformance
mkdir -p "$OUT"
(cd "$HERE/celgo" && "$GO" build -o "$OUT/celgo" .)
MODS=$(cd "$HERE/celgo" && "$GO" env GOMODCACHE)
CELGO=$(cd "$HERE/celgo" && "$GO" list -m -f '{{.Dir}}' github.com/google/cel-go)
APISERVER=$(cd "$HERE/celgo" && "$GO" list -m -f '{{.Dir}}' k8s.io/apiserver)
APIEXT=$MODS/k8s.io/apiextensions-apiserver@$(cd "$HERE/celgo" && "$GO" list -m -f '{{.Version}}' k8s.io/apiserver)
if [ ! -d "$APIEXT" ]; then
  (cd "$OUT" && "$GO" mod download -json "k8s.io/apiextensions-apiserver@${APIEXT##*@}" >/dev/null)
fi
"$OUT/celgo" -extract "$CELGO/ext" "$CELGO/cel" "$APISERVER/pkg/cel/library" \
  "$APIEXT/pkg/apiserver/schema/cel/validation_test.go" >"$OUT/cases.jsonl"
"$OUT/celgo" -eval <"$OUT/cases.jsonl" >"$OUT/celgo.jsonl"
"$CARGO" run -q -p conditions --example conformance <"$OUT/celgo.jsonl" >"$OUT/ours.jsonl"
tail -n 1 "$OUT/ours.jsonl" | tee "$OUT/summary"
if [ "${1:-}" = "--update" ]; then
  # The committed answers: every case cel-go compiles, and those it rejects for a reason other
  # than a name the test declared (its variables, which these tables do not bind).
  python3 - "$OUT/celgo.jsonl" >"$ROOT/crates/conditions/tests/fixtures/celgo_tables.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    case = json.loads(line)
    err = case.get("err", "")
    if err.startswith("compile:") and "undeclared reference" in err:
        continue
    print(json.dumps(case, ensure_ascii=False))
PY
  echo "updated crates/conditions/tests/fixtures/celgo_tables.jsonl" >&2
fi
