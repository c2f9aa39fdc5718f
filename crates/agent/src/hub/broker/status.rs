//! What the agent sends a source about its works: status events (with the work's identity as
//! the source checks it), the `Deleted` status that ends a work, the answer to a status resync
//! request, and the versions listed in a spec resync request. Plain functions over plain data.

use std::collections::HashMap;

use cloudevents::codec::{self, ResourceStatusHashList, ResourceVersion, StatusReport};
use cloudevents::{CloudEvent, EventType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use work_api::{ManifestWork, ManifestWorkStatus};

use crate::hub::hearing::GoneWork;

/// Condition type of the status that tells the source a work's cleanup is done.
pub const DELETED: &str = "Deleted";

/// The source a work came from (the `originalsource` of its status events).
pub fn original_source(work: &ManifestWork) -> String {
    codec::original_source(work.metadata.labels.as_ref())
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

/// A work known only by what its source knows of it (no spec, no status).
pub fn gone_work(work: GoneWork<'_>, cluster: &str) -> ManifestWork {
    let mut gone = ManifestWork::new(work.name, Default::default());
    gone.metadata.namespace = Some(cluster.to_string());
    gone.metadata.uid = Some(work.uid.to_string());
    gone.metadata.generation = Some(work.generation);
    gone.metadata.labels = Some(
        [(
            codec::LABEL_ORIGINAL_SOURCE.to_string(),
            work.source.to_string(),
        )]
        .into(),
    );
    gone
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

/// The status hashes a status resync request lists, by work UID. An empty list asks for every
/// work; a listed work is answered when its status hash differs from the source's; a work the
/// source did not list is left alone (a source may send its list in several events: Maestro
/// sends at most 1,000 hashes per event). Looked up by UID, so a request costs one pass over
/// the works however long its list is.
pub struct ListedHashes<'a>(Option<HashMap<&'a str, &'a str>>);

impl<'a> ListedHashes<'a> {
    /// The hashes `request` lists.
    pub fn of(request: &'a ResourceStatusHashList) -> Self {
        if request.status_hashes.is_empty() {
            return Self(None);
        }
        Self(Some(
            request
                .status_hashes
                .iter()
                .map(|h| (h.resource_id.as_str(), h.status_hash.as_str()))
                .collect(),
        ))
    }

    /// Whether the request asks for the work with `uid` (listed, or every work).
    pub fn asks_for(&self, uid: &str) -> bool {
        self.0.as_ref().is_none_or(|m| m.contains_key(uid))
    }

    /// The UIDs the request names (none when it asks for every work).
    pub fn named(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.0.iter().flat_map(|m| m.keys().copied())
    }

    /// Whether the source lacks `work`'s status: asked for, and not with the status it has.
    pub fn lacks(&self, work: &ManifestWork) -> bool {
        let Some(listed) = &self.0 else { return true };
        let uid = work.metadata.uid.as_deref().unwrap_or_default();
        listed.get(uid).is_some_and(|hash| {
            let current = work.status.clone().unwrap_or_default();
            codec::status_hash(&current).ok().as_deref() != Some(*hash)
        })
    }
}

/// The (UID, generation) pair a spec resync request lists for a work; none without a UID.
pub fn resource_version(meta: &ObjectMeta) -> Option<ResourceVersion> {
    Some(ResourceVersion {
        resource_id: meta.uid.clone()?,
        resource_version: meta.generation.unwrap_or(0),
    })
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

    /// The UIDs of `works` whose status answers `request`.
    fn answered(works: &[ManifestWork], request: &ResourceStatusHashList) -> Vec<String> {
        let listed = ListedHashes::of(request);
        works
            .iter()
            .filter(|w| listed.lacks(w))
            .filter_map(|w| w.metadata.uid.clone())
            .collect()
    }

    fn hash_of(w: &ManifestWork) -> String {
        codec::status_hash(&w.status.clone().unwrap_or_default()).expect("hash")
    }

    fn listing(hashes: &[(&str, String)]) -> ResourceStatusHashList {
        ResourceStatusHashList {
            status_hashes: hashes
                .iter()
                .map(|(uid, hash)| ResourceStatusHash {
                    resource_id: (*uid).into(),
                    status_hash: hash.clone(),
                })
                .collect(),
        }
    }

    #[test]
    fn a_status_resync_answers_all_or_only_the_changed_listed_ones() {
        let works = [work("a", 1, true), work("b", 1, false), work("c", 1, true)];
        assert_eq!(
            answered(&works, &ResourceStatusHashList::default()),
            ["a", "b", "c"]
        );
        let request = listing(&[("a", hash_of(&works[0])), ("b", "stale".into())]);
        assert_eq!(
            answered(&works, &request),
            ["b"],
            "a is current, c was not listed"
        );
        let listed = ListedHashes::of(&request);
        assert!(listed.asks_for("a") && listed.asks_for("b") && !listed.asks_for("c"));
        assert!(ListedHashes::of(&ResourceStatusHashList::default()).asks_for("c"));
    }

    #[test]
    fn a_list_sent_in_parts_answers_each_part_alone() {
        let works = [
            work("a", 1, true),
            work("b", 1, false),
            work("c", 1, true),
            work("d", 1, true),
        ];
        // As Maestro splits a long list: each event lists some works, none lists d.
        let first = listing(&[("a", "stale".into()), ("b", hash_of(&works[1]))]);
        let second = listing(&[("c", "stale".into())]);
        assert_eq!(answered(&works, &first), ["a"]);
        assert_eq!(
            answered(&works, &second),
            ["c"],
            "a part answers only its own works, never the ones another part listed"
        );
    }

    #[test]
    fn a_spec_resync_lists_uids_and_generations() {
        let works = [work("a", 1, true), work("b", 4, false)];
        let versions: Vec<ResourceVersion> = works
            .iter()
            .filter_map(|w| resource_version(&w.metadata))
            .collect();
        assert_eq!(versions.len(), 2);
        assert_eq!(versions[1].resource_id, "b");
        assert_eq!(versions[1].resource_version, 4);
        let mut unnamed = work("c", 1, false);
        unnamed.metadata.uid = None;
        assert_eq!(
            resource_version(&unnamed.metadata),
            None,
            "no UID, nothing to list"
        );
    }
}
