//! Server-side apply of YAML manifests of any kind, resolved through API discovery.

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{self, Scope};
use serde::Deserialize;
use serde_json::Value;

use crate::Error;

/// Field manager the harness applies with.
const FIELD_MANAGER: &str = "work-agent-test-support";

/// Splits a multi-document YAML string into JSON values, skipping empty documents.
pub fn parse_yaml_documents(yaml: &str) -> Result<Vec<Value>, Error> {
    let mut docs = Vec::new();
    for de in serde_norway::Deserializer::from_str(yaml) {
        let value = Value::deserialize(de)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

/// `kubectl kustomize <repository>/<dir>`: a kustomization under the repository rendered offline,
/// as its users render it (kustomize as kubectl bundles it, not a library's version of it).
pub fn kustomize(dir: &str) -> Result<String, Error> {
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(crate::repo_root().join(dir))
        .output()
        .map_err(|e| {
            Error::Setup(format!(
                "running kubectl kustomize {dir} (is kubectl on PATH?): {e}"
            ))
        })?;
    if !out.status.success() {
        return Err(Error::Setup(format!(
            "kubectl kustomize {dir}: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    String::from_utf8(out.stdout)
        .map_err(|e| Error::Setup(format!("kubectl kustomize {dir} printed no UTF-8: {e}")))
}

/// Applies every document of `yaml` (server-side apply, forced); namespaced objects must name
/// their namespace. Returns the objects as the server stored them.
pub async fn apply_yaml(client: &Client, yaml: &str) -> Result<Vec<DynamicObject>, Error> {
    apply_docs(client, None, yaml).await
}

/// Like [`apply_yaml`], but namespaced objects without `metadata.namespace` go to `namespace`.
pub async fn apply_yaml_in(
    client: &Client,
    namespace: &str,
    yaml: &str,
) -> Result<Vec<DynamicObject>, Error> {
    apply_docs(client, Some(namespace), yaml).await
}

async fn apply_docs(
    client: &Client,
    default_ns: Option<&str>,
    yaml: &str,
) -> Result<Vec<DynamicObject>, Error> {
    let mut applied = Vec::new();
    for doc in parse_yaml_documents(yaml)? {
        applied.push(apply_one(client, default_ns, doc).await?);
    }
    Ok(applied)
}

/// The parts of a manifest needed to address it.
#[derive(Debug, PartialEq)]
struct Target {
    gvk: GroupVersionKind,
    name: String,
    namespace: Option<String>,
}

fn target_of(doc: &Value) -> Result<Target, Error> {
    let field = |ptr: &str| doc.pointer(ptr).and_then(Value::as_str);
    let api_version = field("/apiVersion")
        .ok_or_else(|| Error::InvalidManifest(format!("no apiVersion in {doc}")))?;
    let kind = field("/kind").ok_or_else(|| Error::InvalidManifest(format!("no kind in {doc}")))?;
    let name = field("/metadata/name")
        .ok_or_else(|| Error::InvalidManifest(format!("no metadata.name in {kind} {doc}")))?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    Ok(Target {
        gvk: GroupVersionKind::gvk(group, version, kind),
        name: name.to_string(),
        namespace: field("/metadata/namespace").map(str::to_string),
    })
}

async fn apply_one(
    client: &Client,
    default_ns: Option<&str>,
    mut doc: Value,
) -> Result<DynamicObject, Error> {
    let t = target_of(&doc)?;
    let what = format!("{} {}", t.gvk.kind, t.name);
    let (resource, caps) = discovery::pinned_kind(client, &t.gvk).await.map_err(|e| {
        Error::kube(
            format!(
                "discovering {}/{} {}",
                t.gvk.group, t.gvk.version, t.gvk.kind
            ),
            e,
        )
    })?;
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Cluster => Api::all_with(client.clone(), &resource),
        Scope::Namespaced => {
            let ns = match (t.namespace.as_deref(), default_ns) {
                (Some(ns), _) | (None, Some(ns)) => ns.to_string(),
                (None, None) => {
                    return Err(Error::InvalidManifest(format!(
                        "{what} is namespaced but names no namespace"
                    )));
                }
            };
            if let Some(meta) = doc.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("namespace".into(), Value::String(ns.clone()));
            }
            Api::namespaced_with(client.clone(), &ns, &resource)
        }
    };
    api.patch(
        &t.name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&doc),
    )
    .await
    .map_err(|e| Error::kube(format!("applying {what}"), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_documents_and_skips_empty_ones() {
        let docs = parse_yaml_documents(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\n# only a comment\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: b, namespace: x}\n",
        )
        .expect("valid yaml");
        assert_eq!(docs.len(), 2);
        assert_eq!(
            target_of(&docs[0]).expect("complete"),
            Target {
                gvk: GroupVersionKind::gvk("", "v1", "ConfigMap"),
                name: "a".into(),
                namespace: None
            }
        );
        let b = target_of(&docs[1]).expect("complete");
        assert_eq!(b.gvk, GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!(b.namespace.as_deref(), Some("x"));
    }

    #[test]
    fn incomplete_manifests_are_errors_not_panics() {
        let docs = parse_yaml_documents("kind: ConfigMap\nmetadata: {name: a}\n").expect("yaml");
        assert!(
            matches!(target_of(&docs[0]), Err(Error::InvalidManifest(m)) if m.contains("apiVersion"))
        );
        let docs = parse_yaml_documents("apiVersion: v1\nkind: ConfigMap\n").expect("yaml");
        assert!(
            matches!(target_of(&docs[0]), Err(Error::InvalidManifest(m)) if m.contains("metadata.name"))
        );
        assert!(parse_yaml_documents("a: [unclosed").is_err());
    }
}
