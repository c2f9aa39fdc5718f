//! Maestro's rules for the statuses a source takes (read from Maestro's server code): which
//! status events it stores, which it disregards, and when it forgets a resource.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use cloudevents::CloudEvent;
use cloudevents::snowflake::EPOCH_MS;
use cloudevents::types;
use serde_json::Value;

/// One resource as the source stores it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredResource {
    /// The resource id (a uuid unless given): the `resourceid` extension, the work's UID.
    pub id: String,
    /// The consumer (cluster) it is placed on: the `clustername` extension.
    pub consumer: String,
    /// The spec version, starting at 1: the `resourceversion` extension.
    pub version: i64,
    /// The ObjectMeta JSON sent in the `metadata` extension (at least `name`).
    pub metadata: Value,
    /// The ManifestBundle JSON sent as data.
    pub bundle: Value,
    /// Set by a soft delete ([`super::Maestro::delete`]); sent as `deletiontimestamp`.
    pub deleted_at: Option<DateTime<Utc>>,
    /// The latest accepted status (the ManifestBundleStatus JSON of the agent's event).
    pub status: Option<Value>,
    /// The `statushash` of the latest accepted status event.
    pub status_hash: Option<String>,
    /// The `sequenceid` of the latest accepted status event.
    pub sequence_id: Option<String>,
    /// How many status events were accepted for it.
    pub statuses_accepted: u64,
    /// How many spec events the source published for it (resync answers included).
    pub spec_events_sent: u64,
    /// Creation order within the source (resync answers follow it).
    pub ordinal: u64,
}

impl StoredResource {
    /// A resource as it is created: version 1, no status yet, nothing sent for it.
    pub fn new(id: &str, consumer: &str, metadata: Value, bundle: Value, ordinal: u64) -> Self {
        Self {
            id: id.to_string(),
            consumer: consumer.to_string(),
            version: 1,
            metadata,
            bundle,
            deleted_at: None,
            status: None,
            status_hash: None,
            sequence_id: None,
            statuses_accepted: 0,
            spec_events_sent: 0,
            ordinal,
        }
    }
}

/// What the source decided about one agent status event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusOutcome {
    /// Stored as the resource's latest status.
    Accepted,
    /// The same event as the stored one (same `sequenceid` and data): a no-op.
    Unchanged,
    /// `Deleted=True` on a soft-deleted resource: the resource was hard-deleted.
    Deleted,
    /// `resourceversion` is not the stored version: disregarded.
    Stale {
        /// The version the source holds.
        stored: i64,
        /// The version the event carried.
        got: i64,
    },
    /// `sequenceid` missing, malformed, from another node or not newer.
    RejectedSequence(String),
    /// `originalsource` is missing or not this source's id (the value, "" when missing).
    RejectedSource(String),
    /// The event's `clustername` is not the resource's consumer.
    RejectedConsumer {
        /// The resource's consumer.
        stored: String,
        /// The event's `clustername`.
        got: String,
    },
    /// No such resource (never created or already hard-deleted): skipped.
    UnknownResource,
    /// A required extension or the status data is missing or malformed.
    Malformed(String),
}

/// Whether a ManifestBundleStatus JSON has the condition `Deleted` = `True` (Maestro's
/// `meta.IsStatusConditionTrue(conditions, "Deleted")`: the first condition of that type counts).
pub fn is_deleted(status: &Value) -> bool {
    condition_true(status, "Deleted")
}

/// Whether a ManifestBundleStatus JSON has the condition `ty` = `True` (the first of that type).
pub fn condition_true(status: &Value, ty: &str) -> bool {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))
        })
        .and_then(|c| c.get("status").and_then(Value::as_str))
        == Some("True")
}

/// The parts of a snowflake id Maestro compares: (Unix ms, node, step).
pub fn snowflake_parts(id: u64) -> (u64, u64, u64) {
    ((id >> 22) + EPOCH_MS, (id >> 12) & 0x3ff, id & 0xfff)
}

/// Maestro's sequence check (`compareSequenceIDs`): `new` must be a snowflake; with a stored
/// `last`, it must come from the same node and be newer by (time, step). The error says why not.
pub fn check_sequence(new: Option<&str>, last: Option<&str>) -> Result<(), String> {
    let parse = |s: &str| -> Result<u64, String> {
        // Go parses with strconv.ParseInt: a non-negative decimal int64.
        s.parse::<i64>()
            .ok()
            .and_then(|v| u64::try_from(v).ok())
            .ok_or_else(|| format!("sequenceid {s:?} is not a snowflake id"))
    };
    let new = match new {
        Some(s) if !s.is_empty() => parse(s)?,
        _ => return Err("no sequenceid".into()),
    };
    let Some(last) = last.filter(|s| !s.is_empty()) else {
        return Ok(());
    };
    let last = parse(last)?;
    let (nt, nn, ns) = snowflake_parts(new);
    let (lt, ln, ls) = snowflake_parts(last);
    if nn != ln {
        return Err(format!(
            "sequenceid {new} is from node {nn}, the stored {last} from node {ln}"
        ));
    }
    if (nt, ns) > (lt, ls) {
        Ok(())
    } else {
        Err(format!(
            "sequenceid {new} is not newer than the stored {last}"
        ))
    }
}

/// Judges one status event (`status.update_request` or `status.resync_response`) against the
/// store in Maestro's order and applies it. `Deleted=True` hard-deletes the resource, as Maestro
/// does; the flag says the source had not asked for that deletion (the agent's TTL did).
pub fn apply_status(
    resources: &mut BTreeMap<String, StoredResource>,
    source_id: &str,
    ev: &CloudEvent,
) -> (StatusOutcome, bool) {
    let malformed = |why: String| (StatusOutcome::Malformed(why), false);
    let Some(id) = ev.ext_string(types::EXT_RESOURCE_ID) else {
        return malformed("no resourceid".into());
    };
    let version = match ev.ext_integer(types::EXT_RESOURCE_VERSION) {
        Ok(Some(v)) => v,
        Ok(None) => return malformed("no resourceversion".into()),
        Err(e) => return malformed(e.to_string()),
    };
    let Some(cluster) = ev.ext_string(types::EXT_CLUSTER_NAME) else {
        return malformed("no clustername".into());
    };
    let original = ev
        .ext_string(types::EXT_ORIGINAL_SOURCE)
        .unwrap_or_default();
    if original != source_id {
        return (StatusOutcome::RejectedSource(original), false);
    }
    let Some(r) = resources.get_mut(&id) else {
        return (StatusOutcome::UnknownResource, false);
    };
    if r.consumer != cluster {
        return (
            StatusOutcome::RejectedConsumer {
                stored: r.consumer.clone(),
                got: cluster,
            },
            false,
        );
    }
    let status: Value = match ev.data.as_deref().map(serde_json::from_slice::<Value>) {
        Some(Ok(v @ Value::Object(_))) => v,
        Some(Ok(other)) => return malformed(format!("status data is not an object: {other}")),
        Some(Err(e)) => return malformed(format!("status data is not JSON: {e}")),
        None => return malformed("no status data".into()),
    };
    // Maestro hard-deletes on Deleted=True whether or not it asked for the deletion (a work
    // deleted by the agent's TTL); the flag tells tests which case it was.
    if is_deleted(&status) {
        let unrequested = r.deleted_at.is_none();
        resources.remove(&id);
        return (StatusOutcome::Deleted, unrequested);
    }
    if r.version != version {
        return (
            StatusOutcome::Stale {
                stored: r.version,
                got: version,
            },
            false,
        );
    }
    let seq = ev.ext_string(types::EXT_SEQUENCE_ID);
    if r.status.as_ref() == Some(&status) && r.sequence_id.is_some() && r.sequence_id == seq {
        return (StatusOutcome::Unchanged, false);
    }
    if let Err(why) = check_sequence(seq.as_deref(), r.sequence_id.as_deref()) {
        return (StatusOutcome::RejectedSequence(why), false);
    }
    r.status = Some(status);
    r.status_hash = ev.ext_string(types::EXT_STATUS_HASH);
    r.sequence_id = seq;
    r.statuses_accepted += 1;
    (StatusOutcome::Accepted, false)
}

/// Copies of the resources of a store, in creation order.
pub fn in_creation_order(resources: &BTreeMap<String, StoredResource>) -> Vec<StoredResource> {
    let mut all: Vec<_> = resources.values().cloned().collect();
    all.sort_by_key(|r| r.ordinal);
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::ExtValue;
    use cloudevents::snowflake::Snowflake;
    use cloudevents::types::EventType;
    use serde_json::json;

    use crate::maestro::stored;

    #[test]
    fn sequence_ids_must_grow_on_one_node() {
        let ids = Snowflake::new();
        let a = ids.next_at(EPOCH_MS + 1_000).to_string();
        let b = ids.next_at(EPOCH_MS + 1_000).to_string(); // same ms, next step
        let c = ids.next_at(EPOCH_MS + 2_000).to_string();
        assert_eq!(check_sequence(Some(&a), None), Ok(()));
        assert_eq!(check_sequence(Some(&b), Some(&a)), Ok(()));
        assert_eq!(check_sequence(Some(&c), Some(&b)), Ok(()));
        assert!(check_sequence(Some(&a), Some(&b)).is_err());
        assert!(check_sequence(Some(&b), Some(&b)).is_err());
        assert!(check_sequence(Some(&a), Some(&c)).is_err());
        assert!(check_sequence(None, Some(&a)).is_err());
        assert!(check_sequence(None, None).is_err());
        assert!(check_sequence(Some(""), None).is_err());
        assert!(check_sequence(Some("x1"), None).is_err());
        assert!(check_sequence(Some("-5"), None).is_err());
        assert!(check_sequence(Some(&c), Some("garbage")).is_err());
        // A newer id from node 2 is refused.
        let node2 = (((2_000u64) << 22) | (2 << 12)).to_string();
        let err = check_sequence(Some(&node2), Some(&a)).expect_err("other node");
        assert!(err.contains("node 2"), "{err}");
        // The id the Go agent sent decodes to node 1.
        assert_eq!(snowflake_parts(2_125_174_315_350_495_232).1, 1);
    }

    #[test]
    fn deleted_detection() {
        let cond = |ty: &str, st: &str| json!({"type": ty, "status": st, "reason": "r"});
        assert!(is_deleted(
            &json!({"conditions": [cond("Applied", "True"), cond("Deleted", "True")]})
        ));
        assert!(!is_deleted(
            &json!({"conditions": [cond("Deleted", "False")]})
        ));
        assert!(!is_deleted(
            &json!({"conditions": [cond("Applied", "True")]})
        ));
        assert!(!is_deleted(&json!({"conditions": "Deleted"})));
        assert!(!is_deleted(&json!({})));
        // The first condition of the type counts, as in meta.IsStatusConditionTrue.
        assert!(!is_deleted(
            &json!({"conditions": [cond("Deleted", "False"), cond("Deleted", "True")]})
        ));
    }

    fn status_event(id: &str, version: i64, seq: Option<u64>, status: Value) -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::StatusUpdate, "c1-work-agent")
            .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(id.into()))
            .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(version))
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String("c1".into()))
            .with_ext(
                types::EXT_ORIGINAL_SOURCE,
                ExtValue::String("maestro".into()),
            )
            .with_ext(types::EXT_STATUS_HASH, ExtValue::String("h".into()));
        if let Some(s) = seq {
            ev = ev.with_ext(types::EXT_SEQUENCE_ID, ExtValue::String(s.to_string()));
        }
        ev.data = Some(status.to_string().into_bytes());
        ev
    }

    #[test]
    fn status_judgement_in_maestros_order() {
        let ids = Snowflake::new();
        let mut store = BTreeMap::new();
        store.insert("a".to_string(), stored("a", "c1", 2, 1));
        let applied = json!({"conditions": [{"type": "Applied", "status": "True"}]});
        let deleted = json!({"conditions": [{"type": "Deleted", "status": "True"}]});

        let s1 = ids.next_id();
        let ok = status_event("a", 2, Some(s1), applied.clone());
        assert_eq!(
            apply_status(&mut store, "maestro", &ok),
            (StatusOutcome::Accepted, false)
        );
        assert_eq!(store["a"].sequence_id, Some(s1.to_string()));
        assert_eq!(store["a"].status_hash.as_deref(), Some("h"));
        // The same event again: a no-op.
        assert_eq!(
            apply_status(&mut store, "maestro", &ok).0,
            StatusOutcome::Unchanged
        );
        // Stale version.
        let stale = status_event("a", 1, Some(ids.next_id()), json!({"conditions": []}));
        assert_eq!(
            apply_status(&mut store, "maestro", &stale).0,
            StatusOutcome::Stale { stored: 2, got: 1 }
        );
        // Old or missing sequence id.
        let old = status_event("a", 2, Some(s1 - 1), json!({"conditions": []}));
        assert!(matches!(
            apply_status(&mut store, "maestro", &old).0,
            StatusOutcome::RejectedSequence(_)
        ));
        let none = status_event("a", 2, None, json!({"conditions": []}));
        assert!(matches!(
            apply_status(&mut store, "maestro", &none).0,
            StatusOutcome::RejectedSequence(_)
        ));
        // Wrong original source, consumer, unknown resource, bad data.
        let wrong = status_event("a", 2, Some(ids.next_id()), applied.clone())
            .with_ext(types::EXT_ORIGINAL_SOURCE, ExtValue::String("other".into()));
        assert_eq!(
            apply_status(&mut store, "maestro", &wrong).0,
            StatusOutcome::RejectedSource("other".into())
        );
        let wrong = status_event("a", 2, Some(ids.next_id()), applied.clone())
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String("c2".into()));
        assert!(matches!(
            apply_status(&mut store, "maestro", &wrong).0,
            StatusOutcome::RejectedConsumer { .. }
        ));
        let unknown = status_event("zz", 2, Some(ids.next_id()), applied.clone());
        assert_eq!(
            apply_status(&mut store, "maestro", &unknown).0,
            StatusOutcome::UnknownResource
        );
        let bad = status_event("a", 2, Some(ids.next_id()), json!([1]));
        assert!(matches!(
            apply_status(&mut store, "maestro", &bad).0,
            StatusOutcome::Malformed(_)
        ));
        // Deleted on a soft-deleted resource: hard delete, even with a stale version.
        let mut soft = store.clone();
        soft.get_mut("a")
            .map(|r| r.deleted_at = Some(Utc::now()))
            .expect("present");
        let gone = status_event("a", 1, Some(ids.next_id()), deleted.clone());
        assert_eq!(
            apply_status(&mut soft, "maestro", &gone),
            (StatusOutcome::Deleted, false)
        );
        assert!(soft.is_empty());
        // Deleted on a live resource (the agent's TTL): hard delete too, flagged as unrequested.
        let early = status_event("a", 2, Some(ids.next_id()), deleted);
        assert_eq!(
            apply_status(&mut store, "maestro", &early),
            (StatusOutcome::Deleted, true)
        );
        assert!(store.is_empty());
    }
}
