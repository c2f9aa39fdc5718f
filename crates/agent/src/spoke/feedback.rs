//! Status feedback (`feedbackRules`): values read from the live object with JSON paths, reported
//! in `status.resourceStatus.manifests[].statusFeedback`. Pure.
//!
//! A path is read as upstream reads it: client-go's jsonpath on `{path}` with missing keys
//! allowed (see [`applier::JsonPath`] for the forms), the first value reported, or with the
//! `RawFeedbackJsonString` gate all the values as JSON text. A path that finds nothing yields no
//! value (not an error); a path client-go fails to walk (an index out of range, a comparison of
//! different types) is an error of its rule, as upstream.

use std::borrow::Cow;

use applier::JsonPath as Path;
use serde_json::Value;
use work_api::{FeedbackRule, FeedbackType, FeedbackValue, FieldValue, JsonPath, ValueType};

/// Longest JSON text reported as a `JsonRaw` value by default (upstream's
/// `--max-json-raw-length`).
pub use crate::config::MAX_JSON_RAW;

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

/// A feedback rule that gave no value because of an error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    /// The path's name, or the rule type where the rule as a whole failed.
    pub rule: String,
    /// Why.
    pub error: String,
}

/// The errors as one status message (`rule: error; ...`); None without errors.
pub fn joined(errors: &[RuleError]) -> Option<String> {
    (!errors.is_empty()).then(|| {
        errors
            .iter()
            .map(|e| format!("{}: {}", e.rule, e.error))
            .collect::<Vec<_>>()
            .join("; ")
    })
}

/// The values the rules give on `object`, and the errors met. With `raw_json` (the
/// `RawFeedbackJsonString` gate, with the longest JSON text allowed) a path reaching a structure
/// or several values reports them as JSON text; without it a path reports its first value, and a
/// structure is an error.
pub fn collect(
    rules: &[FeedbackRule],
    group: &str,
    version: &str,
    kind: &str,
    object: &Value,
    raw_json: Option<usize>,
) -> (Vec<FeedbackValue>, Vec<RuleError>) {
    let mut values = Vec::new();
    let mut errors = Vec::new();
    for rule in rules {
        match &rule.type_ {
            FeedbackType::WellKnownStatus => {
                let paths = well_known_paths(group, kind);
                if paths.is_empty() {
                    errors.push(RuleError {
                        rule: "WellKnownStatus".into(),
                        error: format!("no well-known status for kind {kind} in group {group:?}"),
                    });
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
                        errors.push(RuleError {
                            rule: name.clone(),
                            error: format!("the version of the path does not match {version}"),
                        });
                        continue;
                    }
                    read_one(name, path, object, raw_json, &mut values, &mut errors);
                }
            }
            other => errors.push(RuleError {
                rule: other.as_str().to_string(),
                error: "unknown feedback rule type".into(),
            }),
        }
    }
    // One value per name: the first rule that produced it wins.
    let mut seen = std::collections::BTreeSet::new();
    values.retain(|v: &FeedbackValue| seen.insert(v.name.clone()));
    (values, errors)
}

fn read_one(
    name: &str,
    path: &str,
    object: &Value,
    raw_json: Option<usize>,
    values: &mut Vec<FeedbackValue>,
    errors: &mut Vec<RuleError>,
) {
    let found = Path::parse(path)
        .map_err(|e| format!("invalid path {path:?}: {e}"))
        .and_then(|p| {
            p.select(object)
                .map_err(|e| format!("path {path:?} failed: {e}"))
        });
    match found.and_then(|found| to_field_value(found, raw_json)) {
        Ok(Some(field_value)) => values.push(FeedbackValue {
            name: name.to_string(),
            field_value,
        }),
        Ok(None) => {}
        Err(error) => errors.push(RuleError {
            rule: name.to_string(),
            error,
        }),
    }
}

fn to_field_value(
    found: Vec<Cow<'_, Value>>,
    raw_json: Option<usize>,
) -> Result<Option<FieldValue>, String> {
    let many;
    let value: &Value = match found.as_slice() {
        [] => return Ok(None),
        [one, ..] if raw_json.is_none() => one,
        [one] => one,
        all => {
            many = Value::Array(all.iter().map(|v| v.as_ref().clone()).collect());
            &many
        }
    };
    let mut fv = FieldValue::default();
    match value {
        Value::Null => return Ok(None),
        Value::Bool(b) => {
            fv.type_ = ValueType::Boolean;
            fv.boolean = Some(*b);
        }
        Value::String(s) => {
            fv.type_ = ValueType::String;
            fv.string = Some(s.clone());
        }
        Value::Number(n) if n.is_i64() => {
            fv.type_ = ValueType::Integer;
            fv.integer = n.as_i64();
        }
        other if raw_json.is_none() => {
            return Err(format!(
                "the value is {}, not a string, integer or boolean (structures are reported \
                 with the RawFeedbackJsonString feature gate)",
                applier::json_path::kind_of(other)
            ));
        }
        other => {
            let raw = serde_json::to_string(other).map_err(|e| e.to_string())?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What `collect` gave, with the errors as the status message.
    fn with_message(
        (values, errors): (Vec<FeedbackValue>, Vec<RuleError>),
    ) -> (Vec<FeedbackValue>, Option<String>) {
        (values, joined(&errors))
    }

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
        let (values, err) = with_message(collect(&rules, "batch", "v1", "Job", &job(), None));
        assert_eq!(err, None);
        assert_eq!(values.len(), 2);
        assert_eq!(values[0].name, "JobComplete");
        assert_eq!(values[0].field_value.string.as_deref(), Some("True"));
        assert_eq!(values[1].field_value.type_, ValueType::Integer);
        assert_eq!(values[1].field_value.integer, Some(1));
        let (none, err) = with_message(collect(&rules, "", "v1", "ConfigMap", &json!({}), None));
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
                path("label", r".metadata.labels.app\.kubernetes\.io/name"),
                // As client-go: `['a.b']` is `.a.b`, so this names no label.
                path("dotted", ".metadata.labels['app.kubernetes.io/name']"),
                path("ok", ".spec.ok"),
                path("first", ".spec.list[0].a"),
                path("all", ".spec.list[*].a"),
                path("obj", ".spec.obj"),
                path("missing", ".spec.nothing.here"),
            ],
        }];
        let (values, err) =
            with_message(collect(&rules, "", "v1", "Thing", &obj, Some(MAX_JSON_RAW)));
        assert_eq!(err, None);
        let by = |n: &str| values.iter().find(|v| v.name == n).map(|v| &v.field_value);
        assert_eq!(by("label").and_then(|v| v.string.as_deref()), Some("x"));
        assert!(by("dotted").is_none());
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
        let (values, err) = with_message(collect(&rules, "", "v1", "Thing", &obj, None));
        let by = |n: &str| values.iter().find(|v| v.name == n).map(|v| &v.field_value);
        assert_eq!(by("all").and_then(|v| v.integer), Some(1));
        assert!(by("obj").is_none());
        assert_eq!(by("n").and_then(|v| v.integer), Some(3));
        let err = err.expect("the structure is an error");
        assert!(err.contains("obj: the value is an object"), "{err}");
    }

    #[test]
    fn the_whole_object_as_maestro_reads_it() {
        // Maestro's e2e suite: `{name: resource, path: "@"}` on a Deployment, with the
        // RawFeedbackJsonString gate Maestro's agent turns on.
        let deploy = json!({"kind": "Deployment", "metadata": {"name": "nginx"},
            "status": {"readyReplicas": 1, "replicas": 1}});
        let rules = vec![FeedbackRule {
            type_: FeedbackType::JsonPaths,
            json_paths: vec![path("resource", "@"), path("root", "{$}")],
        }];
        let (values, err) = with_message(collect(
            &rules,
            "apps",
            "v1",
            "Deployment",
            &deploy,
            Some(1 << 20),
        ));
        assert_eq!(err, None);
        for v in &values {
            let raw = v.field_value.json_raw.as_deref().unwrap_or_default();
            assert_eq!(
                serde_json::from_str::<Value>(raw).ok(),
                Some(deploy.clone()),
                "{}",
                v.name
            );
        }
        assert_eq!(values.len(), 2);
        // Without the gate a structure is an error of that rule, as upstream.
        let (values, err) =
            with_message(collect(&rules, "apps", "v1", "Deployment", &deploy, None));
        assert!(values.is_empty());
        assert!(err.is_some_and(|e| e.contains("resource: the value is an object")));
    }

    #[test]
    fn client_go_forms_and_walk_errors() {
        let pod = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True", "n": 2}]}});
        let rules = vec![FeedbackRule {
            type_: FeedbackType::JsonPaths,
            json_paths: vec![
                path("last", ".spec.containers[-1].image"),
                path("names", "..name"),
                path("count", ".status.conditions[?(@.n>1)].n"),
                path("out", ".spec.containers[5].image"),
            ],
        }];
        let (values, errors) = collect(&rules, "", "v1", "Pod", &pod, Some(MAX_JSON_RAW));
        let by = |n: &str| values.iter().find(|v| v.name == n).map(|v| &v.field_value);
        assert_eq!(by("last").and_then(|v| v.string.as_deref()), Some("y"));
        assert_eq!(
            by("names").and_then(|v| v.json_raw.as_deref()),
            Some(r#"["a","b"]"#)
        );
        assert_eq!(by("count").and_then(|v| v.integer), Some(2));
        // client-go fails on an index out of range; the rule reports it, the others still count.
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].rule, "out");
        assert!(errors[0].error.contains("out of bounds"), "{:?}", errors[0]);
    }

    #[test]
    fn well_known_daemonset_status() {
        let rules = vec![FeedbackRule {
            type_: FeedbackType::WellKnownStatus,
            json_paths: vec![],
        }];
        let ds = json!({"status": {"numberReady": 2, "desiredNumberScheduled": 3,
            "numberAvailable": 1}});
        let (values, err) = with_message(collect(&rules, "apps", "v1", "DaemonSet", &ds, None));
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
                    path: "{range .spec}{end}".into(),
                },
                JsonPath {
                    name: "d".into(),
                    version: None,
                    path: "[?(@.x>1)]".into(),
                },
            ],
        }];
        let (values, err) = with_message(collect(
            &rules,
            "",
            "v1",
            "Thing",
            &json!({"spec": 1}),
            Some(MAX_JSON_RAW),
        ));
        assert!(values.is_empty());
        let err = err.expect("errors");
        assert!(
            err.contains("a: invalid path")
                && err.contains("b: the version of the path does not match v1")
                && err.contains("c: invalid path")
                && err.contains("d: path \"[?(@.x>1)]\" failed"),
            "{err}"
        );
    }
}
