//! The source itself: the store, the spec events for what changes in it, the judging of what the
//! agents send, and what tests ask of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chrono::Utc;
use cloudevents::codec::{ResourceStatusHash, ResourceStatusHashList, ResourceVersionList};
use cloudevents::types::{self, EventType};
use cloudevents::{CloudEvent, ExtValue};
use serde_json::Value;

use super::record::{HardDeletion, SourceCounters, StatusArrival, StatusVerdict};
use super::rules;
use super::rules::{StatusOutcome, StoredResource, apply_status, condition_true, is_deleted};
use super::spec::{ResyncAnswer, resync_answer, spec_event};
use super::wire::{Error, Wire};
use crate::wire_faults::{Addressed, WireFaults};

/// How often [`Maestro::wait_until`] re-evaluates its condition.
pub const WAIT_POLL: Duration = Duration::from_millis(50);

/// How to create a resource ([`Maestro::create_with`]).
#[derive(Clone, Debug, Default)]
pub struct CreateOptions {
    /// The resource id; a fresh uuid when `None`.
    pub id: Option<String>,
    /// `metadata.name`; the resource id when `None` (Maestro forces the id).
    pub name: Option<String>,
    /// Further ObjectMeta fields (labels, annotations, ...) for the `metadata` extension.
    pub metadata: Option<Value>,
}

/// What the source did with one message from an agent (front ends answer by it where their
/// wire has answers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Not a CloudEvent (why).
    NotAnEvent(String),
    /// A CloudEvent of no known type (why).
    UnknownType(String),
    /// A status event lost in flight by an armed wire fault: never judged, not kept.
    Lost,
    /// A status event the front end refused before it was judged.
    Refused,
    /// A status event, judged.
    Judged(StatusOutcome),
    /// A spec resync request, answered with so many events.
    Answered(usize),
    /// A spec resync request that names no cluster or lists nothing readable (why).
    BadResyncRequest(String),
    /// A spec resync request whose answer could not be put on the wire (why).
    Unanswered(String),
    /// An event of a known type the source does not act on.
    Ignored(EventType),
}

#[derive(Default)]
struct State {
    resources: BTreeMap<String, StoredResource>,
    hard_deleted: BTreeSet<String>,
    deletions: Vec<HardDeletion>,
    faults: WireFaults,
    counters: SourceCounters,
    events: Vec<CloudEvent>,
    sent: Vec<CloudEvent>,
    verdicts: Vec<StatusVerdict>,
    arrivals: Vec<StatusArrival>,
    next_ordinal: u64,
}

/// The stored resource `id`, or why there is none.
fn held<'a>(st: &'a mut State, id: &str) -> Result<&'a mut StoredResource, Error> {
    st.resources
        .get_mut(id)
        .ok_or_else(|| Error::UnknownResource(id.to_string()))
}

/// A Maestro-shaped source; a front end gives it its wire and hands it what arrives.
pub struct Maestro {
    source_id: String,
    resync: ResyncAnswer,
    wire: Arc<dyn Wire>,
    state: Mutex<State>,
}

impl Maestro {
    /// A source with the id `source_id` (Maestro's is `maestro`), answering spec resync requests
    /// as `resync`, sending on `wire`.
    pub fn new(source_id: &str, resync: ResyncAnswer, wire: Arc<dyn Wire>) -> Self {
        Self {
            source_id: source_id.to_string(),
            resync,
            wire,
            state: Mutex::new(State::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a test thread panicked mid-update; the data is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `ev` to `consumer` through the armed wire faults; called with the state locked so
    /// that the wire order is the store's order.
    fn send(&self, st: &mut State, consumer: &str, ev: CloudEvent) -> Result<(), Error> {
        let out = st.faults.outgoing(consumer, ev);
        self.send_all(st, out)
    }

    /// Sends events as they are (the wire faults already applied), recording each.
    fn send_all(&self, st: &mut State, out: Vec<Addressed>) -> Result<(), Error> {
        for (consumer, ev) in out {
            self.wire.send(&consumer, &ev)?;
            if let Ok(ty) = ev.event_type() {
                *st.counters.sent_by_type.entry(ty).or_default() += 1;
            }
            if let Some(r) = ev
                .ext_string(types::EXT_RESOURCE_ID)
                .and_then(|id| st.resources.get_mut(&id))
                && ev.data.is_some()
            {
                r.spec_events_sent += 1;
            }
            st.sent.push(ev);
        }
        Ok(())
    }

    /// The source id (the `source` of spec events, the `originalsource` statuses must carry).
    pub fn source_id(&self) -> &str {
        &self.source_id
    }

    /// Creates a resource on `consumer` (id a fresh uuid, `metadata.name` = id, version 1) and
    /// sends `spec.create_request`; returns the id.
    pub fn create(&self, consumer: &str, bundle: Value) -> Result<String, Error> {
        self.create_with(consumer, bundle, CreateOptions::default())
    }

    /// Creates a resource with a chosen id, name or further metadata, and sends
    /// `spec.create_request`; returns the id.
    pub fn create_with(
        &self,
        consumer: &str,
        bundle: Value,
        opts: CreateOptions,
    ) -> Result<String, Error> {
        self.wire.check_consumer(consumer)?;
        let id = opts.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut metadata = match opts.metadata {
            None => serde_json::Map::new(),
            Some(Value::Object(m)) => m,
            Some(other) => return Err(Error::BadMetadata(other.to_string())),
        };
        metadata.insert(
            "name".into(),
            Value::String(opts.name.unwrap_or_else(|| id.clone())),
        );
        // As Maestro fills it from the resource's creation time, to the second.
        metadata.entry("creationTimestamp").or_insert_with(|| {
            let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            Value::String(now)
        });
        let mut st = self.lock();
        if st.resources.contains_key(&id) || st.hard_deleted.contains(&id) {
            return Err(Error::Exists(id));
        }
        st.next_ordinal += 1;
        let r = StoredResource::new(
            &id,
            consumer,
            Value::Object(metadata),
            bundle,
            st.next_ordinal,
        );
        let ev = spec_event(&self.source_id, EventType::SpecCreate, &r);
        st.resources.insert(id.clone(), r);
        self.send(&mut st, consumer, ev)?;
        Ok(id)
    }

    /// Replaces the bundle, bumps the version and sends `spec.update_request`; returns the new
    /// version. A soft-deleted resource is [`Error::Deleting`].
    pub fn update(&self, id: &str, bundle: Value) -> Result<i64, Error> {
        let mut st = self.lock();
        let r = held(&mut st, id)?;
        if r.deleted_at.is_some() {
            return Err(Error::Deleting(id.to_string()));
        }
        r.version += 1;
        r.bundle = bundle;
        let (version, consumer) = (r.version, r.consumer.clone());
        let ev = spec_event(&self.source_id, EventType::SpecUpdate, r);
        self.send(&mut st, &consumer, ev)?;
        Ok(version)
    }

    /// Soft-deletes the resource (sets `deleted_at`) and sends `spec.delete_request` with
    /// `deletiontimestamp` and the bundle; the resource goes when the agent reports
    /// `Deleted=True`. Idempotent like Maestro: a second delete sends nothing (use
    /// [`Maestro::republish`] to send the delete again).
    pub fn delete(&self, id: &str) -> Result<(), Error> {
        let mut st = self.lock();
        let r = held(&mut st, id)?;
        if r.deleted_at.is_some() {
            return Ok(());
        }
        r.deleted_at = Some(Utc::now());
        let consumer = r.consumer.clone();
        let ev = spec_event(&self.source_id, EventType::SpecDelete, r);
        self.send(&mut st, &consumer, ev)
    }

    /// Sends the resource's current spec again: `spec.delete_request` when soft-deleted, else
    /// `spec.create_request` at version 1 and `spec.update_request` after.
    pub fn republish(&self, id: &str) -> Result<(), Error> {
        let mut st = self.lock();
        let r = held(&mut st, id)?;
        let ty = match (r.deleted_at, r.version) {
            (Some(_), _) => EventType::SpecDelete,
            (None, 1) => EventType::SpecCreate,
            (None, _) => EventType::SpecUpdate,
        };
        let consumer = r.consumer.clone();
        let ev = spec_event(&self.source_id, ty, r);
        self.send(&mut st, &consumer, ev)
    }

    /// Forgets a resource without telling the agent (a source that lost it): the agent learns
    /// it from the resync answer to its next subscribe.
    pub fn forget(&self, id: &str) -> bool {
        self.lock().resources.remove(id).is_some()
    }

    /// Sends any CloudEvent to `consumer`, as is (through the armed wire faults).
    pub fn publish_event(&self, consumer: &str, ev: CloudEvent) -> Result<(), Error> {
        self.wire.check_consumer(consumer)?;
        let mut st = self.lock();
        self.send(&mut st, consumer, ev)
    }

    /// Sends `status.resync_request` to `consumer` with `{"statusHashes":[...]}` from
    /// `(resource id, status hash)` pairs; an empty list asks for every status.
    pub fn request_status_resync(
        &self,
        consumer: &str,
        hashes: Vec<(String, String)>,
    ) -> Result<(), Error> {
        self.wire.check_consumer(consumer)?;
        let list = ResourceStatusHashList {
            status_hashes: hashes
                .into_iter()
                .map(|(resource_id, status_hash)| ResourceStatusHash {
                    resource_id,
                    status_hash,
                })
                .collect(),
        };
        let mut ev = CloudEvent::new(EventType::StatusResyncRequest, &self.source_id).with_ext(
            types::EXT_CLUSTER_NAME,
            ExtValue::String(consumer.to_string()),
        );
        // The list is plain strings: serializing it cannot fail.
        ev.data = Some(serde_json::to_vec(&list).unwrap_or_default());
        let mut st = self.lock();
        self.send(&mut st, consumer, ev)
    }

    /// Asks every consumer it holds resources of for a status resync with the hashes it has,
    /// `batch` hashes per request, as Maestro does when its subscription comes up (Maestro:
    /// 1,000).
    pub fn request_status_resyncs(&self, batch: usize) -> Result<(), Error> {
        let consumers: BTreeSet<String> =
            self.resources().into_iter().map(|r| r.consumer).collect();
        for consumer in consumers {
            let hashes = self.status_hashes(&consumer);
            for chunk in hashes.chunks(batch.max(1)) {
                self.request_status_resync(&consumer, chunk.to_vec())?;
            }
        }
        Ok(())
    }

    /// Takes one message from an agent: `decoded` is the CloudEvent the front end read off its
    /// wire (or why it is none). A status event is judged unless `refuse` (asked with its
    /// resource id) says the front end refuses it; a spec resync request is answered on the wire.
    pub fn receive(
        &self,
        decoded: Result<CloudEvent, String>,
        refuse: impl FnOnce(&str) -> bool,
    ) -> Taken {
        let received_at = Instant::now();
        let mut st = self.lock();
        st.counters.received += 1;
        let ev = match decoded {
            Ok(ev) => ev,
            Err(why) => {
                st.counters.malformed += 1;
                return Taken::NotAnEvent(why);
            }
        };
        let ty = match ev.event_type() {
            Ok(ty) => ty,
            Err(e) => {
                st.events.push(ev);
                st.counters.malformed += 1;
                return Taken::UnknownType(e.to_string());
            }
        };
        let is_status = matches!(
            ty,
            EventType::StatusUpdate | EventType::StatusResyncResponse
        );
        let says_deleted = || {
            ev.data
                .as_deref()
                .and_then(|d| serde_json::from_slice::<Value>(d).ok())
                .is_some_and(|status| is_deleted(&status))
        };
        if is_status && st.faults.lose_status(says_deleted()) {
            return Taken::Lost;
        }
        st.events.push(ev.clone());
        match ty {
            _ if is_status => {
                let id = ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default();
                if refuse(&id) {
                    return Taken::Refused;
                }
                Taken::Judged(self.judge(&mut st, ty, &ev, received_at))
            }
            EventType::SpecResyncRequest => self.answer_resync(&mut st, &ev),
            _ => {
                st.counters.ignored += 1;
                Taken::Ignored(ty)
            }
        }
    }

    /// Judges one status event with Maestro's rules and records the decision.
    fn judge(
        &self,
        st: &mut State,
        ty: EventType,
        ev: &CloudEvent,
        received_at: Instant,
    ) -> StatusOutcome {
        *st.counters.status_events_by_type.entry(ty).or_default() += 1;
        let (outcome, deleted_unrequested) = apply_status(&mut st.resources, &self.source_id, ev);
        let id = ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default();
        st.counters.count(&outcome);
        if deleted_unrequested {
            st.counters.deleted_unrequested += 1;
        }
        let status = ev
            .data
            .as_deref()
            .and_then(|d| serde_json::from_slice::<Value>(d).ok())
            .unwrap_or(Value::Null);
        if outcome == StatusOutcome::Deleted {
            st.hard_deleted.insert(id.clone());
            st.deletions.push(HardDeletion {
                id: id.clone(),
                at: Utc::now(),
                requested: !deleted_unrequested,
                status: status.clone(),
            });
        }
        st.arrivals.push(StatusArrival {
            at: received_at,
            resource_id: id.clone(),
            event_type: ty,
            applied: condition_true(&status, "Applied"),
            available: condition_true(&status, "Available"),
            deleted: is_deleted(&status),
            outcome: outcome.clone(),
        });
        st.verdicts.push(StatusVerdict {
            event_id: ev.id.clone(),
            resource_id: id,
            outcome: outcome.clone(),
        });
        outcome
    }

    /// Answers a spec resync request on the wire (through the armed split fault).
    fn answer_resync(&self, st: &mut State, ev: &CloudEvent) -> Taken {
        st.counters.spec_resync_requests += 1;
        let Some(consumer) = ev.ext_string(types::EXT_CLUSTER_NAME) else {
            st.counters.malformed += 1;
            return Taken::BadResyncRequest("no clustername".into());
        };
        let request: ResourceVersionList = match ev.data.as_deref() {
            None => ResourceVersionList::default(),
            Some(d) => match serde_json::from_slice(d) {
                Ok(l) => l,
                Err(e) => {
                    st.counters.malformed += 1;
                    return Taken::BadResyncRequest(e.to_string());
                }
            },
        };
        let answer = resync_answer(
            self.resync,
            &self.source_id,
            &consumer,
            st.resources.values(),
            &request,
            Utc::now(),
        );
        let n = answer.len();
        st.counters.spec_resync_responses += n as u64;
        let now = st.faults.answer(&consumer, answer);
        match self.send_all(st, now) {
            Ok(()) => Taken::Answered(n),
            Err(e) => Taken::Unanswered(e.to_string()),
        }
    }

    /// Counts a subscription of the front end to the agents (1 + resubscriptions).
    pub fn count_subscription(&self) {
        self.lock().counters.subscriptions += 1;
    }

    /// Arms or reads the wire faults (see [`WireFaults`]); armed faults apply to the events
    /// sent from now on.
    pub fn faults<R>(&self, f: impl FnOnce(&mut WireFaults) -> R) -> R {
        f(&mut self.lock().faults)
    }

    /// Sends the oldest batch of spec events the wire faults hold back; false when none.
    pub fn release_held(&self) -> Result<bool, Error> {
        let mut st = self.lock();
        let batch = st.faults.release();
        let any = !batch.is_empty();
        self.send_all(&mut st, batch)?;
        Ok(any)
    }

    /// The `(id, status hash)` of every resource of `consumer` (hash "" without a status), as
    /// Maestro lists them for its own status resync request.
    pub fn status_hashes(&self, consumer: &str) -> Vec<(String, String)> {
        self.resources()
            .into_iter()
            .filter(|r| r.consumer == consumer)
            .map(|r| (r.id, r.status_hash.unwrap_or_default()))
            .collect()
    }

    /// The latest accepted status (ManifestBundleStatus JSON) of a resource.
    pub fn status(&self, id: &str) -> Option<Value> {
        self.lock().resources.get(id)?.status.clone()
    }

    /// The `statushash` of the latest accepted status of a resource.
    pub fn status_hash(&self, id: &str) -> Option<String> {
        self.lock().resources.get(id)?.status_hash.clone()
    }

    /// The `sequenceid` of the latest accepted status of a resource.
    pub fn sequence_id(&self, id: &str) -> Option<String> {
        self.lock().resources.get(id)?.sequence_id.clone()
    }

    /// The `status` of the work condition `ty` (e.g. "Applied") in the latest accepted status.
    pub fn condition_status(&self, id: &str, ty: &str) -> Option<String> {
        let status = self.status(id)?;
        status
            .get("conditions")?
            .as_array()?
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(ty))?
            .get("status")?
            .as_str()
            .map(str::to_string)
    }

    /// Whether the source holds the resource (false before create and after a hard delete).
    pub fn exists(&self, id: &str) -> bool {
        self.lock().resources.contains_key(id)
    }

    /// Whether the resource was hard-deleted after a `Deleted=True` status.
    pub fn hard_deleted(&self, id: &str) -> bool {
        self.lock().hard_deleted.contains(id)
    }

    /// Every resource forgotten after a `Deleted` status, in order.
    pub fn hard_deletions(&self) -> Vec<HardDeletion> {
        self.lock().deletions.clone()
    }

    /// Whether the resource is soft-deleted (waiting for the agent's `Deleted`).
    pub fn is_deleting(&self, id: &str) -> bool {
        self.lock()
            .resources
            .get(id)
            .is_some_and(|r| r.deleted_at.is_some())
    }

    /// The resource's spec version.
    pub fn version(&self, id: &str) -> Option<i64> {
        Some(self.lock().resources.get(id)?.version)
    }

    /// A copy of one stored resource.
    pub fn resource(&self, id: &str) -> Option<StoredResource> {
        self.lock().resources.get(id).cloned()
    }

    /// Copies of every stored resource, in creation order.
    pub fn resources(&self) -> Vec<StoredResource> {
        rules::in_creation_order(&self.lock().resources)
    }

    /// The counters so far.
    pub fn counters(&self) -> SourceCounters {
        self.lock().counters.clone()
    }

    /// Every agent event received (decoded as a CloudEvent; lost ones not), in arrival order.
    pub fn events(&self) -> Vec<CloudEvent> {
        self.lock().events.clone()
    }

    /// Every CloudEvent the source sent (spec events, resync answers, status resync requests),
    /// in order.
    pub fn sent(&self) -> Vec<CloudEvent> {
        self.lock().sent.clone()
    }

    /// The decision on every status event, in arrival order.
    pub fn status_verdicts(&self) -> Vec<StatusVerdict> {
        self.lock().verdicts.clone()
    }

    /// Every judged status event with its arrival time, in arrival order.
    pub fn status_arrivals(&self) -> Vec<StatusArrival> {
        self.status_arrivals_from(0)
    }

    /// The status events from the `from`-th on (0-based), so a poller copies only what is new.
    pub fn status_arrivals_from(&self, from: usize) -> Vec<StatusArrival> {
        let st = self.lock();
        st.arrivals.get(from..).unwrap_or_default().to_vec()
    }

    /// Polls `cond` every [`WAIT_POLL`] until it holds; after `timeout` the error describes
    /// `wire` (the front end's state), the counters and the last status decisions.
    pub async fn wait_for(
        &self,
        cond: impl Fn() -> bool,
        timeout: Duration,
        wire: impl Fn() -> String,
    ) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if cond() {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                let wire = wire();
                let st = self.lock();
                let last: Vec<_> = st.verdicts.iter().rev().take(5).collect();
                return Err(format!(
                    "condition not met within {timeout:?}; {wire}, counters: {:?}, last status verdicts (newest first): {last:?}",
                    st.counters
                ));
            }
            tokio::time::sleep(WAIT_POLL).await;
        }
    }

    /// Polls `cond` on the source until it holds (see [`Maestro::wait_for`]).
    pub async fn wait_until(
        &self,
        cond: impl Fn(&Maestro) -> bool,
        timeout: Duration,
    ) -> Result<(), String> {
        self.wait_for(|| cond(self), timeout, String::new).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::snowflake::Snowflake;
    use serde_json::json;

    use crate::maestro::stored;

    /// A wire that keeps nothing: these tests look at what the source records.
    struct Nowhere;

    impl Wire for Nowhere {
        fn send(&self, _: &str, _: &CloudEvent) -> Result<(), Error> {
            Ok(())
        }
    }

    /// A source that holds resource `a` of consumer `c1` at version 1.
    fn holding_a(resync: ResyncAnswer) -> Maestro {
        let source = Maestro::new("maestro", resync, Arc::new(Nowhere));
        source
            .lock()
            .resources
            .insert("a".into(), stored("a", "c1", 1, 1));
        source
    }

    fn status_event(id: &str, seq: u64, status: Value) -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::StatusUpdate, "c1-work-agent")
            .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(id.into()))
            .with_ext(types::EXT_RESOURCE_VERSION, ExtValue::Integer(1))
            .with_ext(types::EXT_CLUSTER_NAME, ExtValue::String("c1".into()))
            .with_ext(
                types::EXT_ORIGINAL_SOURCE,
                ExtValue::String("maestro".into()),
            )
            .with_ext(types::EXT_STATUS_HASH, ExtValue::String("h".into()))
            .with_ext(types::EXT_SEQUENCE_ID, ExtValue::String(seq.to_string()));
        ev.data = Some(status.to_string().into_bytes());
        ev
    }

    #[test]
    fn status_events_are_kept_with_their_arrival_and_conditions() {
        let source = holding_a(ResyncAnswer::SourceClient);
        let ids = Snowflake::new();
        let cond = |ty: &str| json!({"type": ty, "status": "True"});
        let before = Instant::now();
        for status in [
            json!({"conditions": [cond("Applied")]}),
            json!({"conditions": [cond("Applied"), cond("Available")]}),
            json!({"conditions": [cond("Deleted")]}),
        ] {
            let taken = source.receive(Ok(status_event("a", ids.next_id(), status)), |_| false);
            assert!(matches!(taken, Taken::Judged(_)), "{taken:?}");
        }
        // Not a CloudEvent: counted as malformed, no arrival.
        assert_eq!(
            source.receive(Err("x".into()), |_| false),
            Taken::NotAnEvent("x".into())
        );
        let arrivals = source.status_arrivals();
        let seen: Vec<_> = arrivals
            .iter()
            .map(|a| (a.resource_id.as_str(), a.applied, a.available, a.deleted))
            .collect();
        assert_eq!(
            seen,
            [
                ("a", true, false, false),
                ("a", true, true, false),
                ("a", false, false, true)
            ]
        );
        assert!(arrivals.iter().all(|a| a.at >= before));
        assert!(arrivals.windows(2).all(|w| w[0].at <= w[1].at));
        assert_eq!(arrivals[2].outcome, StatusOutcome::Deleted);
        assert_eq!(source.counters().malformed, 1);
        assert!(source.hard_deleted("a"));
    }

    #[test]
    fn a_refused_or_lost_status_is_not_judged() {
        let source = holding_a(ResyncAnswer::GrpcBroker);
        let ids = Snowflake::new();
        let applied = json!({"conditions": [{"type": "Applied", "status": "True"}]});
        let refused = source.receive(
            Ok(status_event("a", ids.next_id(), applied.clone())),
            |id| id == "a",
        );
        assert_eq!(refused, Taken::Refused);
        source.faults(|f| f.lose_next_statuses(1));
        let lost = source.receive(
            Ok(status_event("a", ids.next_id(), applied.clone())),
            |_| false,
        );
        assert_eq!(lost, Taken::Lost);
        assert!(source.status_verdicts().is_empty());
        assert_eq!(source.events().len(), 1, "the lost event never arrived");
        let taken = source.receive(Ok(status_event("a", ids.next_id(), applied)), |_| false);
        assert_eq!(taken, Taken::Judged(StatusOutcome::Accepted));
        assert_eq!(source.counters().accepted, 1);
    }
}
