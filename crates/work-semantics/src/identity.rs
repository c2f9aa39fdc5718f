//! What a manifest is and where it goes, read from its own fields: the one parser of a
//! manifest's identity, shared by the applier and the agent's status.

use serde_json::Value;

/// Metadata the API server writes, never the manifest's to set: a write leaves it out and a
/// comparison with the live object skips it.
pub const SERVER_METADATA: &[&str] = &[
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// A manifest that does not say what it is: no kind, no name, metadata of the wrong shape.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid manifest: {0}")]
pub struct InvalidManifest(pub String);

/// Identity of a manifest: apiVersion (and its group and version), kind, name, namespace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestId {
    /// `apiVersion` as written.
    pub api_version: String,
    /// API group (empty for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` (empty when absent).
    pub namespace: String,
}

impl ManifestId {
    /// Reads apiVersion, kind, name and namespace, with a clear error for each one missing or
    /// of the wrong type.
    pub fn of(manifest: &Value) -> Result<Self, InvalidManifest> {
        let invalid = |message: &str| InvalidManifest(message.to_string());
        let obj = manifest
            .as_object()
            .ok_or_else(|| invalid("a manifest must be a JSON object"))?;
        let api_version = required_string(obj.get("apiVersion"), "apiVersion")?;
        let kind = required_string(obj.get("kind"), "kind")?;
        let meta = match obj.get("metadata") {
            Some(Value::Object(meta)) => meta,
            Some(_) => return Err(invalid("metadata must be an object")),
            None => return Err(invalid("metadata.name is required")),
        };
        let name = required_string(meta.get("name"), "metadata.name").map_err(|e| match e {
            InvalidManifest(m) if m.ends_with("required") => {
                InvalidManifest(format!("{m} (generateName is not supported)"))
            }
            other => other,
        })?;
        let namespace = match meta.get("namespace") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Null) | None => String::new(),
            Some(_) => return Err(invalid("metadata.namespace must be a string")),
        };
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g.to_string(), v.to_string()),
            None => (String::new(), api_version.clone()),
        };
        Ok(Self {
            api_version,
            group,
            version,
            kind,
            name,
            namespace,
        })
    }

    /// The namespace, `None` when the manifest names none.
    pub fn namespace(&self) -> Option<&str> {
        Some(self.namespace.as_str()).filter(|ns| !ns.is_empty())
    }

    /// `Kind namespace/name` or `Kind name`, for messages.
    pub fn describe(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

fn required_string(value: Option<&Value>, field: &str) -> Result<String, InvalidManifest> {
    match value {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(Value::String(_) | Value::Null) | None => {
            Err(InvalidManifest(format!("{field} is required")))
        }
        Some(_) => Err(InvalidManifest(format!("{field} must be a string"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_identity_of_grouped_and_core_kinds() {
        let id = ManifestId::of(&json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "ns"}}))
        .expect("valid");
        assert_eq!(
            (id.group.as_str(), id.version.as_str(), id.namespace()),
            ("apps", "v1", Some("ns"))
        );
        assert_eq!(id.describe(), "Deployment ns/web");
        let core = ManifestId::of(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "n"}}),
        )
        .expect("valid");
        assert_eq!((core.group.as_str(), core.namespace()), ("", None));
        assert_eq!(core.describe(), "Namespace n");
    }

    #[test]
    fn rejects_malformed_manifests_with_clear_messages() {
        let cases = [
            (json!([]), "must be a JSON object"),
            (
                json!({"kind": "ConfigMap", "metadata": {"name": "a"}}),
                "apiVersion is required",
            ),
            (
                json!({"apiVersion": "v1", "metadata": {"name": "a"}}),
                "kind is required",
            ),
            (
                json!({"apiVersion": "v1", "kind": 1, "metadata": {"name": "a"}}),
                "kind must be a string",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap"}),
                "metadata.name is required",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "a-"}}),
                "metadata.name is required (generateName is not supported)",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": []}),
                "metadata must be an object",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": 3}}),
                "metadata.namespace must be a string",
            ),
        ];
        for (manifest, expected) in cases {
            let err = ManifestId::of(&manifest)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(expected),
                "{manifest}: got {err:?}, want {expected:?}"
            );
        }
    }
}
