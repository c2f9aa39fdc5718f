//! What the work annotations that declare something per manifest (gates, drift modes, holds)
//! share: reading the value, its list of entries within a bound, and the manifests' identities
//! the entries name.

use std::borrow::Borrow;

use serde_json::Value;
use work_api::ManifestWork;

use crate::ManifestId;

/// The value of `work`'s annotation `key`, if any.
pub(crate) fn value<'a>(work: &'a ManifestWork, key: &str) -> Option<&'a str> {
    work.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The entries of the annotation `key`'s JSON list `text`, at most `max` of them (`noun` names
/// them in the error); else why not, as a user reads it on the work.
pub(crate) fn entries(text: &str, key: &str, max: usize, noun: &str) -> Result<Vec<Value>, String> {
    let entries = match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(entries)) => entries,
        Ok(_) => return Err(format!("{key} is not a JSON list")),
        Err(e) => return Err(format!("{key} is not valid JSON: {e}")),
    };
    if entries.len() > max {
        return Err(format!(
            "{key} declares {} {noun}, at most {max}",
            entries.len()
        ));
    }
    Ok(entries)
}

/// The identity of each manifest (None where a manifest has none), for entries to name them.
pub(crate) fn ids<M: Borrow<Value>>(manifests: &[M]) -> Vec<Option<ManifestId>> {
    manifests
        .iter()
        .map(|m| ManifestId::of(m.borrow()).ok())
        .collect()
}
