//! The spec events a Maestro-shaped source sends: a resource's spec, and the answer to an
//! agent's spec resync request, as each of Maestro's two front ends builds it.

use chrono::{DateTime, Utc};
use cloudevents::codec::ResourceVersionList;
use cloudevents::types::{self, EventType};
use cloudevents::{CloudEvent, ExtValue};

use super::rules::StoredResource;

/// The spec event Maestro publishes for `r`: `resourceid`, `resourceversion`, `clustername`,
/// `metadata`, `deletiontimestamp` when soft-deleted, and the bundle as `application/json` data.
pub fn spec_event(source_id: &str, ty: EventType, r: &StoredResource) -> CloudEvent {
    let mut ev = CloudEvent::new(ty, source_id)
        .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(r.id.clone()))
        .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(r.version))
        .with_ext(
            types::EXT_CLUSTER_NAME,
            ExtValue::String(r.consumer.clone()),
        )
        .with_ext(
            types::EXT_METADATA,
            ExtValue::String(r.metadata.to_string()),
        );
    if let Some(t) = r.deleted_at {
        ev = ev.with_ext(types::EXT_DELETION_TIMESTAMP, ExtValue::Time(t));
    }
    ev.data = Some(r.bundle.to_string().into_bytes());
    ev
}

/// Who answers an agent's `spec.resync_request`: the two differ in what they say about the ids
/// the agent listed that the source does not hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResyncAnswer {
    /// sdk-go's source client (`respondResyncSpecRequest`), as Maestro's server answers over
    /// MQTT: each unknown id as a deletion from the source with the listed `resourceversion`; a
    /// consumer without any resource gets no answer at all, not even deletions.
    SourceClient,
    /// sdk-go's `GRPCBroker`, as OCM's gRPC server and Maestro's gRPC broker answer: each unknown
    /// id as a deletion from `source` without a version, also for a cluster without resources.
    GrpcBroker,
}

/// The answer to a `spec.resync_request` of `consumer`, in order:
///
/// - each resource of the consumer (creation order) that is soft-deleted, regardless of version,
///   as `spec.resync_response` with data and `deletiontimestamp`;
/// - each other resource of the consumer whose version is 0 or greater than the one the agent
///   listed (an unlisted resource counts as listed at 0), with data;
/// - for each id the agent listed that the consumer has no resource for, a `spec.resync_response`
///   with `resourceid`, `clustername` and `deletiontimestamp` = `now`: no data, no content type
///   (what else it carries depends on `who`, see [`ResyncAnswer`]).
pub fn resync_answer<'a>(
    who: ResyncAnswer,
    source_id: &str,
    consumer: &str,
    resources: impl IntoIterator<Item = &'a StoredResource>,
    request: &ResourceVersionList,
    now: DateTime<Utc>,
) -> Vec<CloudEvent> {
    let mut ours: Vec<&StoredResource> = resources
        .into_iter()
        .filter(|r| r.consumer == consumer)
        .collect();
    if ours.is_empty() && who == ResyncAnswer::SourceClient {
        return vec![];
    }
    ours.sort_by_key(|r| r.ordinal);
    // By id: a request of a restarted agent lists every work it holds (100,000 in the
    // benchmark), and a search of the list per resource was quadratic.
    let mut versions = std::collections::HashMap::new();
    for v in &request.resource_versions {
        // The first listing of an id counts, as a search of the list found it.
        versions
            .entry(v.resource_id.as_str())
            .or_insert(v.resource_version);
    }
    let listed = |id: &str| versions.get(id).copied().unwrap_or(0);
    let held: std::collections::HashSet<&str> = ours.iter().map(|r| r.id.as_str()).collect();
    let mut out: Vec<CloudEvent> = ours
        .iter()
        .filter(|r| r.deleted_at.is_some() || r.version == 0 || r.version > listed(&r.id))
        .map(|r| spec_event(source_id, EventType::SpecResyncResponse, r))
        .collect();
    for v in &request.resource_versions {
        if held.contains(v.resource_id.as_str()) {
            continue;
        }
        let mut ev = match who {
            ResyncAnswer::SourceClient => CloudEvent::new(EventType::SpecResyncResponse, source_id)
                .with_ext(
                    types::EXT_RESOURCE_VERSION,
                    ExtValue::Integer(v.resource_version),
                ),
            // The broker builds it with source "source" and no version.
            ResyncAnswer::GrpcBroker => CloudEvent::new(EventType::SpecResyncResponse, "source"),
        }
        .with_ext(
            types::EXT_RESOURCE_ID,
            ExtValue::String(v.resource_id.clone()),
        )
        .with_ext(
            types::EXT_CLUSTER_NAME,
            ExtValue::String(consumer.to_string()),
        )
        .with_ext(types::EXT_DELETION_TIMESTAMP, ExtValue::Time(now));
        ev.datacontenttype = None;
        ev.data = None;
        out.push(ev);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::codec::ResourceVersion;

    use crate::maestro::stored;

    #[test]
    fn spec_resync_answer_follows_sdk_go() {
        let now = Utc::now();
        let mut deleting = stored("b", "c1", 1, 2);
        deleting.deleted_at = Some(now);
        let store = [
            stored("a", "c1", 2, 1),
            deleting,
            stored("other", "c2", 1, 3),
            stored("d", "c1", 3, 4),
            stored("e", "c1", 1, 5),
        ];
        let req = request(&[
            ("a", 1),
            ("b", 1),
            ("d", 3),
            ("x", 5),
            ("other", 1),
            ("e", 0),
        ]);
        let answer = resync_answer(
            ResyncAnswer::SourceClient,
            "maestro",
            "c1",
            &store,
            &req,
            now,
        );
        let ids: Vec<_> = answer.iter().map(id_of).collect();
        // a: newer; b: deleting regardless; d: same version, skipped; e: listed at 0;
        // x unknown and "other" belongs to another consumer: deletions, in request order.
        assert_eq!(ids, ["a", "b", "e", "x", "other"]);
        for ev in &answer {
            assert_eq!(
                ev.event_type().expect("type"),
                EventType::SpecResyncResponse
            );
            assert_eq!(ev.source, "maestro");
            assert_eq!(
                ev.ext_string(types::EXT_CLUSTER_NAME).as_deref(),
                Some("c1")
            );
        }
        let a = &answer[0];
        assert_eq!(
            a.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
            Some(2)
        );
        assert!(!a.extensions.contains_key(types::EXT_DELETION_TIMESTAMP));
        assert_eq!(a.datacontenttype.as_deref(), Some(types::JSON));
        let b = &answer[1];
        assert!(
            b.ext_time(types::EXT_DELETION_TIMESTAMP)
                .expect("time")
                .is_some()
        );
        assert!(
            b.data.is_some(),
            "a deleting resource is sent with its bundle"
        );
        let x = &answer[3];
        assert_eq!(
            x.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
            Some(5)
        );
        assert_eq!(
            x.ext_time(types::EXT_DELETION_TIMESTAMP).expect("time"),
            Some(now)
        );
        assert!(x.data.is_none() && x.datacontenttype.is_none());
        assert!(!x.extensions.contains_key(types::EXT_METADATA));

        // An empty request: everything of the consumer goes out, nothing is deleted.
        let all = resync_answer(
            ResyncAnswer::SourceClient,
            "maestro",
            "c1",
            &store,
            &request(&[]),
            now,
        );
        assert_eq!(
            all.iter().map(id_of).collect::<Vec<_>>(),
            ["a", "b", "d", "e"]
        );
        // sdk-go answers nothing at all to a consumer without resources.
        assert!(
            resync_answer(
                ResyncAnswer::SourceClient,
                "maestro",
                "c9",
                &store,
                &req,
                now
            )
            .is_empty()
        );
    }

    fn request(list: &[(&str, i64)]) -> ResourceVersionList {
        ResourceVersionList {
            resource_versions: list
                .iter()
                .map(|(id, v)| ResourceVersion {
                    resource_id: id.to_string(),
                    resource_version: *v,
                })
                .collect(),
        }
    }

    fn id_of(ev: &CloudEvent) -> String {
        ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default()
    }

    #[test]
    fn the_grpc_broker_answers_unknown_ids_without_a_version_even_to_an_empty_cluster() {
        let now = Utc::now();
        let store = [stored("a", "c1", 2, 1)];
        let answer = resync_answer(
            ResyncAnswer::GrpcBroker,
            "maestro",
            "c9",
            &store,
            &request(&[("x", 5)]),
            now,
        );
        assert_eq!(answer.iter().map(id_of).collect::<Vec<_>>(), ["x"]);
        let x = &answer[0];
        assert_eq!(x.source, "source");
        assert_eq!(
            x.ext_integer(types::EXT_RESOURCE_VERSION).expect("int"),
            None
        );
        assert_eq!(
            x.ext_time(types::EXT_DELETION_TIMESTAMP).expect("time"),
            Some(now)
        );
        assert!(x.data.is_none() && x.datacontenttype.is_none());
        // The resources it resends are the same as the source client's.
        let req = request(&[("a", 1)]);
        let ids = |who| {
            resync_answer(who, "maestro", "c1", &store, &req, now)
                .iter()
                .map(id_of)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            ids(ResyncAnswer::GrpcBroker),
            ids(ResyncAnswer::SourceClient)
        );
    }
}
