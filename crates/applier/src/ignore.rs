//! `ignoreFields` of server-side apply: which manifest fields to leave as the spoke has them.
//!
//! An ignored field is not simply dropped from the apply patch: server-side apply deletes a field
//! that its manager owned and no longer sends, so dropping a field the agent applied earlier would
//! remove it from the spoke. Instead the patch carries the spoke's current value, which changes
//! nothing on the spoke and keeps the field in place.
//!
//! When a manifest has `ignoreFields`, the object carries [`CONFIG_SPEC_HASH_ANNOTATION`]: a hash
//! of the manifest without its `OnSpokePresent` fields. It tells a later apply whether the
//! manifest changed since, which decides `OnSpokeChange`.

use serde_json::Value;
use work_api::{IgnoreField, IgnoreFieldsCondition};

use crate::ApplyError;
use crate::json_path::{JsonPath, Node, Step};
use crate::manifest::{annotation, content_hash, set_annotation};

/// Annotation holding a hash of the manifest as last applied, without its `OnSpokePresent`
/// fields; written on objects whose manifest has `ignoreFields` (the key other OCM agents use).
pub const CONFIG_SPEC_HASH_ANNOTATION: &str = "open-cluster-management.io/config-spec-hash";

/// Parses a Kubernetes JSONPath naming fields (see [`JsonPath::parse_field_path`]): keys,
/// non-negative indexes and wildcards. Filters, recursive descent, slices, unions and literals
/// select rather than name fields, and are refused.
pub fn parse_json_path(path: &str) -> Result<JsonPath, ApplyError> {
    let invalid = |reason: String| ApplyError::InvalidIgnoreField {
        path: path.to_string(),
        reason,
    };
    let parsed = JsonPath::parse_field_path(path).map_err(invalid)?;
    if parsed.nodes().is_empty() {
        return Err(invalid("the path names no field".into()));
    }
    for node in parsed.nodes() {
        let refused = match node {
            Node::Field(key) if key.is_empty() => "empty key",
            Node::Field(_) | Node::Wildcard => continue,
            Node::Slice(s) if s.is_all() || s.index().is_some_and(|i| i >= 0) => continue,
            Node::Slice(_) => "only non-negative indexes and [*] are supported in ignoreFields",
            Node::Filter(_) => "filters are not supported in ignoreFields",
            Node::Recursive => "recursive descent (..) is not supported in ignoreFields",
            Node::Union(_) => "unions are not supported in ignoreFields",
            Node::Text(_) | Node::Constant(_) => "literals name no field",
        };
        return Err(invalid(refused.into()));
    }
    Ok(parsed)
}

/// Parses an RFC 6901 JSON pointer (`/spec/replicas`, `~1` for `/`, `~0` for `~`) into its
/// reference tokens.
pub fn parse_json_pointer(pointer: &str) -> Result<Vec<String>, ApplyError> {
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
            Ok(out)
        })
        .collect()
}

/// Checks a jq path expression (the subset of jq that [`crate::jq`] accepts) without running it.
pub fn check_jq_path(expression: &str) -> Result<(), ApplyError> {
    crate::jq::validate(expression).map_err(|reason| ApplyError::InvalidIgnoreField {
        path: expression.to_string(),
        reason,
    })
}

/// Every concrete path in `doc` that `path` names (a field path's walk cannot fail).
fn expand(path: &JsonPath, doc: &Value) -> Vec<Vec<Step>> {
    path.walk(doc)
        .unwrap_or_default()
        .into_iter()
        .map(|(steps, _)| steps)
        .collect()
}

/// The concrete path a JSON pointer names in `doc`, if it names one: a token is a key of an
/// object or a decimal index of a list.
fn pointer_path(tokens: &[String], doc: &Value) -> Option<Vec<Step>> {
    let mut node = doc;
    let mut steps = Vec::with_capacity(tokens.len());
    for token in tokens {
        match node {
            Value::Object(m) => {
                node = m.get(token)?;
                steps.push(Step::Key(token.clone()));
            }
            Value::Array(a) => {
                let i: usize = token.parse().ok()?;
                node = a.get(i)?;
                steps.push(Step::Index(i));
            }
            _ => return None,
        }
    }
    Some(steps)
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

/// One path pattern of an ignoreFields entry.
enum Pattern<'a> {
    /// A JSONPath, parsed.
    JsonPath(JsonPath),
    /// A JSON pointer's reference tokens.
    Pointer(Vec<String>),
    /// A jq path expression, as written.
    Jq(&'a str),
}

impl Pattern<'_> {
    /// The concrete paths the pattern names in `doc`; `bound_by` bounds a jq expression's work.
    fn paths(&self, doc: &Value, bound_by: &[&Value]) -> Result<Vec<Vec<Step>>, ApplyError> {
        match self {
            Self::JsonPath(path) => Ok(expand(path, doc)),
            Self::Pointer(tokens) => Ok(pointer_path(tokens, doc).into_iter().collect()),
            Self::Jq(expression) => crate::jq::paths(expression, doc, bound_by).map_err(|reason| {
                ApplyError::InvalidIgnoreField {
                    path: expression.to_string(),
                    reason,
                }
            }),
        }
    }
}

/// All path patterns of one ignoreFields entry (JSONPaths, JSON pointers and jq expressions).
fn patterns_of(field: &IgnoreField) -> Result<Vec<Pattern<'_>>, ApplyError> {
    let mut out = Vec::new();
    for p in &field.json_paths {
        out.push(Pattern::JsonPath(parse_json_path(p)?));
    }
    for p in &field.json_pointers {
        out.push(Pattern::Pointer(parse_json_pointer(p)?));
    }
    for p in &field.jq_path_expressions {
        out.push(Pattern::Jq(p));
    }
    Ok(out)
}

/// The apply patch after `ignoreFields`.
#[derive(Clone, Debug, PartialEq)]
pub struct IgnorePlan {
    /// The patch to send (with [`CONFIG_SPEC_HASH_ANNOTATION`] when there are ignoreFields).
    pub patch: Value,
    /// The hash written in [`CONFIG_SPEC_HASH_ANNOTATION`]; None without ignoreFields.
    pub spec_hash: Option<String>,
}

/// Whether an entry's condition keeps a field once it exists on the spoke (`OnSpokePresent`,
/// and conditions this agent does not know: the safe reading leaves spoke values alone).
fn keeps_present(condition: &IgnoreFieldsCondition) -> bool {
    !matches!(condition, IgnoreFieldsCondition::OnSpokeChange)
}

/// Applies `ignoreFields` to an apply patch.
///
/// - `OnSpokePresent`: a field the patch sets that already exists on the spoke is sent with the
///   spoke's value (so it is never overwritten once present). For a jq expression, "exists on
///   the spoke" means the expression names the same path in the live object.
/// - `OnSpokeChange`: while the manifest is the one last applied (the live object's
///   [`CONFIG_SPEC_HASH_ANNOTATION`] matches), the spoke's value is kept (sent as is, or left
///   out when the spoke removed it); once the manifest changes, its values are applied again.
///
/// Only fields the manifest sets are considered; `live` is None when the object does not exist.
/// An invalid path or jq expression is an [`ApplyError::InvalidIgnoreField`].
pub fn plan_ignore_fields(
    patch: &Value,
    live: Option<&Value>,
    fields: &[IgnoreField],
) -> Result<IgnorePlan, ApplyError> {
    if fields.is_empty() {
        return Ok(IgnorePlan {
            patch: patch.clone(),
            spec_hash: None,
        });
    }
    let bound_by: Vec<&Value> = [Some(patch), live].into_iter().flatten().collect();
    let mut resolved = Vec::new();
    for field in fields {
        for pattern in patterns_of(field)? {
            let paths = pattern.paths(patch, &bound_by)?;
            resolved.push((field, pattern, paths));
        }
    }

    // The hash: the manifest without the fields the spoke keeps once present.
    let mut hashed = patch.clone();
    let mut dropped: Vec<&Vec<Step>> = resolved
        .iter()
        .filter(|(field, _, _)| keeps_present(&field.condition))
        .flat_map(|(_, _, paths)| paths)
        .collect();
    // Deepest and last first, so removing a list item does not shift the ones still to remove.
    dropped.sort_by(|a, b| b.cmp(a));
    for path in dropped {
        remove_any(&mut hashed, path);
    }
    let spec_hash = content_hash(&hashed);
    let unchanged =
        live.and_then(|l| annotation(l, CONFIG_SPEC_HASH_ANNOTATION)) == Some(spec_hash.as_str());

    let mut out = patch.clone();
    if let Some(live) = live {
        for (field, pattern, paths) in &resolved {
            if keeps_present(&field.condition) {
                let on_spoke = match pattern {
                    Pattern::JsonPath(_) | Pattern::Pointer(_) => None,
                    // Where the expression cannot run on the live object, fall back to
                    // "the same path exists there".
                    Pattern::Jq(_) => pattern.paths(live, &bound_by).ok(),
                };
                for path in paths {
                    let named = on_spoke.as_ref().is_none_or(|p| p.contains(path));
                    if let Some(spoke) = get(live, path).filter(|_| named) {
                        set_or_remove(&mut out, path, Some(spoke));
                    }
                }
            } else if unchanged {
                for path in paths {
                    set_or_remove(&mut out, path, get(live, path));
                }
            }
        }
    }
    set_annotation(&mut out, CONFIG_SPEC_HASH_ANNOTATION, &spec_hash);
    Ok(IgnorePlan {
        patch: out,
        spec_hash: Some(spec_hash),
    })
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

/// Removes the value at `path`: an object key, or a list item (for the hash only, where the
/// removals are done last index first).
fn remove_any(doc: &mut Value, path: &[Step]) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    match (last, get_mut(doc, parent)) {
        (Step::Key(k), Some(Value::Object(m))) => {
            m.remove(k);
        }
        (Step::Index(i), Some(Value::Array(a))) if *i < a.len() => {
            a.remove(*i);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(k: &str) -> Step {
        Step::Key(k.into())
    }

    /// The concrete paths a field path names in `doc`.
    fn named(path: &str, doc: &Value) -> Option<Vec<Vec<Step>>> {
        parse_json_path(path).ok().map(|p| expand(&p, doc))
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
    fn json_paths_name_fields() {
        let doc = json!({"spec": {"replicas": 1, "containers": [{"image": "a"}, {"image": "b"}]},
                         "metadata": {"annotations": {"a.b/c": "x", "a": {"b/c": "y"}}}});
        let replicas = Some(vec![vec![key("spec"), key("replicas")]]);
        assert_eq!(named(".spec.replicas", &doc), replicas);
        assert_eq!(named("{.spec.replicas}", &doc), replicas);
        assert_eq!(named("$.spec.replicas", &doc), replicas);
        let dotted = Some(vec![vec![
            key("metadata"),
            key("annotations"),
            key("a.b/c"),
        ]]);
        // A quoted key is one key here (client-go would read `['a.b/c']` as `.a.b/c`).
        assert_eq!(named(".metadata.annotations['a.b/c']", &doc), dotted);
        assert_eq!(named(r#".metadata.annotations["a.b/c"]"#, &doc), dotted);
        assert_eq!(named(r".metadata.annotations.a\.b/c", &doc), dotted);
        let image = |i| vec![key("spec"), key("containers"), Step::Index(i), key("image")];
        assert_eq!(
            named(".spec.containers[0].image", &doc),
            Some(vec![image(0)])
        );
        assert_eq!(
            named(".spec.containers[*].image", &doc),
            Some(vec![image(0), image(1)])
        );
        assert_eq!(
            named(".spec.containers.*.image", &doc),
            Some(vec![image(0), image(1)])
        );
        // Out of range or into what is not a list: nothing to ignore, not an error.
        assert_eq!(named(".spec.containers[5].image", &doc), Some(vec![]));
        assert_eq!(named(".spec.replicas[0]", &doc), Some(vec![]));
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
            ".a[-1]",
            ".a[0:2]",
            ".a[0,1]",
            ".a{",
            "{.a}{.b}",
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
            Some(vec!["spec".to_string(), "replicas".to_string()])
        );
        assert_eq!(
            parse_json_pointer("/metadata/annotations/a~1b~0c").ok(),
            Some(vec![
                "metadata".to_string(),
                "annotations".to_string(),
                "a/b~c".to_string()
            ])
        );
        let doc = json!({"l": [{"k": 1}]});
        let tokens = |p: &str| parse_json_pointer(p).unwrap_or_default();
        assert_eq!(
            pointer_path(&tokens("/l/0/k"), &doc),
            Some(vec![key("l"), Step::Index(0), key("k")])
        );
        assert_eq!(pointer_path(&tokens("/l/1/k"), &doc), None);
        assert_eq!(pointer_path(&tokens("/l/k"), &doc), None);
        assert!(parse_json_pointer("spec/replicas").is_err());
        assert!(parse_json_pointer("").is_err());
        assert!(parse_json_pointer("/a~2").is_err());
    }

    #[test]
    fn jq_expressions_are_checked() {
        assert!(check_jq_path(".spec.replicas").is_ok());
        assert!(check_jq_path(r#".spec.containers[] | select(.name == "c")"#).is_ok());
        for bad in [
            ".spec.containers[] | invalid syntax here",
            "del(.a)",
            "repeat(.)",
        ] {
            assert!(
                matches!(
                    check_jq_path(bad),
                    Err(ApplyError::InvalidIgnoreField { .. })
                ),
                "{bad:?}"
            );
        }
    }

    fn plan(patch: &Value, live: Option<&Value>, fields: &[IgnoreField]) -> Value {
        plan_ignore_fields(patch, live, fields)
            .map(|p| p.patch)
            .unwrap_or_default()
    }

    /// `live` as written by an apply of `manifest` with `fields` (the hash annotation set).
    fn applied(manifest: &Value, fields: &[IgnoreField]) -> Value {
        plan(manifest, None, fields)
    }

    #[test]
    fn on_spoke_present_keeps_spoke_value_once_present() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[".spec.replicas"],
            &[],
        )];
        let live = manifest(7);
        let patch = plan(&manifest(3), Some(&live), &fields);
        assert_eq!(patch["spec"]["replicas"], json!(7));
        assert_eq!(
            patch["spec"]["paused"],
            json!(false),
            "other fields untouched"
        );
        assert!(annotation(&patch, CONFIG_SPEC_HASH_ANNOTATION).is_some());
    }

    #[test]
    fn on_spoke_present_applies_when_absent_on_spoke_or_object_missing() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[],
            &["/spec/replicas"],
        )];
        assert_eq!(
            plan(&manifest(3), None, &fields)["spec"]["replicas"],
            json!(3)
        );
        let mut live = manifest(9);
        if let Some(spec) = live["spec"].as_object_mut() {
            spec.remove("replicas");
        }
        assert_eq!(
            plan(&manifest(3), Some(&live), &fields)["spec"]["replicas"],
            json!(3)
        );
    }

    #[test]
    fn the_hash_leaves_out_on_spoke_present_fields_only() {
        let present = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[".spec.replicas"],
            &[],
        )];
        let change = [field(
            IgnoreFieldsCondition::OnSpokeChange,
            &[".spec.replicas"],
            &[],
        )];
        let hash = |m: &Value, f: &[IgnoreField]| {
            plan_ignore_fields(m, None, f)
                .ok()
                .and_then(|p| p.spec_hash)
                .unwrap_or_default()
        };
        assert_eq!(hash(&manifest(1), &present), hash(&manifest(2), &present));
        assert_ne!(hash(&manifest(1), &change), hash(&manifest(2), &change));
        assert!(!hash(&manifest(1), &change).is_empty());
        let none = plan_ignore_fields(&manifest(1), None, &[]).ok();
        assert_eq!(
            none.and_then(|p| p.spec_hash),
            None,
            "no ignoreFields: no hash"
        );
    }

    #[test]
    fn jq_on_spoke_present_keeps_the_selected_list_item() {
        let with_env = |java: &str| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"template": {"spec": {"containers": [{"name": "app", "env": [
                    {"name": "APP_ENV", "value": "production"}, {"name": "JAVA_OPTS", "value": java}]}]}}}})
        };
        let fields = [IgnoreField {
            condition: IgnoreFieldsCondition::OnSpokePresent,
            json_paths: Vec::new(),
            json_pointers: Vec::new(),
            jq_path_expressions: vec![
                r#".spec.template.spec.containers[].env[] | select(.name == "JAVA_OPTS")"#.into(),
            ],
        }];
        let created = applied(&with_env("-Xmx512m"), &fields);
        assert_eq!(
            created["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"],
            json!("-Xmx512m"),
            "first apply sends the manifest's value"
        );
        let mut live = created.clone();
        live["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"] = json!("-Xmx1024m");
        let patch = plan(&with_env("-Xmx2048m"), Some(&live), &fields);
        let env = &patch["spec"]["template"]["spec"]["containers"][0]["env"];
        assert_eq!(env[1], json!({"name": "JAVA_OPTS", "value": "-Xmx1024m"}));
        assert_eq!(env[0], json!({"name": "APP_ENV", "value": "production"}));
        assert_eq!(
            annotation(&patch, CONFIG_SPEC_HASH_ANNOTATION),
            annotation(&created, CONFIG_SPEC_HASH_ANNOTATION),
            "the ignored value is not part of the hash"
        );

        let bad = [IgnoreField {
            jq_path_expressions: vec![".spec.containers[] | invalid syntax here".into()],
            ..fields[0].clone()
        }];
        assert!(matches!(
            plan_ignore_fields(&with_env("x"), None, &bad),
            Err(ApplyError::InvalidIgnoreField { .. })
        ));
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
        let patch = plan(&manifest(1), Some(&live), &fields);
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
    fn on_spoke_change_keeps_a_spoke_edit_while_the_manifest_is_unchanged() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokeChange,
            &[".spec.replicas"],
            &[],
        )];
        // First apply: the manifest's value.
        let live = applied(&manifest(3), &fields);
        assert_eq!(live["spec"]["replicas"], json!(3));

        // Spoke changed it to 5 and the manifest is the same: keep 5.
        let mut edited = live.clone();
        edited["spec"]["replicas"] = json!(5);
        assert_eq!(
            plan(&manifest(3), Some(&edited), &fields)["spec"]["replicas"],
            json!(5)
        );

        // Spoke removed it: leave it out of the patch.
        let mut removed = live.clone();
        removed["spec"]
            .as_object_mut()
            .map(|s| s.remove("replicas"));
        assert!(
            plan(&manifest(3), Some(&removed), &fields)["spec"]
                .get("replicas")
                .is_none()
        );

        // The manifest changed: its value is applied again.
        assert_eq!(
            plan(&manifest(4), Some(&edited), &fields)["spec"]["replicas"],
            json!(4)
        );

        // An object without the hash (not applied with these ignoreFields): the manifest wins.
        assert_eq!(
            plan(&manifest(3), Some(&manifest(5)), &fields)["spec"]["replicas"],
            json!(3)
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
        let mut patch = plan(&manifest(1), Some(&live), &fields);
        patch["metadata"]["annotations"]
            .as_object_mut()
            .map(|a| a.remove(CONFIG_SPEC_HASH_ANNOTATION));
        assert_eq!(patch, manifest(1));
    }

    #[test]
    fn an_invalid_path_fails_the_plan() {
        let fields = [field(
            IgnoreFieldsCondition::OnSpokePresent,
            &[".spec["],
            &[],
        )];
        let err = plan_ignore_fields(&manifest(1), None, &fields).err();
        assert!(matches!(err, Some(ApplyError::InvalidIgnoreField { .. })));
    }
}
