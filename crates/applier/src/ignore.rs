//! `ignoreFields` of server-side apply: which manifest fields to leave as the spoke has them.
//!
//! An ignored field is not simply dropped from the apply patch: server-side apply deletes a field
//! that its manager owned and no longer sends, so dropping a field the agent applied earlier would
//! remove it from the spoke. Instead the patch carries the spoke's current value, which changes
//! nothing on the spoke and keeps the field in place.

use std::collections::BTreeMap;

use serde_json::Value;
use work_api::{IgnoreField, IgnoreFieldsCondition};

use crate::ApplyError;
use crate::json_path::{self, Segment, Step};
use crate::manifest::content_hash;

/// Annotation recording, per JSON pointer, a hash of the value last applied for `OnSpokeChange`
/// fields, so a later apply can tell whether the spoke changed the field since.
pub const IGNORE_FIELDS_ANNOTATION: &str = "work.open-cluster-management.io/ignore-fields-applied";

/// Parses a Kubernetes JSONPath naming fields (see [`json_path::parse`]); filters, which
/// select rather than name a field, are refused.
pub fn parse_json_path(path: &str) -> Result<Vec<Segment>, ApplyError> {
    let invalid = |reason: String| ApplyError::InvalidIgnoreField {
        path: path.to_string(),
        reason,
    };
    let segments = json_path::parse(path).map_err(invalid)?;
    if segments.iter().any(|s| matches!(s, Segment::Filter { .. })) {
        return Err(invalid("filters are not supported in ignoreFields".into()));
    }
    if segments.is_empty() {
        return Err(invalid("the path names no field".into()));
    }
    Ok(segments)
}

/// Parses an RFC 6901 JSON pointer (`/spec/replicas`, `~1` for `/`, `~0` for `~`).
pub fn parse_json_pointer(pointer: &str) -> Result<Vec<Segment>, ApplyError> {
    let invalid = |reason: &str| ApplyError::InvalidIgnoreField {
        path: pointer.to_string(),
        reason: reason.to_string(),
    };
    let rest = pointer.strip_prefix('/').ok_or_else(|| {
        invalid("a JSON pointer must start with '/' (the whole object cannot be ignored)")
    })?;
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => out.push('~'),
                        Some('1') => out.push('/'),
                        _ => return Err(invalid("'~' must be followed by '0' or '1'")),
                    }
                } else {
                    out.push(c);
                }
            }
            Ok(Segment::Key(out))
        })
        .collect()
}

/// Parses the plain-path subset of jq (see [`json_path::parse_jq`]).
pub fn parse_jq_path(expression: &str) -> Result<Vec<Segment>, ApplyError> {
    let segments =
        json_path::parse_jq(expression).map_err(|reason| ApplyError::InvalidIgnoreField {
            path: expression.to_string(),
            reason,
        })?;
    if segments.is_empty() {
        return Err(ApplyError::InvalidIgnoreField {
            path: expression.to_string(),
            reason: "the path names no field".into(),
        });
    }
    Ok(segments)
}

/// Every concrete path in `doc` that `pattern` matches.
fn expand(pattern: &[Segment], doc: &Value) -> Vec<Vec<Step>> {
    json_path::walk(pattern, doc)
        .into_iter()
        .map(|(path, _)| path)
        .collect()
}

fn get<'a>(doc: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |node, step| match (step, node) {
        (Step::Key(k), Value::Object(m)) => m.get(k),
        (Step::Index(i), Value::Array(a)) => a.get(*i),
        _ => None,
    })
}

fn get_mut<'a>(doc: &'a mut Value, path: &[Step]) -> Option<&'a mut Value> {
    path.iter().try_fold(doc, |node, step| match (step, node) {
        (Step::Key(k), Value::Object(m)) => m.get_mut(k),
        (Step::Index(i), Value::Array(a)) => a.get_mut(*i),
        _ => None,
    })
}

/// Removes the field at `path` (an object key; array elements are never removed, which would
/// shift the others).
fn remove(doc: &mut Value, path: &[Step]) {
    if let Some((Step::Key(last), parent)) = path.split_last()
        && let Some(Value::Object(m)) = get_mut(doc, parent)
    {
        m.remove(last);
    }
}

fn pointer_of(path: &[Step]) -> String {
    path.iter()
        .map(|s| match s {
            Step::Key(k) => format!("/{}", k.replace('~', "~0").replace('/', "~1")),
            Step::Index(i) => format!("/{i}"),
        })
        .collect()
}

/// All path patterns of one ignoreFields entry (JSONPaths, JSON pointers and jq paths).
fn patterns_of(field: &IgnoreField) -> Result<Vec<Vec<Segment>>, ApplyError> {
    let mut out = Vec::new();
    for p in &field.json_paths {
        out.push(parse_json_path(p)?);
    }
    for p in &field.json_pointers {
        out.push(parse_json_pointer(p)?);
    }
    for p in &field.jq_path_expressions {
        out.push(parse_jq_path(p)?);
    }
    Ok(out)
}

/// The apply patch after `ignoreFields`, and the `OnSpokeChange` record to store with it.
#[derive(Clone, Debug, PartialEq)]
pub struct IgnorePlan {
    /// The patch to send.
    pub patch: Value,
    /// JSON pointer -> hash of the value applied (or kept) there, for `OnSpokeChange` fields.
    pub record: BTreeMap<String, String>,
}

/// Applies `ignoreFields` to an apply patch.
///
/// - `OnSpokePresent`: a field the patch sets that already exists on the spoke is sent with the
///   spoke's value (so it is never overwritten once present).
/// - `OnSpokeChange`: when the spoke value differs from the one last applied (per `last_applied`,
///   the record stored on the object) and the manifest still asks for that same last-applied
///   value, the spoke value is kept (sent as is, or left out when the spoke removed it). A
///   manifest that asks for a new value is applied: the hub's change of intent wins, as upstream.
///
/// Only fields the manifest sets are considered; `live` is None when the object does not exist.
pub fn plan_ignore_fields(
    patch: &Value,
    live: Option<&Value>,
    fields: &[IgnoreField],
    last_applied: &BTreeMap<String, String>,
) -> Result<IgnorePlan, ApplyError> {
    let mut out = patch.clone();
    let mut record = BTreeMap::new();
    for field in fields {
        for pattern in patterns_of(field)? {
            for path in expand(&pattern, patch) {
                let Some(wanted) = get(patch, &path) else {
                    continue;
                };
                let spoke = live.and_then(|l| get(l, &path));
                match &field.condition {
                    IgnoreFieldsCondition::OnSpokeChange => {
                        let pointer = pointer_of(&path);
                        let wanted_hash = content_hash(wanted);
                        let spoke_hash = content_hash(spoke.unwrap_or(&Value::Null));
                        let kept = match (live, last_applied.get(&pointer)) {
                            (Some(_), Some(last)) => *last != spoke_hash && *last == wanted_hash,
                            _ => false,
                        };
                        if kept {
                            set_or_remove(&mut out, &path, spoke);
                        }
                        // When kept, the last-applied hash equals the wanted one: either way the
                        // record says what the manifest asked for.
                        record.insert(pointer, wanted_hash);
                    }
                    // OnSpokePresent, and conditions this agent does not know (the safe reading:
                    // leave spoke values alone).
                    _ => {
                        if let Some(spoke) = spoke {
                            set_or_remove(&mut out, &path, Some(spoke));
                        }
                    }
                }
            }
        }
    }
    Ok(IgnorePlan { patch: out, record })
}

fn set_or_remove(doc: &mut Value, path: &[Step], value: Option<&Value>) {
    match value {
        Some(v) => {
            if let Some(slot) = get_mut(doc, path) {
                *slot = v.clone();
            }
        }
        None => remove(doc, path),
    }
}

/// Reads the `OnSpokeChange` record from a live object's annotation (empty when absent or not
/// ours to read).
pub fn read_record(live: Option<&Value>) -> BTreeMap<String, String> {
    live.and_then(|l| crate::manifest::annotation(l, IGNORE_FIELDS_ANNOTATION))
        .and_then(|s| serde_json::from_str::<BTreeMap<String, String>>(s).ok())
        .unwrap_or_default()
}

/// Stores the record in the patch's annotations (removes the annotation when there is none).
pub fn write_record(
    patch: &mut Value,
    record: &BTreeMap<String, String>,
) -> Result<(), ApplyError> {
    let meta = crate::manifest::metadata_mut(patch);
    if record.is_empty() {
        if let Some(Value::Object(a)) = meta.get_mut("annotations") {
            a.remove(IGNORE_FIELDS_ANNOTATION);
        }
        return Ok(());
    }
    let text = serde_json::to_string(record)
        .map_err(|e| ApplyError::InvalidManifest(format!("ignoreFields record: {e}")))?;
    let annotations = crate::manifest::string_map_mut(meta, "annotations");
    annotations.insert(IGNORE_FIELDS_ANNOTATION.into(), Value::String(text));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> Segment {
        Segment::Key(k.into())
    }

    fn field(condition: IgnoreFieldsCondition, paths: &[&str], pointers: &[&str]) -> IgnoreField {
        IgnoreField {
            condition,
            json_paths: paths.iter().map(|s| s.to_string()).collect(),
            json_pointers: pointers.iter().map(|s| s.to_string()).collect(),
            jq_path_expressions: Vec::new(),
        }
    }

    fn manifest(replicas: i64) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "annotations": {"a": "1"}},
               "spec": {"replicas": replicas, "paused": false,
                        "template": {"spec": {"containers": [{"name": "c", "image": "img:1"}, {"name": "s", "image": "side:1"}]}}}})
    }

    #[test]
    fn json_paths_parse() {
        assert_eq!(
            parse_json_path(".spec.replicas").ok(),
            Some(vec![key("spec"), key("replicas")])
        );
        assert_eq!(
            parse_json_path("{.spec.replicas}").ok(),
            Some(vec![key("spec"), key("replicas")])
        );
        assert_eq!(
            parse_json_path("$.spec.replicas").ok(),
            Some(vec![key("spec"), key("replicas")])
        );
        assert_eq!(
            parse_json_path(".metadata.annotations['a.b/c']").ok(),
            Some(vec![key("metadata"), key("annotations"), key("a.b/c")])
        );
        assert_eq!(
            parse_json_path(r".metadata.annotations.a\.b/c").ok(),
            Some(vec![key("metadata"), key("annotations"), key("a.b/c")])
        );
        assert_eq!(
            parse_json_path(".spec.containers[0].image").ok(),
            Some(vec![
                key("spec"),
                key("containers"),
                Segment::Index(0),
                key("image")
            ])
        );
        assert_eq!(
            parse_json_path(".spec.containers[*].image").ok(),
            Some(vec![
                key("spec"),
                key("containers"),
                Segment::Any,
                key("image")
            ])
        );
    }

    #[test]
    fn bad_json_paths_are_errors_naming_the_path() {
        for bad in [
            "",
            ".",
            "{.spec",
            ".spec[",
            ".spec..x",
            ".spec[?(@.x)]",
            ".a[x]",
        ] {
            let err = parse_json_path(bad)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.starts_with(&format!("invalid ignoreFields path \"{bad}\"")),
                "{bad:?}: {err:?}"
            );
        }
    }

    #[test]
    fn json_pointers_parse_with_escapes() {
        assert_eq!(
            parse_json_pointer("/spec/replicas").ok(),
            Some(vec![key("spec"), key("replicas")])
        );
        assert_eq!(
            parse_json_pointer("/metadata/annotations/a~1b~0c").ok(),
            Some(vec![key("metadata"), key("annotations"), key("a/b~c")])
        );
        assert!(parse_json_pointer("spec/replicas").is_err());
        assert!(parse_json_pointer("").is_err());
        assert!(parse_json_pointer("/a~2").is_err());
    }

    #[test]
    fn jq_plain_paths_parse_and_filters_are_refused() {
        assert_eq!(
            parse_jq_path(".spec.replicas").ok(),
            Some(vec![key("spec"), key("replicas")])
        );
        assert_eq!(
            parse_jq_path(".spec.containers[].image").ok(),
            Some(vec![
                key("spec"),
                key("containers"),
                Segment::Any,
                key("image")
            ])
        );
        assert_eq!(
            parse_jq_path(".metadata.annotations[\"a/b\"]").ok(),
            Some(vec![key("metadata"), key("annotations"), key("a/b")])
        );
        for bad in [
            ".spec.containers[] | select(.name == \"c\")",
            "del(.a)",
            "spec",
            ".",
        ] {
            assert!(parse_jq_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn on_spoke_present_keeps_spoke_value_once_present() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[".spec.replicas"],
            &[],
        )];
        let live = manifest(7);
        let plan = plan_ignore_fields(&manifest(3), Some(&live), &fields, &BTreeMap::new()).ok();
        let plan = plan.map(|p| p.patch).unwrap_or_default();
        assert_eq!(plan["spec"]["replicas"], json!(7));
        assert_eq!(
            plan["spec"]["paused"],
            json!(false),
            "other fields untouched"
        );
    }

    #[test]
    fn on_spoke_present_applies_when_absent_on_spoke_or_object_missing() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[],
            &["/spec/replicas"],
        )];
        let plan = plan_ignore_fields(&manifest(3), None, &fields, &BTreeMap::new()).ok();
        assert_eq!(
            plan.map(|p| p.patch["spec"]["replicas"].clone()),
            Some(json!(3))
        );
        let mut live = manifest(9);
        if let Some(spec) = live["spec"].as_object_mut() {
            spec.remove("replicas");
        }
        let plan = plan_ignore_fields(&manifest(3), Some(&live), &fields, &BTreeMap::new()).ok();
        assert_eq!(
            plan.map(|p| p.patch["spec"]["replicas"].clone()),
            Some(json!(3))
        );
    }

    #[test]
    fn wildcards_reach_every_list_item() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[".spec.template.spec.containers[*].image"],
            &[],
        )];
        let mut live = manifest(1);
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("img:spoke");
        live["spec"]["template"]["spec"]["containers"][1]["image"] = json!("side:spoke");
        let plan = plan_ignore_fields(&manifest(1), Some(&live), &fields, &BTreeMap::new()).ok();
        let patch = plan.map(|p| p.patch).unwrap_or_default();
        assert_eq!(
            patch["spec"]["template"]["spec"]["containers"][0]["image"],
            json!("img:spoke")
        );
        assert_eq!(
            patch["spec"]["template"]["spec"]["containers"][1]["image"],
            json!("side:spoke")
        );
    }

    #[test]
    fn on_spoke_change_applies_first_and_records_hash() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokeChange,
            &[".spec.replicas"],
            &[],
        )];
        let plan = plan_ignore_fields(&manifest(3), None, &fields, &BTreeMap::new()).ok();
        let plan = plan.unwrap_or(IgnorePlan {
            patch: Value::Null,
            record: BTreeMap::new(),
        });
        assert_eq!(plan.patch["spec"]["replicas"], json!(3));
        assert_eq!(
            plan.record.get("/spec/replicas"),
            Some(&content_hash(&json!(3)))
        );
    }

    #[test]
    fn on_spoke_change_keeps_a_spoke_edit_while_the_manifest_is_unchanged() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokeChange,
            &[".spec.replicas"],
            &[],
        )];
        let record: BTreeMap<String, String> =
            [("/spec/replicas".to_string(), content_hash(&json!(3)))].into();

        // Spoke still has what we applied: apply as usual.
        let plan = plan_ignore_fields(&manifest(3), Some(&manifest(3)), &fields, &record).ok();
        assert_eq!(
            plan.map(|p| p.patch["spec"]["replicas"].clone()),
            Some(json!(3))
        );

        // Spoke changed it to 5: keep 5.
        let plan = plan_ignore_fields(&manifest(3), Some(&manifest(5)), &fields, &record).ok();
        let plan = plan.unwrap_or(IgnorePlan {
            patch: Value::Null,
            record: BTreeMap::new(),
        });
        assert_eq!(plan.patch["spec"]["replicas"], json!(5));
        assert_eq!(
            plan.record, record,
            "record still names the value we applied"
        );

        // Spoke removed it: leave it out of the patch.
        let mut removed = manifest(3);
        removed["spec"]
            .as_object_mut()
            .map(|s| s.remove("replicas"));
        let plan = plan_ignore_fields(&manifest(3), Some(&removed), &fields, &record).ok();
        assert_eq!(
            plan.map(|p| p.patch["spec"].get("replicas").is_none()),
            Some(true)
        );

        // The manifest now asks for 4: the new intent is applied.
        let plan = plan_ignore_fields(&manifest(4), Some(&manifest(5)), &fields, &record).ok();
        let plan = plan.unwrap_or(IgnorePlan {
            patch: Value::Null,
            record: BTreeMap::new(),
        });
        assert_eq!(plan.patch["spec"]["replicas"], json!(4));
        assert_eq!(
            plan.record.get("/spec/replicas"),
            Some(&content_hash(&json!(4)))
        );
    }

    #[test]
    fn fields_the_manifest_does_not_set_are_left_alone() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[".spec.minReadySeconds"],
            &[],
        )];
        let mut live = manifest(1);
        live["spec"]["minReadySeconds"] = json!(10);
        let plan = plan_ignore_fields(&manifest(1), Some(&live), &fields, &BTreeMap::new()).ok();
        assert_eq!(plan.map(|p| p.patch), Some(manifest(1)));
    }

    #[test]
    fn an_invalid_path_fails_the_plan() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[".spec["],
            &[],
        )];
        let err = plan_ignore_fields(&manifest(1), None, &fields, &BTreeMap::new()).err();
        assert!(matches!(err, Some(ApplyError::InvalidIgnoreField { .. })));
    }

    #[test]
    fn record_round_trips_through_the_annotation() {
        let record: BTreeMap<String, String> =
            [("/spec/replicas".to_string(), "abc".to_string())].into();
        let mut patch = manifest(1);
        assert!(write_record(&mut patch, &record).is_ok());
        assert_eq!(read_record(Some(&patch)), record);
        assert_eq!(patch["metadata"]["annotations"]["a"], json!("1"));
        assert!(write_record(&mut patch, &BTreeMap::new()).is_ok());
        assert!(read_record(Some(&patch)).is_empty());
        let mut garbage = manifest(1);
        garbage["metadata"]["annotations"][IGNORE_FIELDS_ANNOTATION] = json!("not json");
        assert!(read_record(Some(&garbage)).is_empty());
    }
}
