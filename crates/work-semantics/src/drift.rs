//! Drift: how a manifest's object on the spoke differs from what the work wants, and what the
//! agent does about it. The mode is declared per manifest in the work's annotation
//! [`ANNOTATION`] (as gates are), so upstream's ManifestWork CRD takes the work unchanged and an
//! agent that does not know it applies the work as it always did. The comparison ([`diff`]) is
//! the applier's no-op check turned into paths: every field the manifest sets must have its value
//! on the spoke; what the spoke adds (defaults, status, other writers' fields) is not drift.

use std::borrow::Borrow;

use base64::Engine;
use serde_json::{Map, Value};
use work_api::ManifestWork;

use crate::SERVER_METADATA;
use crate::annotations;
use crate::gates::find_manifest;

/// The work annotation holding the drift modes: a mode name for every manifest
/// (`ReportOnly`), or a JSON list of `{"manifest": <ref>, "mode": "<mode>"}` where a `<ref>` is
/// an ordinal or `{"group", "kind", "namespace", "name"}` and an entry without `manifest` sets
/// the mode of every manifest no other entry names.
pub const ANNOTATION: &str = "work.open-cluster-management.io/drift";

/// The most entries the annotation may hold: more is refused as a whole.
pub const MAX_ENTRIES: usize = 1000;

/// What the agent does when a manifest's object differs from the work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Write the work's fields back (upstream's behaviour), and say so.
    #[default]
    Correct,
    /// Never write the object; report how it differs.
    ReportOnly,
    /// An object that exists and is not the work's is adopted only when it already matches;
    /// otherwise it is reported and left alone. Once adopted (or created), as `Correct`.
    TakeOverIfIdentical,
}

impl Mode {
    /// The mode a name in the annotation means.
    pub fn parse(name: &str) -> Option<Mode> {
        match name {
            "Correct" => Some(Mode::Correct),
            "ReportOnly" => Some(Mode::ReportOnly),
            "TakeOverIfIdentical" => Some(Mode::TakeOverIfIdentical),
            _ => None,
        }
    }

    /// The name the annotation spells it with.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Correct => "Correct",
            Mode::ReportOnly => "ReportOnly",
            Mode::TakeOverIfIdentical => "TakeOverIfIdentical",
        }
    }
}

/// The drift modes `work` declares: the value of its [`ANNOTATION`], if any.
pub fn annotation_of(work: &ManifestWork) -> Option<&str> {
    annotations::value(work, ANNOTATION)
}

/// Each manifest's mode for `work` (see [`modes`]).
pub fn modes_of(work: &ManifestWork) -> Vec<Result<Mode, String>> {
    let raw: Vec<&Value> = work.spec.workload.manifests.iter().map(|m| &m.0).collect();
    modes(annotation_of(work), &raw)
}

/// Each manifest's mode under `annotation` (the value of [`ANNOTATION`], if any); `Err` says why
/// the annotation cannot give it. A manifest whose mode cannot be known is never written (the
/// agent reports the error instead): were `ReportOnly` misspelt, correcting would overwrite what
/// the author meant to keep.
pub fn modes<M: Borrow<Value>>(
    annotation: Option<&str>,
    manifests: &[M],
) -> Vec<Result<Mode, String>> {
    let n = manifests.len();
    let Some(text) = annotation else {
        return vec![Ok(Mode::Correct); n];
    };
    if let Some(mode) = Mode::parse(text.trim()) {
        return vec![Ok(mode); n];
    }
    let all_fail = |why: String| vec![Err(why); n];
    let entries = match annotations::entries(text, ANNOTATION, MAX_ENTRIES, "entries") {
        Ok(entries) => entries,
        Err(why) => {
            return all_fail(format!(
                "not a mode (Correct, ReportOnly, TakeOverIfIdentical), and {why}"
            ));
        }
    };
    let ids = annotations::ids(manifests);
    let mut default: Option<Mode> = None;
    let mut named: Vec<Option<Result<Mode, String>>> = vec![None; n];
    for (k, entry) in entries.iter().enumerate() {
        let why = |what: String| format!("entry {k} of {ANNOTATION}: {what}");
        let mode = entry
            .get("mode")
            .and_then(Value::as_str)
            .and_then(Mode::parse)
            .ok_or_else(
                || why("\"mode\" is not Correct, ReportOnly or TakeOverIfIdentical".into()),
            );
        let target = match entry.get("manifest") {
            None if entry.is_object() => None,
            None => return all_fail(why("not an object".into())),
            Some(reference) => match find_manifest(reference, &ids) {
                Ok(i) => Some(i),
                // Which manifest was meant is not known: none is written.
                Err(e) => return all_fail(why(e)),
            },
        };
        match (target, mode) {
            (None, Ok(mode)) if default.is_none_or(|d| d == mode) => default = Some(mode),
            (None, Ok(_)) => return all_fail(why("a second mode for every manifest".into())),
            (None, Err(e)) => return all_fail(e),
            (Some(i), mode) => {
                let slot = &mut named[i];
                *slot = match (slot.take(), mode) {
                    (None, mode) => Some(mode),
                    (Some(Ok(before)), Ok(now)) if before == now => Some(Ok(now)),
                    (Some(Err(e)), _) | (_, Err(e)) => Some(Err(e)),
                    (Some(Ok(_)), Ok(_)) => {
                        Some(Err(why(format!("a second mode for manifest {i}"))))
                    }
                };
            }
        }
    }
    named
        .into_iter()
        .map(|m| m.unwrap_or(Ok(default.unwrap_or_default())))
        .collect()
}

/// One field whose value on the spoke is not the work's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldDrift {
    /// Where, as `kubectl -o jsonpath` names it: `spec.replicas`,
    /// `metadata.labels['app.kubernetes.io/name']`, `spec.containers[0].image`.
    pub path: String,
    /// The spoke's value as JSON text (shortened), `None` when the field is absent there. Always
    /// `None` for Secret data, whose values never leave the spoke.
    pub live: Option<String>,
    /// The work's value as JSON text (shortened); `None` for Secret data.
    pub wanted: Option<String>,
    /// Whether the values are withheld (a Secret's `data` or `stringData`).
    pub hidden: bool,
}

/// Longest value text a [`FieldDrift`] carries.
const VALUE_LEN: usize = 64;

/// Metadata never compared besides the server's own ([`SERVER_METADATA`]): the identity fields,
/// and the lists others add to (ownerReferences, finalizers).
const SKIPPED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "ownerReferences",
    "finalizers",
];

/// Keys whose members are resource quantities, compared by value (`0.5` is `500m`, `1Gi` is
/// `1073741824`): the API server writes them in its canonical form.
const QUANTITY_MAPS: &[&str] = &["limits", "requests", "hard"];

/// How `live` differs from `manifest`: each field the manifest sets whose value the spoke does
/// not have, in the manifest's key order. Empty when the object is as the work wants it. The
/// manifest's `status`, `apiVersion` and `kind` are not compared, nor the metadata in
/// [`SKIPPED_METADATA`] and [`SERVER_METADATA`]. Objects are compared key by key (keys only the spoke has are fine),
/// lists element by element and must have the same length, numbers by value. Of a v1 Secret,
/// `stringData` is compared with `data` as the API server stores it, and no value of either is
/// given.
pub fn diff(manifest: &Value, live: &Value) -> Vec<FieldDrift> {
    let mut out = Vec::new();
    let (Some(desired), Some(live_map)) = (manifest.as_object(), live.as_object()) else {
        out.push(FieldDrift {
            path: String::new(),
            live: None,
            wanted: None,
            hidden: true,
        });
        return out;
    };
    let secret = is_secret(manifest);
    for (key, value) in desired {
        match key.as_str() {
            "status" | "apiVersion" | "kind" => {}
            "metadata" => {
                let empty = Map::new();
                let live_meta = live_map
                    .get("metadata")
                    .and_then(Value::as_object)
                    .unwrap_or(&empty);
                if let Some(meta) = value.as_object() {
                    for (k, v) in meta {
                        if !SKIPPED_METADATA.contains(&k.as_str())
                            && !SERVER_METADATA.contains(&k.as_str())
                        {
                            let mut path = Path::root("metadata");
                            path.key(k);
                            compare_field(&mut path, v, live_meta.get(k), false, &mut out);
                        }
                    }
                }
            }
            "data" | "stringData" if secret => {}
            _ => {
                let mut path = Path::default();
                path.key(key);
                compare_field(&mut path, value, live_map.get(key), false, &mut out);
            }
        }
    }
    if secret {
        secret_data(desired, live_map, &mut out);
    }
    out
}

/// Whether `manifest` is a core Secret (its data values are never shown).
fn is_secret(manifest: &Value) -> bool {
    manifest.get("apiVersion").and_then(Value::as_str) == Some("v1")
        && manifest.get("kind").and_then(Value::as_str) == Some("Secret")
}

/// A Secret's `data` and `stringData` against the spoke's `data`, as the API server merges
/// them (`stringData` wins), values withheld.
fn secret_data(desired: &Map<String, Value>, live: &Map<String, Value>, out: &mut Vec<FieldDrift>) {
    let empty = Map::new();
    let live_data = live
        .get("data")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let engine = base64::engine::general_purpose::STANDARD;
    let string_data = desired.get("stringData").and_then(Value::as_object);
    let mut hidden = |field: &str, key: &str| {
        let mut path = Path::root(field);
        path.key(key);
        out.push(FieldDrift {
            path: path.text,
            live: None,
            wanted: None,
            hidden: true,
        });
    };
    if let Some(data) = desired.get("data").and_then(Value::as_object) {
        for (key, value) in data {
            if string_data.is_some_and(|s| s.contains_key(key)) {
                continue;
            }
            let same = match (value, live_data.get(key)) {
                (Value::Null, None) => true,
                (Value::String(want), Some(Value::String(have))) => want == have,
                _ => false,
            };
            if !same {
                hidden("data", key);
            }
        }
    }
    for (key, value) in string_data.into_iter().flatten() {
        let same = match (value, live_data.get(key)) {
            (Value::Null, None) => true,
            (Value::String(want), Some(Value::String(have))) => engine.encode(want) == *have,
            _ => false,
        };
        if !same {
            hidden("stringData", key);
        }
    }
}

/// A field path being built, as `kubectl -o jsonpath` writes one.
#[derive(Clone, Debug, Default)]
struct Path {
    text: String,
}

impl Path {
    fn root(key: &str) -> Path {
        let mut p = Path::default();
        p.key(key);
        p
    }

    fn key(&mut self, key: &str) {
        let plain = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if plain {
            if !self.text.is_empty() {
                self.text.push('.');
            }
            self.text.push_str(key);
        } else {
            let escaped = key.replace('\\', "\\\\").replace('\'', "\\'");
            self.text.push_str(&format!("['{escaped}']"));
        }
    }

    fn index(&mut self, i: usize) {
        self.text.push_str(&format!("[{i}]"));
    }
}

/// `desired` (the manifest's value) against `live` (None: the spoke has no such field).
fn compare_field(
    path: &mut Path,
    desired: &Value,
    live: Option<&Value>,
    quantity: bool,
    out: &mut Vec<FieldDrift>,
) {
    match live {
        Some(live) => compare(path, desired, live, quantity, out),
        None if desired.is_null() => {}
        None => out.push(FieldDrift {
            path: path.text.clone(),
            live: None,
            wanted: Some(shown(desired)),
            hidden: false,
        }),
    }
}

fn compare(
    path: &mut Path,
    desired: &Value,
    live: &Value,
    quantity: bool,
    out: &mut Vec<FieldDrift>,
) {
    match (desired, live) {
        (Value::Object(d), Value::Object(l)) => {
            let members_are_quantities = QUANTITY_MAPS
                .iter()
                .any(|k| path.text.ends_with(&format!(".{k}")) || path.text == *k);
            for (k, v) in d {
                let mut inner = path.clone();
                inner.key(k);
                compare_field(&mut inner, v, l.get(k), members_are_quantities, out);
            }
        }
        (Value::Array(d), Value::Array(l)) if d.len() == l.len() => {
            for (i, (d, l)) in d.iter().zip(l).enumerate() {
                let mut inner = path.clone();
                inner.index(i);
                compare(&mut inner, d, l, false, out);
            }
        }
        (d, l) if same_value(d, l, quantity) => {}
        (d, l) => out.push(FieldDrift {
            path: path.text.clone(),
            live: Some(shown(l)),
            wanted: Some(shown(d)),
            hidden: false,
        }),
    }
}

/// Equal as the applier's no-op check sees it: numbers by value, and under a quantity map
/// quantities by value.
fn same_value(desired: &Value, live: &Value, quantity: bool) -> bool {
    match (desired, live) {
        (Value::Number(a), Value::Number(b)) if numbers_equal(a, b) => true,
        _ if desired == live => true,
        _ if quantity => match (quantity_of(desired), quantity_of(live)) {
            (Some(a), Some(b)) => {
                let scale = a.abs().max(b.abs()).max(f64::MIN_POSITIVE);
                (a - b).abs() / scale < 1e-9
            }
            _ => false,
        },
        _ => false,
    }
}

fn numbers_equal(a: &serde_json::Number, b: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (a.as_i64(), b.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (a.as_u64(), b.as_u64()) {
        return a == b;
    }
    matches!((a.as_f64(), b.as_f64()), (Some(a), Some(b)) if a == b)
}

/// A resource quantity's value (`500m` is 0.5, `1Ki` is 1024, `1e3` is 1000), if `v` is one.
pub fn quantity_of(v: &Value) -> Option<f64> {
    let text = match v {
        Value::Number(n) => return n.as_f64(),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    let end = text
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || c == '.' || (i == 0 && (c == '+' || c == '-'))))
        .map_or(text.len(), |(i, _)| i);
    let (number, suffix) = text.split_at(end);
    let base: f64 = number.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "n" => 1e-9,
        "u" => 1e-6,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exponent => {
            let digits = exponent.strip_prefix(['e', 'E'])?;
            let power: i32 = digits.parse().ok()?;
            10f64.powi(power)
        }
    };
    Some(base * factor)
}

/// A value as JSON text, cut at [`VALUE_LEN`] bytes (on a character boundary) with `…`.
fn shown(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_default();
    if text.len() <= VALUE_LEN {
        return text;
    }
    let mut end = VALUE_LEN;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Most fields a description names; the rest are counted.
pub const DESCRIBED_FIELDS: usize = 16;

/// Longest description, in bytes (a condition message, within the status budget).
pub const DESCRIPTION_LEN: usize = 1024;

/// The fields in words, for a condition message: `spec.replicas is 5, the work has 2;
/// metadata.labels.team is absent, the work has "a"; data.password differs (Secret data, value
/// not shown)`, at most [`DESCRIBED_FIELDS`] fields and [`DESCRIPTION_LEN`] bytes, then `and N
/// more`.
pub fn describe(fields: &[FieldDrift]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut used = 0usize;
    for f in fields.iter().take(DESCRIBED_FIELDS) {
        let path = if f.path.is_empty() {
            "the object"
        } else {
            f.path.as_str()
        };
        let part = match (f.hidden, &f.live, &f.wanted) {
            (true, _, _) => format!("{path} differs (Secret data, value not shown)"),
            (false, None, Some(want)) => format!("{path} is absent, the work has {want}"),
            (false, Some(have), Some(want)) => format!("{path} is {have}, the work has {want}"),
            (false, Some(have), None) => format!("{path} is {have}"),
            (false, None, None) => format!("{path} differs"),
        };
        // Room for the separator and the count of the rest.
        if used + part.len() + 24 > DESCRIPTION_LEN {
            break;
        }
        used += part.len() + 2;
        parts.push(part);
    }
    let rest = fields.len() - parts.len();
    let mut text = parts.join("; ");
    if rest > 0 {
        text.push_str(&format!("; and {rest} more"));
    }
    text
}

/// The paths alone, for comparing two drifts of one object (the same paths drifted again are
/// the same episode).
pub fn paths(fields: &[FieldDrift]) -> Vec<&str> {
    fields.iter().map(|f| f.path.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(kind: &str, name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": "ns"}})
    }

    #[test]
    fn no_annotation_corrects_and_a_bare_mode_covers_every_manifest() {
        let manifests = [object("ConfigMap", "a"), object("ConfigMap", "b")];
        assert_eq!(modes(None, &manifests), vec![Ok(Mode::Correct); 2]);
        assert_eq!(
            modes(Some(" ReportOnly "), &manifests),
            vec![Ok(Mode::ReportOnly); 2]
        );
    }

    #[test]
    fn entries_name_manifests_and_an_entry_without_one_sets_the_rest() {
        let manifests = [
            object("ConfigMap", "a"),
            object("ConfigMap", "b"),
            object("Secret", "c"),
        ];
        let text = r#"[{"mode": "ReportOnly"},
            {"manifest": 0, "mode": "TakeOverIfIdentical"},
            {"manifest": {"kind": "Secret", "namespace": "ns", "name": "c"}, "mode": "Correct"}]"#;
        assert_eq!(
            modes(Some(text), &manifests),
            vec![
                Ok(Mode::TakeOverIfIdentical),
                Ok(Mode::ReportOnly),
                Ok(Mode::Correct)
            ]
        );
    }

    #[test]
    fn a_mode_that_cannot_be_known_is_an_error_for_the_manifests_it_may_mean() {
        let manifests = [object("ConfigMap", "a"), object("ConfigMap", "b")];
        let unknown_mode = r#"[{"manifest": 1, "mode": "Reportonly"}]"#;
        let got = modes(Some(unknown_mode), &manifests);
        assert_eq!(got[0], Ok(Mode::Correct));
        assert!(
            got[1].as_ref().is_err_and(|e| e.contains("entry 0")),
            "{got:?}"
        );
        for text in [
            "Reportonly",
            "{}",
            "[1]",
            r#"[{"manifest": 9, "mode": "ReportOnly"}]"#,
            r#"[{"mode": "ReportOnly"}, {"mode": "Correct"}]"#,
            r#"[{"mode": 3}]"#,
        ] {
            let got = modes(Some(text), &manifests);
            assert!(got.iter().all(Result::is_err), "{text}: {got:?}");
        }
        let twice =
            r#"[{"manifest": 0, "mode": "ReportOnly"}, {"manifest": 0, "mode": "Correct"}]"#;
        let got = modes(Some(twice), &manifests);
        assert!(got[0].is_err() && got[1] == Ok(Mode::Correct), "{got:?}");
        let too_many = format!(
            "[{}]",
            vec![r#"{"mode": "Correct"}"#; MAX_ENTRIES + 1].join(",")
        );
        assert!(
            modes(Some(&too_many), &manifests)
                .iter()
                .all(Result::is_err)
        );
    }

    fn deployment(replicas: i64, image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "namespace": "ns", "labels": {"app.kubernetes.io/name": "web"}},
               "spec": {"replicas": replicas, "template": {"spec": {"containers": [
                   {"name": "main", "image": image, "resources": {"limits": {"cpu": "0.5", "memory": "1Gi"}}}]}}}})
    }

    #[test]
    fn what_the_spoke_adds_is_not_drift_and_what_it_changed_is() {
        let manifest = deployment(2, "nginx:1");
        let mut live = deployment(2, "nginx:1");
        live["metadata"]["uid"] = json!("u1");
        live["metadata"]["labels"]["work.open-cluster-management.io/applied-by"] = json!("x");
        live["metadata"]["ownerReferences"] = json!([{"uid": "o"}]);
        live["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] =
            json!({"cpu": "500m", "memory": "1073741824"});
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        live["status"] = json!({"readyReplicas": 2});
        assert_eq!(diff(&manifest, &live), vec![]);
        live["spec"]["replicas"] = json!(5);
        live["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        live["metadata"]["labels"]
            .as_object_mut()
            .map(|l| l.remove("app.kubernetes.io/name"));
        let got = diff(&manifest, &live);
        assert_eq!(
            paths(&got),
            [
                "metadata.labels['app.kubernetes.io/name']",
                "spec.replicas",
                "spec.template.spec.containers[0].image"
            ]
        );
        assert_eq!(got[1].live.as_deref(), Some("5"));
        assert_eq!(got[1].wanted.as_deref(), Some("2"));
        assert_eq!(got[0].live, None);
        assert_eq!(describe(&got[1..2]), "spec.replicas is 5, the work has 2");
        // A list of another length differs as a whole.
        live["spec"]["template"]["spec"]["containers"] = json!([]);
        assert!(paths(&diff(&manifest, &live)).contains(&"spec.template.spec.containers"));
    }

    #[test]
    fn a_quantity_is_compared_by_value_only_where_quantities_live() {
        for (a, b, same) in [
            ("0.5", "500m", true),
            ("1Gi", "1073741824", true),
            ("1e3", "1k", true),
            ("100m", "0.1", true),
            ("1", "2", false),
            ("1Gi", "1G", false),
        ] {
            let m = json!({"spec": {"limits": {"cpu": a}}});
            let l = json!({"spec": {"limits": {"cpu": b}}});
            assert_eq!(diff(&m, &l).is_empty(), same, "{a} vs {b}");
        }
        // Elsewhere a string is a string.
        let m = json!({"data": {"size": "1k"}});
        let l = json!({"data": {"size": "1000"}});
        assert_eq!(diff(&m, &l).len(), 1);
    }

    #[test]
    fn secret_values_are_compared_but_never_shown() {
        let manifest = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "labels": {"team": "a"}},
            "data": {"password": "aHVudGVyMg==", "same": "eA=="},
            "stringData": {"token": "s3cr3t-value"}});
        let engine = base64::engine::general_purpose::STANDARD;
        let mut live = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "labels": {"team": "a"}},
            "data": {"password": "aHVudGVyMg==", "same": "eA==", "token": engine.encode("s3cr3t-value")}});
        assert_eq!(diff(&manifest, &live), vec![]);
        live["data"]["password"] = json!(engine.encode("changed-by-hand"));
        live["data"]["token"] = json!(engine.encode("other"));
        live["metadata"]["labels"]["team"] = json!("b");
        let got = diff(&manifest, &live);
        assert_eq!(
            paths(&got),
            ["metadata.labels.team", "data.password", "stringData.token"]
        );
        assert!(
            got[1..]
                .iter()
                .all(|f| f.hidden && f.live.is_none() && f.wanted.is_none())
        );
        let text = describe(&got);
        for secret in ["aHVudGVyMg", "s3cr3t", "changed-by-hand", "b3RoZXI"] {
            assert!(!text.contains(secret), "{text}");
        }
        assert!(text.contains("data.password differs (Secret data, value not shown)"));
        assert!(text.contains("metadata.labels.team is \"b\", the work has \"a\""));
    }

    #[test]
    fn a_description_stays_within_its_budget() {
        let data: Map<String, Value> = (0..200)
            .map(|i| (format!("key-{i:03}"), json!("x".repeat(200))))
            .collect();
        let manifest = json!({"data": data});
        let live = json!({"data": {}});
        let got = diff(&manifest, &live);
        assert_eq!(got.len(), 200);
        let text = describe(&got);
        assert!(text.len() <= DESCRIPTION_LEN, "{}", text.len());
        assert!(text.ends_with("more"), "{text}");
        assert!(
            got.iter()
                .all(|f| f.wanted.as_ref().is_some_and(|w| w.len() <= VALUE_LEN + 3))
        );
    }

    #[test]
    fn quantities_parse_as_kubernetes_writes_them() {
        assert_eq!(quantity_of(&json!("2Ki")), Some(2048.0));
        assert_eq!(quantity_of(&json!("1.5")), Some(1.5));
        assert_eq!(quantity_of(&json!(3)), Some(3.0));
        assert_eq!(quantity_of(&json!("abc")), None);
        assert_eq!(quantity_of(&json!("1x")), None);
        assert_eq!(quantity_of(&json!(true)), None);
    }
}
