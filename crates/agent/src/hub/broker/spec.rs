//! How a spec event from the source changes the agent's copy of the works, as upstream's agent
//! store decides it: found by UID; unknown works are added, a renamed one replaces the old entry, a
//! deletion marks the copy it has, a stale generation is ignored, anything else replaces the spec
//! and keeps what the agent keeps (finalizers, status). Plain functions over plain data.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use cloudevents::codec::SpecUpdate;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use work_api::{MANIFEST_WORK_FINALIZER, ManifestWork};

/// What to do with the local copy.
#[derive(Clone, Debug, PartialEq)]
pub enum SpecChange {
    /// Store this work (new, or a new version of the one of the same name).
    Put(ManifestWork),
    /// The work was renamed at the source: drop `old_name`, store the work.
    Rename {
        /// The name the copy had.
        old_name: String,
        /// The work under its new name.
        work: ManifestWork,
    },
    /// Nothing to do, and why.
    Ignore(&'static str),
}

fn time_of(t: &DateTime<Utc>) -> Option<Time> {
    Timestamp::from_millisecond(t.timestamp_millis())
        .ok()
        .map(Time)
}

/// The work a spec event describes, as the agent stores a work it did not have.
pub fn work_from(update: &SpecUpdate) -> ManifestWork {
    let deletion_timestamp = update.deletion_timestamp.as_ref().and_then(time_of);
    let deleting = deletion_timestamp.is_some();
    ManifestWork {
        metadata: ObjectMeta {
            name: Some(update.name.clone()),
            namespace: Some(update.namespace.clone()),
            uid: Some(update.uid.clone()),
            generation: Some(update.generation),
            labels: non_empty(&update.labels),
            annotations: non_empty(&update.annotations),
            deletion_timestamp,
            creation_timestamp: update.creation_timestamp.as_ref().and_then(time_of),
            // A work the agent first hears of as deleted still gets its cleanup (resources it
            // applied before a restart), so it carries the finalizer that cleanup removes.
            finalizers: deleting.then(|| vec![MANIFEST_WORK_FINALIZER.to_string()]),
            ..ObjectMeta::default()
        },
        spec: update.spec.clone().unwrap_or_default(),
        status: None,
    }
}

fn non_empty(map: &BTreeMap<String, String>) -> Option<BTreeMap<String, String>> {
    (!map.is_empty()).then(|| map.clone())
}

/// The change a spec event makes, given the stored work with the event's UID (if any).
pub fn apply_spec(existing: Option<&ManifestWork>, update: &SpecUpdate) -> SpecChange {
    let Some(last) = existing else {
        return SpecChange::Put(work_from(update));
    };
    let last_name = last.metadata.name.clone().unwrap_or_default();
    if last_name != update.name {
        return SpecChange::Rename {
            old_name: last_name,
            work: work_from(update),
        };
    }
    if let Some(deleted_at) = update.deletion_timestamp.as_ref() {
        // The generation may still move while the work is being deleted (a deletion without a
        // version, as a gRPC broker sends one, leaves it).
        let mut deleting = last.clone();
        if deleting.metadata.deletion_timestamp.is_none() {
            deleting.metadata.deletion_timestamp = time_of(deleted_at);
        }
        if update.generation != 0 {
            deleting.metadata.generation = Some(update.generation);
        }
        // Deleted before this agent put its finalizer on it (a restarted agent gets the work from
        // the source's answer and the deletion right after, while its first reconcile waits for
        // the spoke): the cleanup still runs, of what an earlier run applied, and ends with
        // `Deleted`. A copy being deleted without the finalizer would be held for ever, as
        // nothing acts on a deletion it has no finalizer for.
        let finalizers = deleting.metadata.finalizers.get_or_insert_with(Vec::new);
        if !finalizers.iter().any(|f| f == MANIFEST_WORK_FINALIZER) {
            finalizers.push(MANIFEST_WORK_FINALIZER.to_string());
        }
        return if deleting == *last {
            SpecChange::Ignore("already being deleted")
        } else {
            SpecChange::Put(deleting)
        };
    }
    let last_generation = last.metadata.generation.unwrap_or(0);
    if update.generation != 0 && update.generation < last_generation {
        return SpecChange::Ignore("stale generation");
    }
    let mut updated = work_from(update);
    updated.metadata.finalizers = last.metadata.finalizers.clone();
    updated.metadata.creation_timestamp = last
        .metadata
        .creation_timestamp
        .clone()
        .or(updated.metadata.creation_timestamp);
    updated.metadata.deletion_timestamp = last.metadata.deletion_timestamp.clone();
    updated.status = last.status.clone();
    updated.metadata.resource_version = last.metadata.resource_version.clone();
    if updated == *last {
        SpecChange::Ignore("unchanged")
    } else {
        SpecChange::Put(updated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::EventType;
    use serde_json::json;
    use work_api::ManifestWorkStatus;

    fn update(generation: i64, name: &str) -> SpecUpdate {
        SpecUpdate {
            event_type: EventType::SpecCreate,
            uid: "uid-1".into(),
            name: name.into(),
            namespace: "cluster1".into(),
            generation,
            source: "maestro".into(),
            labels: [("a".to_string(), "b".to_string())].into(),
            annotations: BTreeMap::new(),
            deletion_timestamp: None,
            creation_timestamp: None,
            spec: Some(
                serde_json::from_value(json!({"workload": {"manifests": [
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "c", "namespace": "default"}, "data": {"g": generation.to_string()}}
                ]}}))
                .expect("spec"),
            ),
        }
    }

    fn stored(generation: i64) -> ManifestWork {
        let mut w = work_from(&update(generation, "w"));
        w.metadata.finalizers = Some(vec![MANIFEST_WORK_FINALIZER.to_string()]);
        w.metadata.resource_version = Some("7".into());
        w.status = Some(ManifestWorkStatus::default());
        w
    }

    #[test]
    fn an_unknown_work_is_added_with_the_events_identity() {
        let SpecChange::Put(w) = apply_spec(None, &update(3, "w")) else {
            panic!("added");
        };
        assert_eq!(w.metadata.uid.as_deref(), Some("uid-1"));
        assert_eq!(w.metadata.generation, Some(3));
        assert_eq!(w.metadata.namespace.as_deref(), Some("cluster1"));
        assert!(w.metadata.finalizers.is_none());
        assert_eq!(w.spec.workload.manifests.len(), 1);
    }

    #[test]
    fn a_newer_spec_replaces_the_old_and_keeps_finalizers_and_status() {
        let last = stored(1);
        let SpecChange::Put(w) = apply_spec(Some(&last), &update(2, "w")) else {
            panic!("updated");
        };
        assert_eq!(w.metadata.generation, Some(2));
        assert_eq!(w.metadata.finalizers, last.metadata.finalizers);
        assert_eq!(w.status, last.status);
        assert_ne!(w.spec, last.spec);
    }

    #[test]
    fn stale_and_repeated_events_change_nothing() {
        let last = stored(3);
        assert_eq!(
            apply_spec(Some(&last), &update(2, "w")),
            SpecChange::Ignore("stale generation")
        );
        assert_eq!(
            apply_spec(Some(&last), &update(3, "w")),
            SpecChange::Ignore("unchanged")
        );
        // Generation 0 is unversioned: never stale.
        assert!(matches!(
            apply_spec(Some(&last), &update(0, "w")),
            SpecChange::Put(_)
        ));
    }

    #[test]
    fn a_deletion_marks_the_stored_copy_and_a_rename_replaces_it() {
        let last = stored(2);
        let mut del = update(2, "w");
        del.deletion_timestamp = Some(Utc::now());
        del.spec = None;
        let SpecChange::Put(w) = apply_spec(Some(&last), &del) else {
            panic!("marked");
        };
        assert!(w.metadata.deletion_timestamp.is_some());
        assert_eq!(w.spec, last.spec, "the spec it has stays");
        assert_eq!(w.metadata.finalizers, last.metadata.finalizers);
        assert_eq!(
            apply_spec(Some(&w), &del),
            SpecChange::Ignore("already being deleted")
        );

        let SpecChange::Rename { old_name, work } = apply_spec(Some(&last), &update(2, "w2"))
        else {
            panic!("renamed");
        };
        assert_eq!(old_name, "w");
        assert_eq!(work.metadata.name.as_deref(), Some("w2"));
    }

    /// Found by `chaos --hub mqtt` (seed 1795839450126675165, work w27t): a restarted agent got
    /// the work in the source's answer, its first reconcile waited for a spoke API server being
    /// restarted, and the source deleted the work meanwhile. The copy, deleting and without the
    /// finalizer, was never cleaned up nor reported `Deleted`.
    #[test]
    fn a_work_deleted_before_the_agent_put_its_finalizer_on_it_gets_the_finalizer() {
        let mut last = stored(1);
        last.metadata.finalizers = None;
        let mut del = update(2, "w");
        del.deletion_timestamp = Some(Utc::now());
        let SpecChange::Put(w) = apply_spec(Some(&last), &del) else {
            panic!("marked");
        };
        assert!(w.metadata.deletion_timestamp.is_some());
        assert_eq!(
            w.metadata.finalizers,
            Some(vec![MANIFEST_WORK_FINALIZER.to_string()])
        );
        assert_eq!(
            apply_spec(Some(&w), &del),
            SpecChange::Ignore("already being deleted")
        );
    }

    #[test]
    fn a_work_first_heard_of_as_deleted_keeps_its_cleanup_finalizer() {
        let mut del = update(4, "gone");
        del.deletion_timestamp = Some(Utc::now());
        del.spec = None;
        let SpecChange::Put(w) = apply_spec(None, &del) else {
            panic!("added");
        };
        assert!(w.metadata.deletion_timestamp.is_some());
        assert_eq!(
            w.metadata.finalizers,
            Some(vec![MANIFEST_WORK_FINALIZER.to_string()])
        );
    }
}
