//! Status feedback (`feedbackRules`): values read from the live object with JSON paths, reported
//! in `status.resourceStatus.manifests[].statusFeedback`. Pure.
//!
//! Paths are the subset of Kubernetes JSONPath that feedback rules use in practice: fields
//! (`.status.readyReplicas`, `.metadata.labels['app']`), indexes (`.spec.containers[0].image`) and
//! equality filters (`.status.conditions[?(@.type=="Ready")].status`). A path that finds nothing
//! yields no value (not an error), as upstream.

use serde_json::Value;
use work_api::{FeedbackRule, FeedbackType, FeedbackValue, FieldValue, JsonPath, ValueType};

/// Longest JSON text reported as a `JsonRaw` value by default (upstream's
/// `--max-json-raw-length`).
pub const MAX_JSON_RAW: usize = 1024;

/// The well-known status paths of a kind (upstream's list).
fn well_known_paths(group: &str, kind: &str) -> &'static [(&'static str, &'static str)] {
    match (group, kind) {
        ("apps", "Deployment") => &[
            ("ReadyReplicas", ".status.readyReplicas"),
            ("Replicas", ".status.replicas"),
            ("AvailableReplicas", ".status.availableReplicas"),
        ],
        ("apps", "DaemonSet") => &[
            ("NumberReady", ".status.numberReady"),
            ("DesiredNumberScheduled", ".status.desiredNumberScheduled"),
            ("NumberAvailable", ".status.numberAvailable"),
        ],
        ("batch", "Job") => &[
            (
                "JobComplete",
                r#".status.conditions[?(@.type=="Complete")].status"#,
            ),
            ("JobSucceeded", ".status.succeeded"),
        ],
        ("", "Pod") => &[
            (
                "PodReady",
                r#".status.conditions[?(@.type=="Ready")].status"#,
            ),
            ("PodPhase", ".status.phase"),
        ],
        _ => &[],
    }
}

/// The values the rules give on `object`, and the errors met (joined) if any. With `raw_json`
/// (the `RawFeedbackJsonString` gate, with the longest JSON text allowed) a path reaching a
/// structure or several values reports them as JSON text; without it a path reports its first
/// value, and a structure is an error.
pub fn collect(
    rules: &[FeedbackRule],
    group: &str,
    version: &str,
    kind: &str,
    object: &Value,
    raw_json: Option<usize>,
) -> (Vec<FeedbackValue>, Option<String>) {
    let mut values = Vec::new();
    let mut errors = Vec::new();
    for rule in rules {
        match &rule.type_ {
            FeedbackType::WellKnownStatus => {
                let paths = well_known_paths(group, kind);
                if paths.is_empty() {
                    errors.push(format!(
                        "no well-known status for kind {kind} in group {group:?}"
                    ));
                }
                for (name, path) in paths {
                    read_one(name, path, object, raw_json, &mut values, &mut errors);
                }
            }
            FeedbackType::JsonPaths => {
                for JsonPath {
                    name,
                    version: want,
                    path,
                } in &rule.json_paths
                {
                    if want
                        .as_deref()
                        .is_some_and(|v| !v.is_empty() && v != version)
                    {
                        errors.push(format!("version of path {name} does not match {version}"));
                        continue;
                    }
                    read_one(name, path, object, raw_json, &mut values, &mut errors);
                }
            }
            other => errors.push(format!("unknown feedback rule type {:?}", other.as_str())),
        }
    }
    // One value per name: the first rule that produced it wins.
    let mut seen = std::collections::BTreeSet::new();
    values.retain(|v: &FeedbackValue| seen.insert(v.name.clone()));
    let error = (!errors.is_empty()).then(|| errors.join("; "));
    (values, error)
}

fn read_one(
    name: &str,
    path: &str,
    object: &Value,
    raw_json: Option<usize>,
    values: &mut Vec<FeedbackValue>,
    errors: &mut Vec<String>,
) {
    match evaluate(path, object) {
        Ok(found) => match to_field_value(found, raw_json) {
            Ok(Some(field_value)) => values.push(FeedbackValue {
                name: name.to_string(),
                field_value,
            }),
            Ok(None) => {}
            Err(e) => errors.push(format!("{name}: {e}")),
        },
        Err(e) => errors.push(format!("{name}: invalid path {path:?}: {e}")),
    }
}

fn to_field_value(
    found: Vec<&Value>,
    raw_json: Option<usize>,
) -> Result<Option<FieldValue>, String> {
    let value = match found.as_slice() {
        [] => return Ok(None),
        [one, ..] if raw_json.is_none() => (*one).clone(),
        [one] => (*one).clone(),
        many => Value::Array(many.iter().map(|v| (*v).clone()).collect()),
    };
    let mut fv = FieldValue::default();
    match value {
        Value::Null => return Ok(None),
        Value::Bool(b) => {
            fv.type_ = ValueType::Boolean;
            fv.boolean = Some(b);
        }
        Value::String(s) => {
            fv.type_ = ValueType::String;
            fv.string = Some(s);
        }
        Value::Number(n) if n.is_i64() => {
            fv.type_ = ValueType::Integer;
            fv.integer = n.as_i64();
        }
        other if raw_json.is_none() => {
            return Err(format!(
                "the value is {}, not a string, integer or boolean (structures are reported \
                 with the RawFeedbackJsonString feature gate)",
                json_kind(&other)
            ));
        }
        other => {
            let raw = serde_json::to_string(&other).map_err(|e| e.to_string())?;
            let limit = raw_json.unwrap_or(MAX_JSON_RAW);
            if raw.len() > limit {
                return Err(format!("value longer than {limit} characters"));
            }
            fv.type_ = ValueType::JsonRaw;
            fv.json_raw = Some(raw);
        }
    }
    Ok(Some(fv))
}

/// What a JSON value is, for messages.
fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// Every value the path reaches (missing keys reach nothing).
fn evaluate<'a>(path: &str, object: &'a Value) -> Result<Vec<&'a Value>, String> {
    let pattern = applier::json_path::parse(path)?;
    Ok(applier::json_path::select(&pattern, object))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job() -> Value {
        json!({"status": {"succeeded": 1, "conditions": [
            {"type": "Complete", "status": "True"}, {"type": "Failed", "status": "False"}]}})
    }

    #[test]
    fn well_known_job_status() {
        let rules = vec![FeedbackRule {
            type_: FeedbackType::WellKnownStatus,
            json_paths: vec![],
        }];
        let (values, err) = collect(&rules, "batch", "v1", "Job", &job(), None);
        assert_eq!(err, None);
        assert_eq!(values.len(), 2);
        assert_eq!(values[0].name, "JobComplete");
        assert_eq!(values[0].field_value.string.as_deref(), Some("True"));
        assert_eq!(values[1].field_value.type_, ValueType::Integer);
        assert_eq!(values[1].field_value.integer, Some(1));
        let (none, err) = collect(&rules, "", "v1", "ConfigMap", &json!({}), None);
        assert!(none.is_empty());
        assert!(err.is_some_and(|e| e.contains("ConfigMap")));
    }

    fn path(name: &str, path: &str) -> JsonPath {
        JsonPath {
            name: name.into(),
            version: None,
            path: path.into(),
        }
    }

    #[test]
    fn json_paths_of_every_value_type() {
        let obj = json!({"metadata": {"labels": {"app.kubernetes.io/name": "x"}},
            "spec": {"ok": true, "list": [{"a": 1}, {"a": 2}], "obj": {"k": "v"}}});
        let rules = vec![FeedbackRule {
            type_: FeedbackType::JsonPaths,
            json_paths: vec![
                path("label", ".metadata.labels['app.kubernetes.io/name']"),
                path("ok", ".spec.ok"),
                path("first", ".spec.list[0].a"),
                path("all", ".spec.list[*].a"),
                path("obj", ".spec.obj"),
                path("missing", ".spec.nothing.here"),
            ],
        }];
        let (values, err) = collect(&rules, "", "v1", "Thing", &obj, Some(MAX_JSON_RAW));
        assert_eq!(err, None);
        let by = |n: &str| values.iter().find(|v| v.name == n).map(|v| &v.field_value);
        assert_eq!(by("label").and_then(|v| v.string.as_deref()), Some("x"));
        assert_eq!(by("ok").and_then(|v| v.boolean), Some(true));
        assert_eq!(by("first").and_then(|v| v.integer), Some(1));
        assert_eq!(by("all").and_then(|v| v.json_raw.as_deref()), Some("[1,2]"));
        assert_eq!(
            by("obj").and_then(|v| v.json_raw.as_deref()),
            Some(r#"{"k":"v"}"#)
        );
        assert!(by("missing").is_none());
    }

    #[test]
    fn without_raw_json_a_structure_is_an_error_and_a_list_gives_its_first_value() {
        let obj = json!({"spec": {"list": [{"a": 1}, {"a": 2}], "obj": {"k": "v"}, "n": 3}});
        let rules = vec![FeedbackRule {
            type_: FeedbackType::JsonPaths,
            json_paths: vec![
                path("all", ".spec.list[*].a"),
                path("obj", ".spec.obj"),
                path("n", ".spec.n"),
            ],
        }];
        let (values, err) = collect(&rules, "", "v1", "Thing", &obj, None);
        let by = |n: &str| values.iter().find(|v| v.name == n).map(|v| &v.field_value);
        assert_eq!(by("all").and_then(|v| v.integer), Some(1));
        assert!(by("obj").is_none());
        assert_eq!(by("n").and_then(|v| v.integer), Some(3));
        let err = err.expect("the structure is an error");
        assert!(err.contains("obj: the value is an object"), "{err}");
    }

    #[test]
    fn well_known_daemonset_status() {
        let rules = vec![FeedbackRule {
            type_: FeedbackType::WellKnownStatus,
            json_paths: vec![],
        }];
        let ds = json!({"status": {"numberReady": 2, "desiredNumberScheduled": 3,
            "numberAvailable": 1}});
        let (values, err) = collect(&rules, "apps", "v1", "DaemonSet", &ds, None);
        assert_eq!(err, None);
        let names: Vec<&str> = values.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(
            names,
            ["NumberReady", "DesiredNumberScheduled", "NumberAvailable"]
        );
    }

    #[test]
    fn bad_paths_and_versions_are_errors_not_panics() {
        let rules = vec![FeedbackRule {
            type_: FeedbackType::JsonPaths,
            json_paths: vec![
                JsonPath {
                    name: "a".into(),
                    version: None,
                    path: ".spec[".into(),
                },
                JsonPath {
                    name: "b".into(),
                    version: Some("v2".into()),
                    path: ".spec".into(),
                },
                JsonPath {
                    name: "c".into(),
                    version: None,
                    path: "[?(@.x>1)]".into(),
                },
            ],
        }];
        let (values, err) = collect(
            &rules,
            "",
            "v1",
            "Thing",
            &json!({"spec": 1}),
            Some(MAX_JSON_RAW),
        );
        assert!(values.is_empty());
        let err = err.expect("errors");
        assert!(
            err.contains("a: invalid path")
                && err.contains("version of path b")
                && err.contains("c: invalid path"),
            "{err}"
        );
    }
}
