//! What the agent sends a source about its works: status events (with the work's identity as
//! the source checks it), the `Deleted` status that ends a work, the answer to a status resync
//! request, and the versions listed in a spec resync request. Plain functions over plain data.

use cloudevents::codec::{self, ResourceStatusHashList, ResourceVersion, StatusReport};
use cloudevents::{CloudEvent, EventType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use work_api::{ManifestWork, ManifestWorkStatus};

/// Condition type of the status that tells the source a work's cleanup is done.
pub const DELETED: &str = "Deleted";

/// The source a work came from (the `originalsource` of its status events).
pub fn original_source(work: &ManifestWork) -> String {
    work.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(codec::LABEL_ORIGINAL_SOURCE))
        .cloned()
        .unwrap_or_default()
}

/// The status event of `work` (its current status, or none yet), of type `ty`.
pub fn status_event(
    work: &ManifestWork,
    ty: EventType,
    client_id: &str,
    sequence_id: u64,
) -> Result<CloudEvent, cloudevents::Error> {
    let status = work.status.clone().unwrap_or_default();
    let mut meta = work.metadata.clone();
    // The local resourceVersion means nothing to the source (upstream sends it empty).
    meta.resource_version = None;
    meta.managed_fields = None;
    let source = original_source(work);
    let report = StatusReport {
        uid: work.metadata.uid.as_deref().unwrap_or_default(),
        generation: work.metadata.generation.unwrap_or(0),
        cluster: work.metadata.namespace.as_deref().unwrap_or_default(),
        original_source: &source,
        metadata: serde_json::to_value(&meta).ok(),
        status: &status,
    };
    codec::encode_status(&report, ty, client_id, sequence_id)
}

/// `work` with the `Deleted=True` condition its last status event carries: its manifests are
/// gone from the cluster and the source may forget it.
pub fn with_deleted_condition(mut work: ManifestWork) -> ManifestWork {
    let cluster = work.metadata.namespace.clone().unwrap_or_default();
    let status = work.status.get_or_insert_with(ManifestWorkStatus::default);
    status.conditions.retain(|c| c.type_ != DELETED);
    status.conditions.push(Condition {
        type_: DELETED.to_string(),
        status: "True".to_string(),
        reason: "ManifestsDeleted".to_string(),
        message: format!("The manifests are deleted from the cluster {cluster}"),
        last_transition_time: Time(Timestamp::now()),
        observed_generation: work.metadata.generation,
    });
    work
}

/// The works whose status answers a status resync request: all of them for an empty list,
/// else those the source listed whose status hash differs from the source's (works it did not
/// list are left for it to delete).
pub fn resync_answer<'a>(
    works: impl IntoIterator<Item = &'a ManifestWork>,
    request: &ResourceStatusHashList,
) -> Vec<&'a ManifestWork> {
    if request.status_hashes.is_empty() {
        return works.into_iter().collect();
    }
    works
        .into_iter()
        .filter(|w| {
            let uid = w.metadata.uid.as_deref().unwrap_or_default();
            request
                .status_hashes
                .iter()
                .find(|h| h.resource_id == uid)
                .is_some_and(|h| {
                    let current = w.status.clone().unwrap_or_default();
                    codec::status_hash(&current).ok().as_deref() != Some(h.status_hash.as_str())
                })
        })
        .collect()
}

/// The (UID, generation) pairs a spec resync request lists, from the works' metadata.
pub fn resource_versions<'a>(
    works: impl IntoIterator<Item = &'a ObjectMeta>,
) -> Vec<ResourceVersion> {
    works
        .into_iter()
        .filter_map(|meta| {
            Some(ResourceVersion {
                resource_id: meta.uid.clone()?,
                resource_version: meta.generation.unwrap_or(0),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::codec::ResourceStatusHash;
    use cloudevents::types;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn work(uid: &str, generation: i64, applied: bool) -> ManifestWork {
        let mut status = ManifestWorkStatus::default();
        if applied {
            status.conditions.push(Condition {
                type_: "Applied".into(),
                status: "True".into(),
                reason: "AppliedManifestWorkComplete".into(),
                message: String::new(),
                last_transition_time: Time(Timestamp::UNIX_EPOCH),
                observed_generation: Some(generation),
            });
        }
        ManifestWork {
            metadata: ObjectMeta {
                name: Some(uid.into()),
                namespace: Some("cluster1".into()),
                uid: Some(uid.into()),
                generation: Some(generation),
                resource_version: Some("12".into()),
                labels: Some([(codec::LABEL_ORIGINAL_SOURCE.to_string(), "maestro".into())].into()),
                ..ObjectMeta::default()
            },
            spec: Default::default(),
            status: Some(status),
        }
    }

    #[test]
    fn a_status_event_carries_the_identity_the_source_checks() {
        let ev = status_event(
            &work("u1", 3, true),
            EventType::StatusUpdate,
            "c1-work-agent",
            42,
        )
        .expect("encodes");
        assert_eq!(ev.source, "c1-work-agent");
        assert_eq!(ev.ext_string(types::EXT_RESOURCE_ID).as_deref(), Some("u1"));
        assert_eq!(
            ev.ext_integer(types::EXT_RESOURCE_VERSION).ok().flatten(),
            Some(3)
        );
        assert_eq!(
            ev.ext_string(types::EXT_CLUSTER_NAME).as_deref(),
            Some("cluster1")
        );
        assert_eq!(
            ev.ext_string(types::EXT_ORIGINAL_SOURCE).as_deref(),
            Some("maestro")
        );
        assert_eq!(ev.ext_string(types::EXT_SEQUENCE_ID).as_deref(), Some("42"));
        let meta = ev.ext_string(types::EXT_METADATA).expect("metadata");
        assert!(!meta.contains("resourceVersion"), "{meta}");
    }

    #[test]
    fn the_deleted_condition_is_added_once() {
        let w = with_deleted_condition(with_deleted_condition(work("u1", 2, true)));
        let conditions = &w.status.expect("status").conditions;
        assert_eq!(conditions.iter().filter(|c| c.type_ == DELETED).count(), 1);
        let deleted = conditions
            .iter()
            .find(|c| c.type_ == DELETED)
            .expect("Deleted");
        assert_eq!(deleted.status, "True");
        assert_eq!(deleted.reason, "ManifestsDeleted");
        assert!(
            conditions.iter().any(|c| c.type_ == "Applied"),
            "the rest stays"
        );
    }

    #[test]
    fn a_status_resync_answers_all_or_only_the_changed_listed_ones() {
        let works = [work("a", 1, true), work("b", 1, false), work("c", 1, true)];
        let all = resync_answer(&works, &ResourceStatusHashList::default());
        assert_eq!(all.len(), 3);
        let hash_of = |w: &ManifestWork| {
            codec::status_hash(&w.status.clone().unwrap_or_default()).expect("hash")
        };
        let request = ResourceStatusHashList {
            status_hashes: vec![
                ResourceStatusHash {
                    resource_id: "a".into(),
                    status_hash: hash_of(&works[0]),
                },
                ResourceStatusHash {
                    resource_id: "b".into(),
                    status_hash: "stale".into(),
                },
            ],
        };
        let changed: Vec<_> = resync_answer(&works, &request)
            .into_iter()
            .filter_map(|w| w.metadata.uid.clone())
            .collect();
        assert_eq!(changed, ["b"], "a is current, c was not listed");
    }

    #[test]
    fn a_spec_resync_lists_uids_and_generations() {
        let works = [work("a", 1, true), work("b", 4, false)];
        let versions = resource_versions(works.iter().map(|w| &w.metadata));
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[1].resource_id, "b");
        assert_eq!(versions[1].resource_version, 4);
    }
}
