//! Adding and removing finalizers with a JSON patch that first tests the finalizer list the agent
//! read: a concurrent change of the list fails the patch, while a change of anything else (a
//! status write, a label) does not, so the agent's own status writes never make a finalizer
//! patch conflict and cost a retry.

use kube::api::Patch;
use kube::core::Status;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use crate::params;

/// Adds a finalizer if missing; returns the patched object when it wrote.
pub async fn ensure_finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
) -> Result<Option<K>, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match with_finalizer(obj.finalizers(), finalizer) {
        Some(finalizers) => set_finalizers(api, obj, finalizers).await.map(Some),
        None => Ok(None),
    }
}

/// The list `current` with `finalizer` added, or `None` when it is already there.
pub fn with_finalizer(current: &[String], finalizer: &str) -> Option<Vec<String>> {
    if current.iter().any(|f| f == finalizer) {
        return None;
    }
    let mut finalizers = current.to_vec();
    finalizers.push(finalizer.to_string());
    Some(finalizers)
}

/// Replaces the finalizer list, provided it is still the one in `obj`; returns the new object.
/// A list changed in between is answered as a 409 Conflict (the caller re-reads and retries).
pub async fn set_finalizers<K>(
    api: &Api<K>,
    obj: &K,
    finalizers: Vec<String>,
) -> Result<K, kube::Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = obj.name_any();
    let patch = replace_finalizers_patch(obj.finalizers(), &finalizers);
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    match api
        .patch(&name, &params::patch(), &Patch::<()>::Json(patch))
        .await
    {
        // The API server answers a failed `test` with a bare 422 Invalid; the patch has nothing
        // else that could be invalid (the finalizer names are the agent's constants).
        Err(kube::Error::Api(s)) if s.code == 422 => Err(kube::Error::Api(Box::new(
            Status::failure(
                &format!("the finalizers of {name} changed since they were read"),
                "Conflict",
            )
            .with_code(409),
        ))),
        other => other,
    }
}

/// The JSON patch that replaces the finalizer list `old` (as read; empty means absent) by `new`.
pub fn replace_finalizers_patch(old: &[String], new: &[String]) -> Value {
    let expected = if old.is_empty() {
        Value::Null
    } else {
        json!(old)
    };
    json!([
        {"op": "test", "path": "/metadata/finalizers", "value": expected},
        {"op": "add", "path": "/metadata/finalizers", "value": new},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_tests_the_list_as_read_then_replaces_it() {
        let patch = replace_finalizers_patch(&[], &["a/b".to_string()]);
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "add", "path": "/metadata/finalizers", "value": ["a/b"]},
            ])
        );
        let patch =
            replace_finalizers_patch(&["x".to_string(), "a/b".to_string()], &["x".to_string()]);
        assert_eq!(patch[0]["value"], json!(["x", "a/b"]));
        assert_eq!(patch[1]["value"], json!(["x"]));
        let parsed: Result<json_patch::Patch, _> = serde_json::from_value(patch);
        assert!(parsed.is_ok(), "{parsed:?}");
    }
}
