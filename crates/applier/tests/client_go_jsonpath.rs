//! client-go's own jsonpath test tables (`util/jsonpath/jsonpath_test.go` and `parser_test.go`
//! of kubernetes/client-go), run through [`applier::JsonPath`] as status feedback runs it: every
//! case a feedback path can express, with client-go's expected output. Upstream's agent reads a
//! feedback path as client-go reads `{path}` with missing keys allowed, so these are the answers
//! a drop-in must give.
//!
//! Left out: the cases that only differ with `AllowMissingKeys(false)` (feedback always allows
//! missing keys; the same templates with it allowed are here). Templates (`range`/`end`, text
//! around an action, several actions) are listed as refused: a feedback path is one action, and
//! we refuse the rest with an error instead of reading part of it.
//!
//! The cases are data (`tests/data/client_go_jsonpath.json`, one a line, in client-go's order).
//! parser_test.go checks node trees: where the nodes are a literal or a key, the literal is checked
//! by evaluating it.
//!
//! Inputs are JSON. Go struct inputs become objects, whose members this crate keeps in key
//! order where Go keeps the struct's field order: such cases compare the values (`Values`) or the
//! sorted words (`Sorted`) instead of the printed text.

use applier::JsonPath;
use serde_json::{Number, Value};

/// What client-go gives for a template.
enum Expect {
    /// Printed as client-go prints results: values joined by spaces, structures as JSON.
    Prints(String),
    /// The same words, in any order (Go map order, or Go struct field order).
    Sorted(String),
    /// The same values (client-go's printed JSON values, space-separated).
    Values(String),
    /// client-go fails, parsing or walking.
    Fails,
    /// client-go parses it; no output to compare (parser_test.go checks node trees).
    Parses,
    /// client-go accepts it as a template; we refuse it when parsing, with this in the error.
    Refused(String),
}
use Expect::*;

const TYPES: &str = r#"{
  "bools": [true, false, true, false],
  "integers": [1, 2, 3, 4],
  "floats": [1.0, 2.2, 3.3, 4.0],
  "strings": ["one", "two", "three", "four"],
  "interfaces": [true, "one", 1, 1.1],
  "maps": [{"name": "one", "value": 1}, {"name": "two", "value": 2.02},
           {"name": "three", "value": 3.03}, {"name": "four", "value": 4.04}],
  "structs": [{"name": "one", "value": 1, "type": "integer"},
              {"name": "two", "value": 2.002, "type": "float"},
              {"name": "three", "value": 3, "type": "integer"},
              {"name": "four", "value": 4.004, "type": "float"}]
}"#;

const STORE: &str = r#"{
  "Name": "jsonpath",
  "Book": [
    {"Category": "reference", "Author": "Nigel Rees", "Title": "Sayings of the Centurey", "Price": 8.95},
    {"Category": "fiction", "Author": "Evelyn Waugh", "Title": "Sword of Honour", "Price": 12.99},
    {"Category": "fiction", "Author": "Herman Melville", "Title": "Moby Dick", "Price": 8.99}
  ],
  "Bicycle": [
    {"Color": "red", "Price": 19.95, "IsNew": true},
    {"Color": "green", "Price": 20.01, "IsNew": false}
  ],
  "Labels": {"engieer": 10, "web/html": 15, "k8s-app": 20},
  "Employees": {"jason": "manager", "dan": "clerk"}
}"#;

const POINTS: &str = r#"[
  {"id": "i1", "x": 4, "y": -5},
  {"id": "i2", "x": -2, "y": -5, "z": 1},
  {"id": "i3", "x": 8, "y": 3},
  {"id": "i4", "x": -6, "y": -1},
  {"id": "i5", "x": 0, "y": 2, "z": 1},
  {"id": "i6", "x": 1, "y": 4},
  {"id": "i7", "x": null, "y": 4}
]"#;

const NODES: &str = r#"{
  "kind": "List",
  "items": [
    {"kind": "None",
     "metadata": {"name": "127.0.0.1", "labels": {"kubernetes.io/hostname": "127.0.0.1"}},
     "status": {"capacity": {"cpu": "4"}, "ready": true,
                "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.1"}]}},
    {"kind": "None",
     "metadata": {"name": "127.0.0.2", "labels": {"kubernetes.io/hostname": "127.0.0.2"}},
     "status": {"capacity": {"cpu": "8"}, "ready": false,
                "addresses": [{"type": "LegacyHostIP", "address": "127.0.0.2"},
                              {"type": "another", "address": "127.0.0.3"}]}}
  ],
  "users": [
    {"name": "myself", "user": {}},
    {"name": "e2e", "user": {"username": "admin", "password": "secret"}}
  ]
}"#;

const ANNOTATED: &str = r#"{
  "kind": "List",
  "items": [
    {"kind": "Pod", "metadata": {"name": "pod1", "annotations": {"color": "blue"}}},
    {"kind": "Pod", "metadata": {"name": "pod2"}},
    {"kind": "Pod", "metadata": {"name": "pod3", "annotations": {"color": "green"}}},
    {"kind": "Pod", "metadata": {"name": "pod4", "annotations": {"color": "blue"}}}
  ]
}"#;

const CONTAINERS4: &str = r#"{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
  {"image": "radial/busyboxplus:curl", "name": "fake0"},
  {"image": "radial/busyboxplus:curl", "name": "fake1"},
  {"image": "radial/busyboxplus:curl", "name": "fake2"},
  {"image": "radial/busyboxplus:curl", "name": "fake3"}]}}"#;

const CONTAINERS6: &str = r#"{"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [
  {"image": "radial/busyboxplus:curl", "name": "fake0"},
  {"image": "radial/busyboxplus:curl", "name": "fake1"},
  {"image": "radial/busyboxplus:curl", "name": "fake2"},
  {"image": "radial/busyboxplus:curl", "name": "fake3"},
  {"image": "radial/busyboxplus:curl", "name": "fake4"},
  {"image": "radial/busyboxplus:curl", "name": "fake5"}]}}"#;

const RUNNING: &str = r#"{"kind": "List", "items": [
  {"kind": "Pod", "metadata": {"name": "pod1"}, "status": {"phase": "Running"}},
  {"kind": "Pod", "metadata": {"name": "pod2"}, "status": {"phase": "Running"}},
  {"kind": "Pod", "metadata": {"name": "pod3"}, "status": {"phase": "Running"}},
  {"resourceVersion": ""}]}"#;

/// For parser_test.go's filters, whose expected nodes are the quoted literals: one element per
/// literal, so that evaluating the filter shows which literal was read.
const OS_IMAGES: &str = r#"[
  {"status": {"nodeInfo": {"osImage": "()"}}},
  {"status": {"nodeInfo": {"osImage": "(\"\")"}}},
  {"test": "())("},
  {"status": {"nodeInfo": {"osImage": "Linux"}}},
  {"status": {"nodeInfo": {"osImage": "{[()]}"}}},
  {"status": {"nodeInfo": {"osImage": "''"}}},
  {"status": {"nodeInfo": {"osImage": "\"\""}}},
  {"status": {"nodeInfo": {"osImage": "\\'"}}}
]"#;

/// The cases, one a line: client-go's test function (`test`) and case name (`name`), the
/// `template`, the input (`input`, one of the documents above by name, or `input_json`) and what
/// client-go gives: `prints`, `sorted`, `values`, `refused` (with the text) or `fails`, `parses`.
const CASES: &str = include_str!("data/client_go_jsonpath.json");

/// One case of [`CASES`].
struct Case {
    /// Test function and case name, as client-go names them.
    name: String,
    template: String,
    input: String,
    expect: Expect,
}

/// The named input documents.
fn named_input(name: &str) -> Option<&'static str> {
    Some(match name {
        "TYPES" => TYPES,
        "STORE" => STORE,
        "POINTS" => POINTS,
        "NODES" => NODES,
        "ANNOTATED" => ANNOTATED,
        "CONTAINERS4" => CONTAINERS4,
        "CONTAINERS6" => CONTAINERS6,
        "RUNNING" => RUNNING,
        "OS_IMAGES" => OS_IMAGES,
        _ => return None,
    })
}

/// Reads [`CASES`]; Err says which case is malformed.
fn cases() -> Result<Vec<Case>, String> {
    let all: Vec<Value> =
        serde_json::from_str(CASES).map_err(|e| format!("the case table: {e}"))?;
    all.iter()
        .enumerate()
        .map(|(i, case)| {
            let text = |key: &str| case.get(key).and_then(Value::as_str);
            let name = format!(
                "{} {}",
                text("test").unwrap_or("?"),
                text("name").unwrap_or("?")
            );
            let template = text("template").ok_or(format!("case {i} ({name}): no template"))?;
            let input = match (text("input"), text("input_json")) {
                (Some(input), None) => named_input(input),
                (None, Some(json)) => Some(json),
                _ => None,
            }
            .ok_or(format!(
                "case {i} ({name}): no input, or not one of the documents"
            ))?;
            let expect = match (
                text("prints"),
                text("sorted"),
                text("values"),
                text("refused"),
            ) {
                (Some(want), ..) => Prints(want.into()),
                (_, Some(want), ..) => Sorted(want.into()),
                (_, _, Some(want), _) => Values(want.into()),
                (.., Some(hint)) => Refused(hint.into()),
                _ if case.get("fails").is_some() => Fails,
                _ if case.get("parses").is_some() => Parses,
                _ => return Err(format!("case {i} ({name}): no expectation")),
            };
            Ok(Case {
                name,
                template: template.to_string(),
                input: input.to_string(),
                expect,
            })
        })
        .collect()
}

/// A float as Go's `%v` and `encoding/json` print it (no `.0` on whole numbers).
fn go_number(n: &Number) -> String {
    match (n.as_i64(), n.as_u64(), n.as_f64()) {
        (Some(i), _, _) => i.to_string(),
        (_, Some(u), _) => u.to_string(),
        (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 1e15 => format!("{f:.0}"),
        (_, _, Some(f)) => f.to_string(),
        _ => n.to_string(),
    }
}

/// A structure as Go's `encoding/json` prints it (map keys sorted, as this crate keeps them).
fn go_json(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(_) => value.to_string(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_json).collect::<Vec<_>>().join(",")
        ),
        Value::Object(members) => format!(
            "{{{}}}",
            members
                .iter()
                .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), go_json(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
    }
}

/// One result as client-go's `PrintResults` prints it: strings bare, the rest as JSON.
fn go_print(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => go_json(other),
    }
}

fn sorted_words(text: &str) -> Vec<String> {
    let mut words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
    words.sort();
    words
}

/// Checks one case; Err says how it disagrees with client-go.
fn check(template: &str, input: &str, expect: &Expect) -> Result<(), String> {
    let doc: Value = serde_json::from_str(input).map_err(|e| format!("bad input: {e}"))?;
    let parsed = JsonPath::parse(template);
    let path = match (parsed, expect) {
        (Err(e), Refused(hint)) if e.contains(hint.as_str()) => return Ok(()),
        (Err(e), Refused(hint)) => return Err(format!("refused, but {e:?} lacks {hint:?}")),
        (Ok(_), Refused(_)) => return Err("accepted; it should be refused".into()),
        (Err(_), Fails) => return Ok(()),
        (Err(e), _) => return Err(format!("parse error {e:?}")),
        (Ok(_), Parses) => return Ok(()),
        (Ok(path), _) => path,
    };
    let found = path.select(&doc);
    let values: Vec<Value> = match (found, expect) {
        (Err(_), Fails) => return Ok(()),
        (Ok(v), Fails) => return Err(format!("gave {v:?}; client-go fails")),
        (Err(e), _) => return Err(format!("error {e:?}")),
        (Ok(v), _) => v.into_iter().map(|v| v.into_owned()).collect(),
    };
    let printed = values.iter().map(go_print).collect::<Vec<_>>().join(" ");
    let agrees = match expect {
        Prints(want) => printed == *want,
        Sorted(want) => sorted_words(&printed) == sorted_words(want),
        Values(want) => {
            let want: Result<Vec<Value>, _> = serde_json::Deserializer::from_str(want)
                .into_iter::<Value>()
                .collect();
            want.map_err(|e| format!("bad expectation: {e}"))? == values
        }
        Fails | Parses | Refused(_) => false,
    };
    if agrees {
        Ok(())
    } else {
        Err(format!("printed {printed:?}"))
    }
}

#[test]
fn client_go_test_tables_agree() {
    let cases = cases().unwrap_or_else(|e| panic!("{e}"));
    // Every case of client-go's tables that feedback can express (see the module doc).
    assert_eq!(cases.len(), 150);
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| {
            check(&case.template, &case.input, &case.expect)
                .err()
                .map(|why| format!("{} {:?}: {why}", case.name, case.template))
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases disagree with client-go:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn the_checker_notices_a_disagreement() {
    // The table test would pass vacuously if `check` accepted anything.
    assert!(check("{ .integers[0] }", TYPES, &Prints("2".into())).is_err());
    assert!(check("{ .integers[0] }", TYPES, &Fails).is_err());
    assert!(check("{ .integers[0] }", TYPES, &Refused("x".into())).is_err());
    assert!(check("{range .a}{end}", "null", &Prints(String::new())).is_err());
    assert!(
        check(
            "{ .structs[0] }",
            TYPES,
            &Values(r#"{"name":"two"}"#.into())
        )
        .is_err()
    );
}
