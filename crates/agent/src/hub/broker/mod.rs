//! A hub behind a message broker (Maestro over MQTT; OCM's or Maestro's gRPC server): the source
//! keeps the works and
//! sends them as CloudEvents; the agent keeps its copy in memory ([`LocalWorks`], as upstream's
//! agent does) and sends statuses back.
//!
//! - Spec events change the copy as upstream's agent store decides ([`spec`]); the controller
//!   watches the copy like a hub's works.
//! - A status write is checked against the copy's resourceVersion (409 as a hub would), then
//!   published as `status.update_request` (latest per work while the broker is away).
//! - Finalizers are local bookkeeping; when the last one goes from a work being deleted, the
//!   work's `Deleted` status is published at once and the copy forgotten.
//! - A TTL deletion marks the copy deleted: the agent cleans up as for a delete from the source
//!   and publishes `Deleted`; the source then removes the work.
//! - After every (re)subscribe the agent asks for a spec resync with the versions it holds, as
//!   many as the broker's ceiling has room for ([`listing`]); a status resync request is
//!   answered with the statuses the source lacks.
//! - A deletion the source sends for a work held here is written to the spoke before its cleanup
//!   begins, and read back at start: a late copy of the work stays deleted across restarts
//!   ([`kept`]).
//! - Works the source's answer did not confirm, and works it sends again after the agent deleted
//!   them, are counted and asked about ([`desync`]).
//! - Hub Events have no equivalent in the protocol: they are logged.

pub mod answer;
pub mod deletions;
pub mod desync;
pub mod kept;
pub mod kept_store;
pub mod listing;
pub mod metrics;
pub mod spec;
pub mod status;
pub mod status_answers;
pub mod told;
pub mod tombstone;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Instant;

use cloudevents::EventType;
use cloudevents::client::{CeilingStats, Client, ClientOptions, Publisher, Stats};
use cloudevents::codec::{self, Incoming, ResourceStatusHashList, SpecUpdate};
use cloudevents::queue::event_key;
use cloudevents::snowflake::Snowflake;
use cloudevents::transport::Transport;
use futures::future::BoxFuture;
use kube::runtime::events::Event;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::mpsc;
use work_api::{ManifestWork, ManifestWorkStatus};

use super::hearing::{DeletionsHeard, GoneWork, SourceHearing};
use super::local_works::{LocalWorks, api_error};
use super::seam::{Hub, HubResult, WorkEvents};
use deletions::Deletions;
use kept_store::DeletionStore;
use spec::SpecChange;
use tombstone::Tombstone;

/// At most this many events are taken from the client at once: the deletions among them are
/// kept on the spoke in one write ([`kept`]).
const RECEIVE_BATCH: usize = 256;

/// A status is queued for the source only once fewer than this many events wait to be sent: a
/// status for every work at once (after a restart, every work reconciled) then waits for the wire
/// instead of holding every event in memory (about 3 KiB each at 100,000 works).
const STATUS_ROOM: usize = 1_000;

/// The longest a status waits for room: a healthy wire sends [`STATUS_ROOM`] events in well under
/// a second, so a longer wait means the wire stalled.
const STATUS_ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

struct Inner {
    cluster: String,
    client_id: String,
    works: LocalWorks,
    /// Each deleted work's state, one record per UID: its tombstone, whether this agent deleted
    /// it itself, its `Deleted` told and not heard yet ([`deletions`]).
    deletions: Mutex<Deletions>,
    sequence: Snowflake,
    /// The client's publishing half, once it is started.
    outbox: OnceLock<Publisher>,
    status_resync: Histogram,
    /// `manifestworks_processed_total`, as sdk-go's agent client counts its store's answers.
    processed: metrics::Processed,
    /// Keeps the client's tasks running as long as the hub lives.
    client: Mutex<Option<Client>>,
    /// Whether the source's answer to the latest spec resync request is in, and what was asked
    /// again since the latest subscribe.
    resync_answer: Mutex<answer::ResyncAnswer>,
    /// Works the source did not confirm, and the answer awaited about them.
    desync: Mutex<desync::Desync>,
    /// Where deletions are kept across restarts ([`kept`]); none in tests.
    store: OnceLock<Arc<dyn DeletionStore>>,
    /// The deletions kept there, as last read or written.
    kept: tokio::sync::Mutex<kept::Kept>,
    /// The works a status resync request asked for, sent as the wire takes them.
    status_answers: Mutex<status_answers::StatusAnswers>,
    /// Wakes the task that sends them.
    answers_asked: tokio::sync::Notify,
}

/// Why a spec resync request is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Request {
    /// After a (re)subscribe.
    Subscribe,
    /// Records name works the last answer did not bring.
    Again,
    /// Deletions the agent made wait for the source to show it heard them ([`told`]).
    Confirm,
    /// Works the source's last answer did not confirm ([`desync`]).
    Desync,
}

impl Request {
    /// What the log says of it.
    fn describe(self) -> &'static str {
        match self {
            Self::Subscribe => "subscribed; spec resync requested",
            Self::Again => "spec resync requested again",
            Self::Confirm => "spec resync requested to confirm deletions",
            Self::Desync => "spec resync requested to ask about works the source did not confirm",
        }
    }
}

/// The works of one cluster, from a source behind a broker.
#[derive(Clone)]
pub struct BrokerHub {
    inner: Arc<Inner>,
}

/// Room kept for the wire's length fields, which grow with the payload (MQTT's remaining
/// length, protobuf's varints).
const LENGTH_FIELDS_ROOM: usize = 16;

/// Bytes of list entries a spec resync request has room for on the wire now.
fn listing_room(outbox: &Publisher, cluster: &str, client_id: &str) -> usize {
    let Ok(empty) = codec::encode_spec_resync_request(Vec::new(), cluster, client_id) else {
        return usize::MAX;
    };
    outbox
        .ceiling()
        .saturating_sub(outbox.wire_size(&empty) + LENGTH_FIELDS_ROOM)
}

/// Seconds since the epoch, now.
fn now_seconds() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

/// 503 with `message`: the status could not be handed to the transport; the agent retries.
fn unavailable(message: String) -> kube::Error {
    api_error(503, "ServiceUnavailable", message)
}

impl BrokerHub {
    /// A hub for `cluster` with no transport yet; `client_id` is the source of the agent's
    /// events (`--cloudevents-client-id`).
    pub fn new(cluster: &str, client_id: &str) -> Self {
        Self {
            inner: Arc::new(Inner {
                cluster: cluster.to_string(),
                client_id: client_id.to_string(),
                works: LocalWorks::default(),
                deletions: Mutex::default(),
                sequence: Snowflake::new(),
                outbox: OnceLock::new(),
                status_resync: metrics::status_resync_histogram(),
                processed: metrics::Processed::default(),
                client: Mutex::new(None),
                resync_answer: Mutex::default(),
                desync: Mutex::default(),
                store: OnceLock::new(),
                kept: tokio::sync::Mutex::default(),
                status_answers: Mutex::default(),
                answers_asked: tokio::sync::Notify::new(),
            }),
        }
    }

    /// Starts a client on `transport` (MQTT, gRPC, Pub/Sub) with `options` and takes its
    /// events; deletions are kept across restarts in `store`.
    pub fn start<C, T: Transport>(
        transport: T,
        options: &ClientOptions<C>,
        store: Arc<dyn DeletionStore>,
    ) -> Self {
        let hub = Self::new(&options.cluster, &options.cloudevents_client_id);
        let _ = hub.inner.store.set(store);
        let resync = hub.clone();
        let hook = Arc::new(move |publisher: &Publisher| {
            resync.request_spec_resync(publisher, Request::Subscribe)
        });
        let mut client = Client::start(transport, options, hook);
        let incoming = std::mem::replace(&mut client.incoming, mpsc::channel(1).1);
        hub.attach(client.publisher.clone(), incoming);
        *hub.inner
            .client
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(client);
        hub
    }

    /// Connects `publisher` and starts applying the events of `incoming`.
    pub fn attach(
        &self,
        publisher: Publisher,
        incoming: mpsc::Receiver<Result<Incoming, cloudevents::Error>>,
    ) {
        let _ = self.inner.outbox.set(publisher);
        tokio::spawn(self.clone().receive(incoming));
        tokio::spawn(self.clone().send_status_answers());
    }

    /// Counts one answer of the works' copy in `manifestworks_processed_total`.
    fn processed<T>(&self, action: &'static str, result: &Result<T, kube::Error>) {
        self.inner
            .processed
            .get_or_create(&metrics::ProcessedLabels {
                action,
                code: metrics::processed_code(result),
            })
            .inc();
    }

    /// The works as the agent holds them now.
    pub fn works(&self) -> Vec<ManifestWork> {
        self.inner.works.lock().decoded()
    }

    fn outbox(&self) -> Result<&Publisher, kube::Error> {
        self.inner
            .outbox
            .get()
            .ok_or_else(|| unavailable("the broker connection is not started".into()))
    }

    /// Publishes the status of `work` as an event of `ty`; returns the event's queue key.
    fn publish_status(&self, work: &ManifestWork, ty: EventType) -> Result<String, kube::Error> {
        let name = work.metadata.name.clone().unwrap_or_default();
        let event = status::status_event(
            work,
            ty,
            &self.inner.client_id,
            self.inner.sequence.next_id(),
        )
        .map_err(|e| unavailable(format!("the status of {name} cannot be encoded: {e}")))?;
        let key = event_key(&event);
        self.outbox()?.publish(event).map_err(|e| match e {
            // As an API server refuses an object over its limit: the status writer reduces the
            // status and writes again.
            cloudevents::Error::EventTooLarge { .. } => api_error(
                413,
                "RequestEntityTooLarge",
                format!("the status of {name} does not fit the broker: {e}"),
            ),
            e => unavailable(format!("the status of {name} cannot be queued: {e}")),
        })?;
        Ok(key)
    }

    /// Tells the source that `work` is gone from the cluster; with `confirm`, the deletion counts
    /// as heard only once the source shows it no longer has the work ([`told`]).
    fn publish_deleted(&self, work: &ManifestWork, confirm: bool) -> Result<(), kube::Error> {
        if let Some(uid) = work.metadata.uid.as_deref() {
            self.desync().forget(uid);
            self.deletions().remember(uid, Tombstone::of(work));
        }
        let deleted = status::with_deleted_condition(work.clone());
        let key = self.publish_status(&deleted, EventType::StatusUpdate)?;
        if let Some(name) = work.metadata.name.as_deref() {
            self.deletions().told(
                name,
                work.metadata.uid.as_deref().unwrap_or_default(),
                key,
                confirm,
            );
        }
        tracing::info!(
            work = %work.metadata.name.clone().unwrap_or_default(),
            "cleanup done; Deleted sent to the source"
        );
        Ok(())
    }

    /// Whether `gone`, whose cleanup is done, is a work this agent deleted itself.
    fn deleted_here(&self, gone: &ManifestWork) -> bool {
        let uid = gone.metadata.uid.as_deref().unwrap_or_default();
        self.deletions().take_deleted_here(uid)
    }

    /// The deleted works' records ([`deletions`]).
    fn deletions(&self) -> MutexGuard<'_, Deletions> {
        self.inner
            .deletions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn desync(&self) -> MutexGuard<'_, desync::Desync> {
        self.inner
            .desync
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends a spec resync request: at version 0 the works whose deletion it asks the source to
    /// confirm ([`told`]), the works the source did not confirm ([`desync`]), and the versions
    /// it holds, as many as the broker's ceiling has room for ([`listing`]).
    fn request_spec_resync(&self, outbox: &Publisher, request: Request) {
        self.deletions().clear_unversioned();
        let unconfirmed: HashSet<String> = self.desync().unconfirmed().map(String::from).collect();
        let (asked_again, rest) = {
            let locked = self.inner.works.lock();
            locked
                .works()
                .values()
                .filter_map(|w| {
                    Some(listing::Candidate {
                        version: status::resource_version(w.metadata.as_ref())?,
                        weight: w.packed_len(),
                    })
                })
                .partition::<Vec<_>, _>(|c| unconfirmed.contains(&c.version.resource_id))
        };
        let count = asked_again.len() + rest.len();
        let confirming = self.deletions().ask();
        let asked = confirming.len();
        let mut room = listing_room(outbox, &self.inner.cluster, &self.inner.client_id);
        // The room is computed from an empty request; the wire's length fields and the time
        // attribute may still make the request a few bytes larger: measured, and listed again in
        // less room when it does not fit.
        let mut attempt = 0;
        let (listing, event) = loop {
            let listing = listing::list(&confirming, &asked_again, &rest, room, || {
                uuid::Uuid::new_v4().to_string()
            });
            let event = codec::encode_spec_resync_request(
                listing.versions.clone(),
                &self.inner.cluster,
                &self.inner.client_id,
            );
            let over = event.as_ref().map_or(0, |ev| {
                outbox.wire_size(ev).saturating_sub(outbox.ceiling())
            });
            attempt += 1;
            if over == 0 || attempt == 3 {
                break (listing, event);
            }
            room = room.saturating_sub(over + LENGTH_FIELDS_ROOM);
        };
        let now = Instant::now();
        self.inner
            .resync_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .requested(now, request != Request::Subscribe);
        self.desync()
            .requested(&listing, request == Request::Desync, now);
        let listed = listing.versions.len() - usize::from(listing.marker.is_some());
        match event.and_then(|ev| outbox.publish(ev)) {
            Ok(()) if listing.marker.is_some() => tracing::info!(
                works = count,
                listed,
                left_out = listing.left_out.len(),
                deletions_to_confirm = asked,
                confirmations_left_out = listing.confirmations_left_out,
                room_bytes = room,
                "{}; the broker's ceiling leaves works out (the source sends them back)",
                request.describe()
            ),
            Ok(()) => tracing::info!(
                works = count,
                deletions_to_confirm = asked,
                "{}",
                request.describe()
            ),
            Err(e) => tracing::error!(error = %e, "the spec resync request could not be sent"),
        }
    }

    /// The end marker of a request's answer came back ([`listing`]): the answer is in, and
    /// settled once the source has been quiet for a moment ([`desync::SETTLE_QUIET`]).
    fn marker_back(&self) {
        self.inner
            .resync_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .complete();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.settle_answer(true);
            return;
        };
        let hub = self.clone();
        // One task per answer, ended by the settling or by the longest wait.
        runtime.spawn(async move {
            let deadline = Instant::now() + answer::LONGEST_WAIT;
            loop {
                tokio::time::sleep(desync::SETTLE_QUIET).await;
                if hub.settle_answer(Instant::now() >= deadline) {
                    return;
                }
            }
        });
    }

    /// Settles the answer whose marker came back, when the source has been quiet (at once with
    /// `now`): the works it left out that did not come back are unconfirmed, and asked about.
    /// True when nothing is left to settle.
    fn settle_answer(&self, now: bool) -> bool {
        let at = if now {
            Instant::now() + desync::SETTLE_QUIET
        } else {
            Instant::now()
        };
        let settled = {
            let locked = self.inner.works.lock();
            let held = |uid: &str| locked.name_of_uid(uid).is_some();
            let mut desync = self.desync();
            if !desync.settling() {
                return true;
            }
            match desync.settle(held, at) {
                Some(settled) => settled,
                None => return false,
            }
        };
        for uid in &settled.confirmed {
            tracing::info!(uid = %uid, "desync healed: the source confirmed a work it had not sent back");
        }
        for uid in &settled.unconfirmed {
            tracing::warn!(uid = %uid, "desync: the source's answer did not confirm a work held here; asking the source about it");
        }
        tracing::debug!(
            unconfirmed = settled.unconfirmed.len(),
            confirmed = settled.confirmed.len(),
            "the source's answer to the spec resync request is settled"
        );
        self.ask_about_unconfirmed();
        true
    }

    /// Sends a request about the unconfirmed works when one is due.
    fn ask_about_unconfirmed(&self) {
        let Some(outbox) = self.inner.outbox.get() else {
            return;
        };
        if self.desync().should_ask(Instant::now()) {
            self.request_spec_resync(outbox, Request::Desync);
        }
    }

    async fn receive(self, mut incoming: mpsc::Receiver<Result<Incoming, cloudevents::Error>>) {
        self.read_kept_deletions().await;
        let mut batch = Vec::with_capacity(RECEIVE_BATCH);
        while incoming.recv_many(&mut batch, RECEIVE_BATCH).await > 0 {
            self.keep_deletions_begun(&batch).await;
            for item in batch.drain(..) {
                match item {
                    Ok(Incoming::Spec(update)) => self.apply_spec(&update),
                    Ok(Incoming::StatusResync(request)) => self.answer_status_resync(&request),
                    Err(cloudevents::Error::WrongCluster { got, .. }) => {
                        tracing::debug!(cluster = %got, "event for another cluster ignored");
                    }
                    Err(e) => tracing::warn!(error = %e, "event from the source refused"),
                }
            }
        }
    }

    /// Remembers the deletions kept by an earlier process ([`kept`]), before any event is taken.
    async fn read_kept_deletions(&self) {
        let Some(store) = self.inner.store.get() else {
            return;
        };
        let data = match store.read().await {
            Ok(data) => data,
            Err(e) => {
                tracing::warn!(error = %e, "the deletions kept before this start cannot be read; a late copy of a work deleted before it may be applied again");
                return;
            }
        };
        let (kept, remember) = kept::Kept::read(&data, now_seconds());
        {
            let mut deletions = self.deletions();
            for (uid, tombstone) in remember {
                deletions.remember(&uid, tombstone);
            }
        }
        tracing::info!(
            deletions = kept.len(),
            "deletions kept before this start remembered"
        );
        *self.inner.kept.lock().await = kept;
    }

    /// Keeps on the spoke the deletions `batch` begins (deletions of works held here and not
    /// being deleted yet), before any of them is taken: one write for the batch.
    async fn keep_deletions_begun(&self, batch: &[Result<Incoming, cloudevents::Error>]) {
        let Some(store) = self.inner.store.get() else {
            return;
        };
        let begun: Vec<(String, Tombstone)> = {
            let locked = self.inner.works.lock();
            batch
                .iter()
                .filter_map(|item| {
                    let Ok(Incoming::Spec(update)) = item else {
                        return None;
                    };
                    update.deletion_timestamp?;
                    let created = update.creation_timestamp?.timestamp();
                    let name = locked.name_of_uid(&update.uid)?;
                    let held = locked.works().get(&name)?;
                    if held.metadata.deletion_timestamp.is_some() {
                        return None;
                    }
                    Some((
                        update.uid.clone(),
                        Tombstone {
                            generation: held
                                .metadata
                                .generation
                                .unwrap_or(0)
                                .max(update.generation),
                            created: Some(created),
                            source: codec::original_source(held.metadata.labels.as_ref()),
                            name,
                        },
                    ))
                })
                .collect()
        };
        if begun.is_empty() {
            return;
        }
        let mut kept = self.inner.kept.lock().await;
        let Some(plan) = kept.plan(&begun, now_seconds()) else {
            return;
        };
        match store.write(&plan.patch).await {
            Ok(()) => *kept = plan.after,
            Err(e) => tracing::warn!(
                error = %e,
                deletions = begun.len(),
                "deletions not kept on the spoke; after a restart a late copy of these works may be applied again"
            ),
        }
    }

    /// Applies one spec event to the agent's copy.
    pub fn apply_spec(&self, update: &SpecUpdate) {
        self.inner
            .resync_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .event(Instant::now());
        let is_marker = {
            let mut desync = self.desync();
            desync.heard(
                &update.uid,
                update.deletion_timestamp.is_some(),
                Instant::now(),
            );
            desync.marker_back(&update.uid)
        };
        if is_marker {
            self.marker_back();
            return;
        }
        let mut locked = self.inner.works.lock();
        // Found by UID without a search: a work named by its UID (as Maestro names them) by that
        // name, any other through the copy's index.
        let existing_name = locked.name_of_uid(&update.uid);
        let existing = existing_name.and_then(|name| locked.get(&name));
        if existing.is_none() {
            let mut deletions = self.deletions();
            if update.deletion_timestamp.is_some()
                && update.spec.is_none()
                && deletions.confirm(&update.uid)
            {
                // The answer to a request that listed a work this agent deleted and cleaned up:
                // the source does not hold it, so its deletion is heard (nothing here to clean
                // up).
                tracing::debug!(uid = %update.uid, "the source confirmed it heard a deletion");
                return;
            }
            if deletions.is_late(update) {
                drop(deletions);
                self.desync().resent_after_deletion();
                tracing::info!(work = %update.name, uid = %update.uid, generation = update.generation, "desync: the source sent again a work deleted here; ignored");
                return;
            }
            // The work is back (created again, or news from the source): not deleted any more.
            deletions.forget(&update.uid);
        }
        match spec::apply_spec(existing.as_ref(), update) {
            SpecChange::Put(work) => {
                locked.commit(work);
            }
            SpecChange::Rename { old_name, work } => {
                locked.remove(&old_name);
                locked.commit(work);
            }
            SpecChange::Ignore(why) => {
                tracing::debug!(work = %update.name, generation = update.generation, why, "spec event changes nothing");
            }
        }
    }

    /// Waits until the client has room for another status ([`STATUS_ROOM`]), or
    /// [`STATUS_ROOM_WAIT`] has passed: a wire that takes nothing while its connection stays up
    /// costs memory then, as an outage does, rather than holding the workers that apply.
    async fn wait_for_status_room(&self) {
        if let Some(outbox) = self.inner.outbox.get() {
            let _ = tokio::time::timeout(STATUS_ROOM_WAIT, outbox.room(STATUS_ROOM)).await;
        }
    }

    fn answers(&self) -> MutexGuard<'_, status_answers::StatusAnswers> {
        self.inner
            .status_answers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends the statuses status resync requests asked for, one at a time as the wire has room,
    /// each read from the works when it goes (the latest, and nothing held per work meanwhile).
    async fn send_status_answers(self) {
        loop {
            let asked = self.inner.answers_asked.notified();
            tokio::pin!(asked);
            // Registered before looking, so a request queued in between is not missed.
            asked.as_mut().enable();
            let Some(name) = self.answers().take_next() else {
                asked.await;
                continue;
            };
            self.wait_for_status_room().await;
            let work = self.inner.works.lock().get(&name);
            if let Some(work) = work
                && let Err(e) = self.publish_status(&work, EventType::StatusResyncResponse)
            {
                tracing::warn!(work = %name, error = %e, "status resync answer not sent");
            }
            self.answers().done();
        }
    }

    /// Answers a status resync request with the statuses the source lacks: the works it lacks
    /// are queued for [`BrokerHub::send_status_answers`], a `Deleted` said again at once.
    pub fn answer_status_resync(&self, request: &ResourceStatusHashList) {
        let started = Instant::now();
        let listed = status::ListedHashes::of(request);
        // Picked by UID from the kept metadata, then decoded one at a time: decoding every work
        // at once for each part of a long list held all of them twice.
        let asked: Vec<String> = self
            .inner
            .works
            .lock()
            .works()
            .iter()
            .filter(|(_, w)| listed.asks_for(w.metadata.uid.as_deref().unwrap_or_default()))
            .map(|(name, _)| name.clone())
            .collect();
        let mut count = 0;
        for name in asked {
            let Some(work) = self.inner.works.lock().get(&name) else {
                continue;
            };
            if !listed.lacks(&work) {
                continue;
            }
            count += 1;
            self.answers().ask(name);
        }
        if count > 0 {
            self.inner.answers_asked.notify_one();
        }
        // A work the source still lists but the agent deleted: its `Deleted` was lost on the way
        // (the source restarted after the broker took it), and without it the source keeps the
        // work for ever. Said again.
        let gone = self
            .deletions()
            .deleted_works(listed.named(), &self.inner.cluster);
        for work in gone {
            count += 1;
            tracing::info!(
                work = work.metadata.name.as_deref().unwrap_or_default(),
                "the source lists a work deleted here; Deleted sent again"
            );
            if let Err(e) = self.publish_status(&work, EventType::StatusResyncResponse) {
                tracing::warn!(error = %e, "status resync answer not sent");
            }
        }
        self.inner
            .status_resync
            .observe(started.elapsed().as_secs_f64());
        tracing::info!(works = count, "status resync answered");
    }
}

impl Hub for BrokerHub {
    fn watch_works(&self) -> WorkEvents {
        // A watch starts with the full list, as an informer's list and watch.
        self.processed("list", &Ok::<(), kube::Error>(()));
        self.processed("watch", &Ok::<(), kube::Error>(()));
        self.inner.works.watch()
    }

    /// None: the local copy takes the agent's own writes at once, so there is no echo to wait
    /// for, and the pause would be added to every spec event's turnaround (publish to first
    /// status), which is what a source's users see.
    fn reconcile_debounce(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }

    /// Some: a source hears the agent's writes only when it takes their events.
    fn source_hearing(&self) -> Option<&dyn SourceHearing> {
        Some(self)
    }

    fn get_work<'a>(&'a self, name: &'a str) -> HubResult<'a, Option<ManifestWork>> {
        let work = self.inner.works.get(name);
        // sdk-go's client answers a missing work with NotFound.
        let answer = work
            .as_ref()
            .map(|_| ())
            .ok_or_else(|| super::local_works::not_found(name));
        self.processed("get", &answer);
        Box::pin(async move { Ok(work) })
    }

    fn write_status<'a>(
        &'a self,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a ManifestWorkStatus,
    ) -> HubResult<'a, ManifestWork> {
        Box::pin(async move {
            self.wait_for_status_room().await;
            let result = self
                .inner
                .works
                .write_status(name, resource_version, status, |work| {
                    self.publish_status(work, EventType::StatusUpdate).map(drop)
                });
            self.processed("patch", &result);
            result
        })
    }

    fn set_finalizers<'a>(
        &'a self,
        work: &'a ManifestWork,
        finalizers: Vec<String>,
    ) -> HubResult<'a, ManifestWork> {
        let result = self
            .inner
            .works
            .set_finalizers(work, finalizers, |gone| {
                self.publish_deleted(gone, self.deleted_here(gone))
            })
            .map(|written| written.work);
        self.processed("patch", &result);
        Box::pin(async move { result })
    }

    fn delete_work<'a>(&'a self, name: &'a str, uid: &'a str) -> HubResult<'a, ()> {
        let result = self.inner.works.check_uid(name, uid).and_then(|()| {
            self.deletions().deleting_here(uid);
            self.inner
                .works
                .delete(name, |gone| {
                    self.publish_deleted(gone, self.deleted_here(gone))
                })
                .map(|_| ())
        });
        self.processed("delete", &result);
        Box::pin(async move { result })
    }

    fn record_event<'a>(&'a self, work: &'a ManifestWork, event: Event) -> HubResult<'a, ()> {
        // The protocol has no Events; the log keeps what a hub would have recorded.
        tracing::info!(
            work = %work.metadata.name.clone().unwrap_or_default(),
            reason = %event.reason,
            note = %event.note.unwrap_or_default(),
            "event (not sent: the broker protocol has no Events)"
        );
        Box::pin(async { Ok(()) })
    }

    fn reachable(&self) -> BoxFuture<'_, bool> {
        let ready = self.watch_is_healthy();
        Box::pin(async move { ready })
    }

    fn credentials_refused(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }

    fn watch_is_healthy(&self) -> bool {
        self.inner.outbox.get().is_some_and(|o| o.stats().ready)
    }

    fn register_metrics(&self, registry: &mut Registry) {
        let hub = self.clone();
        let stats: metrics::StatsSource = Arc::new(move || match hub.inner.outbox.get() {
            Some(o) => (o.stats(), o.ceiling_stats()),
            None => (
                Stats::default(),
                CeilingStats {
                    max_event_bytes: usize::MAX,
                    origin: cloudevents::ceiling::CeilingOrigin::Unlimited,
                    too_large: 0,
                },
            ),
        });
        metrics::register(
            registry,
            stats,
            &self.inner.client_id,
            self.inner.status_resync.clone(),
            self.inner.processed.clone(),
            {
                let hub = self.clone();
                Arc::new(move || {
                    let desync = hub.desync();
                    (desync.counts(), desync.unconfirmed_now())
                })
            },
        );
    }
}

impl SourceHearing for BrokerHub {
    fn works_listed(&self) -> bool {
        self.inner
            .resync_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_in(Instant::now())
    }

    fn ask_again_for_missing_works(&self, missing: usize) -> bool {
        let Some(outbox) = self.inner.outbox.get() else {
            return false;
        };
        let ask = self
            .inner
            .resync_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .ask_again(missing);
        if !ask {
            return false;
        }
        tracing::info!(
            missing,
            "AppliedManifestWorks name works the source's answer did not bring (lost on the way?); asking again before eviction marks them"
        );
        self.request_spec_resync(outbox, Request::Again);
        true
    }

    /// The source has heard a deletion once the transport no longer holds its `Deleted`, and,
    /// for a work the agent deleted itself, once it answered a request listing the work with a
    /// deletion ([`told`]). Asks for that answer when one is due.
    fn deletions_heard(&self) -> DeletionsHeard {
        let Some(outbox) = self.inner.outbox.get() else {
            return DeletionsHeard::default();
        };
        let now = Instant::now();
        let answer_in = self
            .inner
            .resync_answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_in(now);
        let (heard, unheard, ask) = {
            let mut deletions = self.deletions();
            deletions.refresh(|key| outbox.is_pending(key), now);
            if answer_in {
                deletions.answer_in(now);
            }
            let ask = answer_in && deletions.should_ask(now);
            (deletions.take_heard(), deletions.unheard(), ask)
        };
        if ask {
            self.request_spec_resync(outbox, Request::Confirm);
        } else if answer_in {
            self.ask_about_unconfirmed();
        }
        DeletionsHeard { heard, unheard }
    }

    /// Sends `Deleted` again, unless this process is telling it already. The source must show
    /// it heard it: the work may be one whose TTL ran out.
    fn retell_deletion(&self, work: GoneWork<'_>) -> Result<(), kube::Error> {
        let telling = self.deletions().is_telling(work.name);
        if telling {
            return Ok(());
        }
        tracing::info!(
            work = work.name,
            "a deletion maybe not heard by the source: told again"
        );
        self.publish_deleted(&status::gone_work(work, &self.inner.cluster), true)
    }

    fn events_taken(&self) -> BoxFuture<'_, ()> {
        match self.inner.outbox.get() {
            Some(outbox) => Box::pin(outbox.taken()),
            None => Box::pin(std::future::pending()),
        }
    }

    /// The source has taken a work's status once neither the status resync answers nor the
    /// transport hold it (statuses queue under the work's UID).
    fn status_heard(&self, name: &str) -> bool {
        // A status resync answer not handed to the client yet: the source lacks the status.
        if self.answers().waits(name) {
            return false;
        }
        let uid = self
            .inner
            .works
            .lock()
            .works()
            .get(name)
            .and_then(|w| w.metadata.uid.clone());
        let (Some(outbox), Some(uid)) = (self.inner.outbox.get(), uid) else {
            return true;
        };
        !outbox.is_pending(&uid)
    }

    /// The broker's ceiling less the envelope of the work's status event (its attributes, the
    /// work's metadata among them).
    fn status_room(&self, work: &ManifestWork) -> Option<usize> {
        let outbox = self.inner.outbox.get()?;
        let ceiling = outbox.ceiling();
        if ceiling == usize::MAX {
            return None;
        }
        // The event's attributes come from the metadata alone (the manifests stay out of it),
        // and the widest sequence id stands for the one the write will take.
        let bare = ManifestWork {
            metadata: work.metadata.clone(),
            spec: Default::default(),
            status: None,
        };
        let envelope = status::status_event(
            &bare,
            EventType::StatusUpdate,
            &self.inner.client_id,
            u64::MAX,
        )
        .map(|event| outbox.wire_size(&event))
        .ok()?;
        Some(ceiling.saturating_sub(envelope + LENGTH_FIELDS_ROOM))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::CloudEvent;
    use cloudevents::codec::ResourceStatusHash;
    use cloudevents::transport::{EventSender, Received, Sent};
    use cloudevents::types;
    use futures::StreamExt;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube::runtime::watcher;
    use std::collections::BTreeMap;
    use work_api::MANIFEST_WORK_FINALIZER;

    /// A source that takes what it is sent and keeps it; while it holds, what it is sent stays
    /// on its way (pending) until [`Source::hear`]. It never says it subscribed, so the hub
    /// sends no spec resync request of its own.
    #[derive(Default)]
    struct Recorder {
        events: Mutex<Vec<CloudEvent>>,
        /// Sends that reached the source, taken or held.
        arrived: std::sync::atomic::AtomicUsize,
        hold: std::sync::atomic::AtomicBool,
        heard: tokio::sync::Notify,
        /// The wire's ceiling in bytes; 0: none.
        ceiling: usize,
    }

    /// The recorder as a transport (and its own sender).
    #[derive(Clone, Default)]
    struct Recording(Arc<Recorder>);

    impl EventSender for Recording {
        async fn send(&self, event: CloudEvent) -> Sent {
            let heard = self.0.heard.notified();
            self.0
                .arrived
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if self.0.hold.load(std::sync::atomic::Ordering::SeqCst) {
                heard.await;
            }
            self.0
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(event);
            Sent::Taken
        }
    }

    impl Transport for Recording {
        type Sender = Recording;

        fn name(&self) -> &'static str {
            "recording"
        }

        fn max_inflight(&self) -> usize {
            8
        }

        fn ceiling(&self) -> Arc<cloudevents::ceiling::Ceiling> {
            match self.0.ceiling {
                0 => Arc::new(cloudevents::ceiling::Ceiling::unlimited()),
                limit => Arc::new(cloudevents::ceiling::Ceiling::new(
                    "recording",
                    limit,
                    cloudevents::ceiling::CeilingOrigin::Config("test"),
                    |event: &CloudEvent| {
                        RECORDING_ENVELOPE + event.data.as_ref().map_or(0, Vec::len)
                    },
                )),
            }
        }

        async fn connect(&mut self) -> Result<Recording, String> {
            Ok(self.clone())
        }

        async fn next(&mut self) -> Result<Received, String> {
            std::future::pending().await
        }

        async fn close(&mut self) {}
    }

    /// The test's side: what the agent sent, and the source's hearing.
    struct Source {
        recorder: Arc<Recorder>,
        publisher: Publisher,
    }

    impl Source {
        /// Holds what is sent from now on, until [`Source::hear`].
        fn hold(&self) {
            self.recorder
                .hold
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }

        /// The source hears everything sent so far (and from now on).
        async fn hear(&self) {
            self.recorder
                .hold
                .store(false, std::sync::atomic::Ordering::SeqCst);
            self.recorder.heard.notify_waiters();
            self.drained().await;
        }

        /// Waits until `n` sends in all reached the source.
        async fn arrived(&self, n: usize) {
            tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while self
                    .recorder
                    .arrived
                    .load(std::sync::atomic::Ordering::SeqCst)
                    < n
                {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the client sends what it holds");
        }

        /// Waits until the 8 sends in flight reached the held source and [`STATUS_ROOM`] more
        /// events wait, then checks the producer, given the chance to run on, queued no more.
        async fn holds_in_flight_and_the_room(&self) {
            self.arrived(8).await;
            tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while self.publisher.stats().queue_depth < 8 + STATUS_ROOM {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the producer fills the room it has");
            // Nothing wakes a producer that waits for room while the wire holds.
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
            assert_eq!(self.publisher.stats().queue_depth, 8 + STATUS_ROOM);
        }

        /// Waits until the client holds nothing more.
        async fn drained(&self) {
            tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while self.publisher.stats().queue_depth > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the client sends what it holds");
        }

        /// What the source took since the last look, once the client holds nothing more.
        async fn taken(&self) -> Vec<CloudEvent> {
            self.drained().await;
            std::mem::take(
                &mut *self
                    .recorder
                    .events
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            )
        }
    }

    /// The source's `create_request` of work `uid` (named by it, as Maestro names works) at
    /// `generation`; the broker's other tests build their events from it too.
    pub(super) fn create(uid: &str, generation: i64) -> SpecUpdate {
        SpecUpdate {
            event_type: EventType::SpecCreate,
            uid: uid.into(),
            name: uid.into(),
            namespace: "cluster1".into(),
            generation,
            source: "maestro".into(),
            labels: [(
                codec::LABEL_ORIGINAL_SOURCE.to_string(),
                "maestro".to_string(),
            )]
            .into(),
            annotations: Default::default(),
            deletion_timestamp: None,
            creation_timestamp: None,
            spec: Some(Default::default()),
        }
    }

    fn hub() -> (
        BrokerHub,
        Source,
        mpsc::Sender<Result<Incoming, cloudevents::Error>>,
    ) {
        hub_with(100)
    }

    /// A hub on a recording client whose queue holds `capacity` works' events.
    fn hub_with(
        capacity: usize,
    ) -> (
        BrokerHub,
        Source,
        mpsc::Sender<Result<Incoming, cloudevents::Error>>,
    ) {
        hub_on(Recording::default(), capacity)
    }

    /// What the recording wire counts besides an event's data.
    const RECORDING_ENVELOPE: usize = 200;

    /// A hub on a recording client whose wire takes events of `ceiling` bytes at most.
    fn hub_with_ceiling(
        ceiling: usize,
    ) -> (
        BrokerHub,
        Source,
        mpsc::Sender<Result<Incoming, cloudevents::Error>>,
    ) {
        let recorder = Recorder {
            ceiling,
            ..Recorder::default()
        };
        hub_on(Recording(Arc::new(recorder)), 100)
    }

    fn hub_on(
        recording: Recording,
        capacity: usize,
    ) -> (
        BrokerHub,
        Source,
        mpsc::Sender<Result<Incoming, cloudevents::Error>>,
    ) {
        let hub = BrokerHub::new("cluster1", "cluster1-work-agent");
        let mut options = ClientOptions::new((), "cluster1", "cluster1-work-agent");
        options.queue_capacity = capacity;
        let client = Client::start(recording.clone(), &options, Arc::new(|_: &Publisher| {}));
        let (tx, rx) = mpsc::channel(8);
        hub.attach(client.publisher.clone(), rx);
        let source = Source {
            recorder: recording.0,
            publisher: client.publisher.clone(),
        };
        *hub.inner
            .client
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(client);
        (hub, source, tx)
    }

    /// A status with `Applied=True`.
    fn applied_status() -> ManifestWorkStatus {
        ManifestWorkStatus {
            conditions: vec![Condition {
                type_: "Applied".into(),
                status: "True".into(),
                reason: "AppliedManifestWorkComplete".into(),
                message: String::new(),
                last_transition_time: Time(Timestamp::now()),
                observed_generation: Some(1),
            }],
            ..Default::default()
        }
    }

    fn conditions(ev: &CloudEvent) -> Vec<(String, String)> {
        let status: serde_json::Value =
            serde_json::from_slice(ev.data.as_deref().unwrap_or_default()).expect("json");
        status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["type"].as_str().unwrap_or_default().to_string(),
                    c["status"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    #[tokio::test]
    async fn spec_events_reach_the_watch_and_statuses_go_out() {
        let (hub, outbox, tx) = hub();
        let mut watch = hub.watch_works();
        assert!(matches!(watch.next().await, Some(Ok(watcher::Event::Init))));
        assert!(matches!(
            watch.next().await,
            Some(Ok(watcher::Event::InitDone))
        ));
        tx.send(Ok(Incoming::Spec(Box::new(create("u1", 1)))))
            .await
            .expect("send");
        let Some(Ok(watcher::Event::Apply(seen))) = watch.next().await else {
            panic!("the new work is watched");
        };
        assert_eq!(seen.metadata.uid.as_deref(), Some("u1"));

        let work = hub.get_work("u1").await.expect("read").expect("stored");
        let rv = work.metadata.resource_version.clone();
        let status = applied_status();
        hub.write_status("u1", rv.as_deref(), &status)
            .await
            .expect("written");
        let sent = outbox.taken().await;
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].type_, EventType::StatusUpdate.as_type());
        assert_eq!(
            conditions(&sent[0]),
            [("Applied".to_string(), "True".to_string())]
        );

        // A stale resourceVersion is a conflict, as on a hub, and sends nothing.
        let err = hub
            .write_status("u1", rv.as_deref(), &status)
            .await
            .expect_err("stale");
        assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
        assert!(outbox.taken().await.is_empty());
    }

    /// A status for every work at once (as after a restart, when every work is reconciled)
    /// waits for the wire: while the source holds what is on its way, the client holds the sends
    /// in flight and [`STATUS_ROOM`] more, not one event per work, one more per
    /// [`STATUS_ROOM_WAIT`] of a stalled wire; once the source hears again, every status goes.
    #[tokio::test]
    async fn a_status_for_every_work_waits_for_the_wire() {
        let works = STATUS_ROOM + 200;
        let (hub, outbox, _tx) = hub_with(works + 100);
        for i in 0..works {
            hub.apply_spec(&create(&format!("u{i}"), 1));
        }
        outbox.hold();
        let writer = hub.clone();
        tokio::spawn(async move {
            for i in 0..works {
                let name = format!("u{i}");
                let work = writer.get_work(&name).await.expect("read").expect("stored");
                let rv = work.metadata.resource_version.clone();
                writer
                    .write_status(&name, rv.as_deref(), &applied_status())
                    .await
                    .expect("written");
            }
        });
        // The 8 sends in flight reached the source and wait there; then the writer stops at the
        // room it has.
        outbox.holds_in_flight_and_the_room().await;

        // A wire that takes nothing for STATUS_ROOM_WAIT holds the writer no longer: one more
        // status is queued, and the next waits again.
        tokio::time::pause();
        tokio::time::advance(STATUS_ROOM_WAIT).await;
        // A sleep lets the paused clock's timers fire; far shorter than another wait.
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        assert_eq!(outbox.publisher.stats().queue_depth, 8 + STATUS_ROOM + 1);
        tokio::time::resume();

        outbox.hear().await;
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while outbox
                .recorder
                .events
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .len()
                < works
            {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("every status goes once the source hears");
        let sent = outbox.taken().await;
        assert_eq!(sent.len(), works);
        assert!(
            sent.iter()
                .all(|e| e.type_ == EventType::StatusUpdate.as_type())
        );
    }

    /// A status resync in parts (as a source sends one, 1,000 hashes a request) asking for every
    /// work is answered whole, each work once, as the wire takes it: while the source holds what
    /// is on its way, the client holds the sends in flight and [`STATUS_ROOM`] more, the rest
    /// waits as names, and a work whose answer waits is not heard.
    #[tokio::test]
    async fn a_status_resync_in_parts_is_answered_whole_as_the_wire_takes_it() {
        let works = STATUS_ROOM + 200;
        let (hub, outbox, _tx) = hub_with(works + 100);
        for i in 0..works {
            hub.apply_spec(&create(&format!("u{i}"), 1));
        }
        outbox.hold();
        let part = |range: std::ops::Range<usize>| ResourceStatusHashList {
            status_hashes: range
                .map(|i| ResourceStatusHash {
                    resource_id: format!("u{i}"),
                    status_hash: "old".into(),
                })
                .collect(),
        };
        hub.answer_status_resync(&part(0..works / 2));
        hub.answer_status_resync(&part(works / 2..works));
        outbox.holds_in_flight_and_the_room().await;
        let last = format!("u{}", works - 1);
        assert!(!hub.status_heard(&last), "its answer waits");

        outbox.hear().await;
        let mut answered = std::collections::BTreeSet::new();
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while answered.len() < works {
                for event in outbox.taken().await {
                    assert_eq!(event.type_, EventType::StatusResyncResponse.as_type());
                    let uid = event
                        .ext_string(types::EXT_RESOURCE_ID)
                        .expect("resourceid");
                    assert!(answered.insert(uid.clone()), "{uid} answered twice");
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("every work of both parts is answered");
        assert!(hub.status_heard(&last));
    }

    #[tokio::test]
    async fn a_status_the_client_cannot_queue_leaves_the_copy_as_it_was() {
        // Room for one work's events; the source holds the first one.
        let (hub, outbox, _tx) = hub_with(1);
        outbox.hold();
        hub.apply_spec(&create("u1", 1));
        let work = hub.get_work("u1").await.expect("read").expect("stored");
        let written = hub
            .write_status(
                "u1",
                work.metadata.resource_version.as_deref(),
                &Default::default(),
            )
            .await
            .expect("queued");
        outbox.arrived(1).await;
        let err = hub
            .write_status(
                "u1",
                written.metadata.resource_version.as_deref(),
                &applied_status(),
            )
            .await
            .expect_err("refused");
        assert!(matches!(err, kube::Error::Api(s) if s.code == 503));
        let kept = hub.get_work("u1").await.expect("read").expect("stored");
        assert_eq!(
            kept.status, written.status,
            "the write is retried from the same copy"
        );
        outbox.hear().await;
    }

    #[tokio::test]
    async fn the_last_finalizer_of_a_deleted_work_sends_deleted_at_once() {
        let (hub, outbox, _tx) = hub();
        hub.apply_spec(&create("u2", 1));
        let work = hub.get_work("u2").await.expect("read").expect("stored");
        hub.set_finalizers(&work, vec![MANIFEST_WORK_FINALIZER.into()])
            .await
            .expect("finalizer");
        assert!(
            outbox.taken().await.is_empty(),
            "finalizers are local bookkeeping"
        );
        let mut deleting = create("u2", 2);
        deleting.deletion_timestamp = Some(chrono::Utc::now());
        deleting.spec = None;
        hub.apply_spec(&deleting);
        let work = hub.get_work("u2").await.expect("read").expect("stored");
        assert!(work.metadata.deletion_timestamp.is_some());
        assert_eq!(work.metadata.generation, Some(2));
        hub.set_finalizers(&work, vec![]).await.expect("released");
        assert!(
            hub.get_work("u2").await.expect("read").is_none(),
            "forgotten"
        );
        let sent = outbox.taken().await;
        assert_eq!(sent.len(), 1);
        assert!(conditions(&sent[0]).contains(&("Deleted".to_string(), "True".to_string())));
        assert_eq!(
            sent[0]
                .ext_integer(types::EXT_RESOURCE_VERSION)
                .ok()
                .flatten(),
            Some(2)
        );
    }

    #[tokio::test]
    async fn a_deletion_is_heard_once_the_source_took_its_deleted() {
        let (hub, outbox, _tx) = hub();
        assert_eq!(hub.deletions_heard(), DeletionsHeard::default());
        outbox.hold();
        create_then_delete(&hub, "u5").await;
        // A status of another work, unheard too, is no deletion.
        hub.apply_spec(&create("u6", 1));
        let work = hub.get_work("u6").await.expect("read").expect("stored");
        hub.write_status(
            "u6",
            work.metadata.resource_version.as_deref(),
            &Default::default(),
        )
        .await
        .expect("written");
        assert_eq!(
            hub.deletions_heard(),
            DeletionsHeard {
                heard: vec![],
                unheard: 1
            }
        );
        outbox.hear().await;
        assert_eq!(
            hub.deletions_heard(),
            DeletionsHeard {
                heard: vec!["u5".into()],
                unheard: 0
            }
        );
        assert_eq!(
            hub.deletions_heard(),
            DeletionsHeard::default(),
            "told once"
        );
    }

    /// Creates work `uid` at generation 1, deletes it and lets the agent release it (the hub
    /// forgets it); returns the deleting spec event.
    async fn create_then_delete(hub: &BrokerHub, uid: &str) -> SpecUpdate {
        hub.apply_spec(&create(uid, 1));
        let work = hub.get_work(uid).await.expect("read").expect("stored");
        hub.set_finalizers(&work, vec![MANIFEST_WORK_FINALIZER.into()])
            .await
            .expect("finalizer");
        let mut deleting = create(uid, 1);
        deleting.deletion_timestamp = Some(chrono::Utc::now());
        deleting.spec = None;
        hub.apply_spec(&deleting);
        let work = hub.get_work(uid).await.expect("read").expect("stored");
        hub.set_finalizers(&work, vec![]).await.expect("released");
        assert!(hub.get_work(uid).await.expect("read").is_none());
        deleting
    }

    /// Found by `chaos --hub grpc` (seed 1795749085086169439, work w53): part of a spec resync
    /// answer made before the work was deleted arrived after the agent had cleaned it up and
    /// forgotten it, and brought it back: applied again, with no source copy left to delete it.
    #[tokio::test]
    async fn a_late_spec_event_of_a_work_deleted_here_does_not_bring_it_back() {
        let (hub, outbox, _tx) = hub();
        let deleting = create_then_delete(&hub, "u9").await;
        assert_eq!(outbox.taken().await.len(), 1, "Deleted sent");

        // The late answer: part of a resync answer at the same version, not deleting.
        let mut late = create("u9", 1);
        late.event_type = EventType::SpecResyncResponse;
        hub.apply_spec(&late);
        assert!(
            hub.get_work("u9").await.expect("read").is_none(),
            "a late spec event brought a deleted work back"
        );
        let mut redelivered = create("u9", 1);
        redelivered.event_type = EventType::SpecUpdate;
        hub.apply_spec(&redelivered);
        assert!(hub.get_work("u9").await.expect("read").is_none());
        // A delete again (the source may not have had the Deleted) is cleaned up as before.
        hub.apply_spec(&deleting);
        let again = hub
            .get_work("u9")
            .await
            .expect("read")
            .expect("deleting copy");
        assert!(again.metadata.deletion_timestamp.is_some());
        hub.set_finalizers(&again, vec![]).await.expect("released");
        assert_eq!(outbox.taken().await.len(), 1, "Deleted sent again");
        // A newer version is news from the source: taken.
        hub.apply_spec(&create("u9", 2));
        assert!(hub.get_work("u9").await.expect("read").is_some());
    }

    /// Found by `chaos --hub mqtt` after a restart: the deletion was forgotten with the next spec
    /// resync request (a reconnect), and a late part of the answer to the request before it
    /// brought the work back. Maestro's events carry the resource's creation time: a deletion
    /// remembered with it outlives the next request.
    #[tokio::test]
    async fn a_late_copy_of_a_deleted_work_stays_out_after_the_next_resync_request() {
        let (hub, outbox, _tx) = hub();
        let created = chrono::Utc::now() - chrono::Duration::seconds(30);
        let at = |mut update: SpecUpdate| {
            update.creation_timestamp = Some(created);
            update
        };
        hub.apply_spec(&at(create("u5", 1)));
        let work = hub.get_work("u5").await.expect("read").expect("stored");
        hub.set_finalizers(&work, vec![MANIFEST_WORK_FINALIZER.into()])
            .await
            .expect("finalizer");
        let mut deleting = at(create("u5", 1));
        deleting.deletion_timestamp = Some(chrono::Utc::now());
        hub.apply_spec(&deleting);
        let work = hub.get_work("u5").await.expect("read").expect("stored");
        hub.set_finalizers(&work, vec![]).await.expect("released");
        hub.request_spec_resync(&outbox.publisher, Request::Subscribe);

        let mut late = at(create("u5", 1));
        late.event_type = EventType::SpecResyncResponse;
        hub.apply_spec(&late);
        assert!(
            hub.get_work("u5").await.expect("read").is_none(),
            "a late part of an earlier answer brought the deleted work back"
        );
        // The same work created again is a new resource: a new creation time.
        let mut again = create("u5", 1);
        again.event_type = EventType::SpecResyncResponse;
        again.creation_timestamp = Some(created + chrono::Duration::seconds(20));
        hub.apply_spec(&again);
        assert!(
            hub.get_work("u5").await.expect("read").is_some(),
            "the work created again was dropped as a late copy"
        );
    }

    /// Seen in `chaos --hub mqtt` (work w8): the source restarted just after the broker took the
    /// work's `Deleted`, and kept the work for ever. Its status resync request after the restart
    /// lists the work: the agent says `Deleted` again; not for a work it holds again.
    #[tokio::test]
    async fn a_status_resync_listing_a_work_deleted_here_gets_its_deleted_again() {
        let (hub, outbox, _tx) = hub();
        create_then_delete(&hub, "u8").await;
        create_then_delete(&hub, "u6").await;
        hub.apply_spec(&create("u6", 1));
        assert_eq!(outbox.taken().await.len(), 2, "two Deleted sent");

        let listed = |uids: &[&str]| ResourceStatusHashList {
            status_hashes: uids
                .iter()
                .map(|uid| ResourceStatusHash {
                    resource_id: uid.to_string(),
                    status_hash: "old".into(),
                })
                .collect(),
        };
        hub.answer_status_resync(&listed(&["u8"]));
        let again = outbox.taken().await;
        assert_eq!(again.len(), 1, "{again:?}");
        assert_eq!(
            again[0].ext_string(types::EXT_RESOURCE_ID).as_deref(),
            Some("u8")
        );
        let deleted = ("Deleted".to_string(), "True".to_string());
        assert!(conditions(&again[0]).contains(&deleted), "{again:?}");
        // Created again: its own status, never Deleted.
        hub.answer_status_resync(&listed(&["u6"]));
        hub.answers_sent().await;
        let held = outbox.taken().await;
        assert_eq!(held.len(), 1);
        assert!(!conditions(&held[0]).iter().any(|(t, _)| t == "Deleted"));
    }

    /// A restarted agent tells the source again of a deletion an earlier run made (its record is
    /// kept until heard): once the source takes it, the deletion is heard, by the work's name.
    #[tokio::test]
    async fn a_deletion_told_again_is_heard_by_name_once_taken() {
        let (hub, outbox, _tx) = hub();
        let gone = GoneWork {
            name: "w1",
            uid: "u1",
            source: "maestro",
            generation: 3,
        };
        hub.retell_deletion(gone).expect("told");
        hub.retell_deletion(gone).expect("told once");
        let sent = outbox.taken().await;
        assert_eq!(sent.len(), 1, "{sent:?}");
        let deleted = ("Deleted".to_string(), "True".to_string());
        assert!(conditions(&sent[0]).contains(&deleted));
        assert_eq!(
            sent[0].ext_string(types::EXT_RESOURCE_ID).as_deref(),
            Some("u1")
        );
        assert_eq!(
            sent[0].ext_string(types::EXT_ORIGINAL_SOURCE).as_deref(),
            Some("maestro")
        );
        // Taken by the transport, not yet heard: the work may be one whose TTL ran out, and a
        // source that lost the event still holds it.
        assert!(hub.deletions_heard().heard.is_empty());
        assert_eq!(hub.deletions_heard().unheard, 1);
        // The source answers a request listing it with a deletion without data: heard.
        let mut gone_at_source = create("u1", 0);
        gone_at_source.name = "u1".into();
        gone_at_source.deletion_timestamp = Some(chrono::Utc::now());
        gone_at_source.spec = None;
        hub.apply_spec(&gone_at_source);
        assert_eq!(hub.deletions_heard().heard, ["w1"]);
        assert!(
            hub.get_work("u1").await.expect("read").is_none(),
            "the confirmation is no work to clean up"
        );
        assert_eq!(outbox.taken().await.len(), 0, "nothing more sent");
    }

    /// Maestro derives a resource's ID from its name: a work deleted and created again under the
    /// same name comes back as a `create_request` with the same UID at generation 1 (Maestro's
    /// e2e suite, "Resource CRUD Tests / delete and create again").
    #[tokio::test]
    async fn a_work_created_again_under_the_same_uid_is_taken() {
        let (hub, _outbox, _tx) = hub();
        create_then_delete(&hub, "u7").await;
        hub.apply_spec(&create("u7", 1));
        assert!(
            hub.get_work("u7").await.expect("read").is_some(),
            "the work created again was dropped as a late copy"
        );
    }

    #[tokio::test]
    async fn a_ttl_deletion_marks_the_work_and_a_work_without_finalizers_goes_at_once() {
        let (hub, outbox, _tx) = hub();
        hub.apply_spec(&create("u3", 1));
        let work = hub.get_work("u3").await.expect("read").expect("stored");
        hub.set_finalizers(&work, vec![MANIFEST_WORK_FINALIZER.into()])
            .await
            .expect("finalizer");
        let err = hub.delete_work("u3", "other-uid").await.expect_err("uid");
        assert!(matches!(err, kube::Error::Api(s) if s.code == 409));
        hub.delete_work("u3", "u3").await.expect("deleted");
        let marked = hub
            .get_work("u3")
            .await
            .expect("read")
            .expect("kept until cleaned up");
        assert!(marked.metadata.deletion_timestamp.is_some());
        assert!(
            outbox.taken().await.is_empty(),
            "Deleted only once cleaned up"
        );

        hub.apply_spec(&create("u4", 1));
        hub.delete_work("u4", "u4").await.expect("deleted");
        assert!(hub.get_work("u4").await.expect("read").is_none());
        assert_eq!(outbox.taken().await.len(), 1, "Deleted at once");

        // Deleted here: taken by the transport is not heard (the source still holds the work as
        // it was, if the event was lost after the broker took it).
        let work = hub.get_work("u3").await.expect("read").expect("stored");
        hub.set_finalizers(&work, vec![]).await.expect("released");
        assert_eq!(outbox.taken().await.len(), 1, "Deleted once cleaned up");
        let told = hub.deletions_heard();
        assert!(told.heard.is_empty(), "{told:?}");
        assert_eq!(told.unheard, 2);
        let mut gone_at_source = create("u3", 0);
        gone_at_source.deletion_timestamp = Some(chrono::Utc::now());
        gone_at_source.spec = None;
        hub.apply_spec(&gone_at_source);
        assert_eq!(hub.deletions_heard().heard, ["u3"]);
    }

    #[tokio::test]
    async fn resyncs_list_what_the_agent_holds_and_answer_what_the_source_lacks() {
        let (hub, outbox, tx) = hub();
        hub.apply_spec(&create("a", 3));
        hub.apply_spec(&create("b", 1));
        hub.request_spec_resync(&outbox.publisher, Request::Subscribe);
        let sent = outbox.taken().await;
        assert_eq!(sent[0].type_, EventType::SpecResyncRequest.as_type());
        let list: codec::ResourceVersionList =
            serde_json::from_slice(sent[0].data.as_deref().unwrap_or_default()).expect("list");
        let mut versions: Vec<_> = list
            .resource_versions
            .iter()
            .map(|v| (v.resource_id.as_str(), v.resource_version))
            .collect();
        versions.sort();
        assert_eq!(versions, [("a", 3), ("b", 1)]);
        assert_eq!(
            sent[0].ext_string(types::EXT_CLUSTER_NAME).as_deref(),
            Some("cluster1")
        );

        tx.send(Ok(
            Incoming::StatusResync(ResourceStatusHashList::default()),
        ))
        .await
        .expect("send");
        let all = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            let mut all = Vec::new();
            while all.len() < 2 {
                all.extend(outbox.taken().await);
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            all
        })
        .await
        .expect("answered");
        assert_eq!(all.len(), 2);
        assert!(
            all.iter()
                .all(|e| e.type_ == EventType::StatusResyncResponse.as_type())
        );

        let a = hub.get_work("a").await.expect("read").expect("a");
        let current = codec::status_hash(&a.status.clone().unwrap_or_default()).expect("hash");
        hub.answer_status_resync(&ResourceStatusHashList {
            status_hashes: vec![ResourceStatusHash {
                resource_id: "a".into(),
                status_hash: current,
            }],
        });
        hub.answers_sent().await;
        assert!(
            outbox.taken().await.is_empty(),
            "the source has a's status; b was not asked for"
        );
    }

    impl BrokerHub {
        /// Waits until every status a status resync request asked for is handed to the client.
        async fn answers_sent(&self) {
            tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while !self.answers().is_empty() {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
            })
            .await
            .expect("the answers are sent");
        }
    }

    /// The ids a spec resync request lists, in order.
    fn listed(request: &CloudEvent) -> Vec<String> {
        let list: codec::ResourceVersionList =
            serde_json::from_slice(request.data.as_deref().unwrap_or_default()).expect("list");
        list.resource_versions
            .into_iter()
            .map(|v| v.resource_id)
            .collect()
    }

    /// The source's deletion of an id it does not hold (no data), as its answer carries it.
    fn not_held(uid: &str) -> SpecUpdate {
        let mut update = create(uid, 0);
        update.event_type = EventType::SpecResyncResponse;
        update.spec = None;
        update.deletion_timestamp = Some(chrono::Utc::now());
        update
    }

    /// Waits (5 s at most) until `done`.
    async fn eventually(what: &str, done: impl Fn() -> bool) {
        let waited = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            while !done() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(waited.is_ok(), "{what}");
    }

    /// Answers `request` as sdk-go's source client does, holding `held` (id → version): every
    /// held work the request does not list or lists older, then a deletion for every listed id
    /// not held, in the request's order.
    fn answer(hub: &BrokerHub, request: &CloudEvent, held: &BTreeMap<String, i64>) {
        let list: codec::ResourceVersionList =
            serde_json::from_slice(request.data.as_deref().unwrap_or_default()).expect("list");
        let listed: BTreeMap<&str, i64> = list
            .resource_versions
            .iter()
            .map(|v| (v.resource_id.as_str(), v.resource_version))
            .collect();
        for (uid, version) in held {
            if listed.get(uid.as_str()).is_none_or(|l| version > l) {
                let mut resent = create(uid, *version);
                resent.event_type = EventType::SpecResyncResponse;
                hub.apply_spec(&resent);
            }
        }
        for v in &list.resource_versions {
            if !held.contains_key(&v.resource_id) {
                hub.apply_spec(&not_held(&v.resource_id));
            }
        }
    }

    #[tokio::test]
    async fn a_request_over_the_ceiling_lists_what_fits_and_asks_about_a_work_the_answer_lacks() {
        const CEILING: usize = 700;
        let (hub, source, _tx) = hub_with_ceiling(CEILING);
        let mut held: BTreeMap<String, i64> = (0..20).map(|i| (format!("u{i:02}"), 2)).collect();
        for uid in held.keys() {
            hub.apply_spec(&create(uid, 2));
        }
        hub.request_spec_resync(&source.publisher, Request::Subscribe);
        let sent = source.taken().await;
        let request = &sent[0];
        assert!(
            RECORDING_ENVELOPE + request.data.as_ref().map_or(0, Vec::len) <= CEILING,
            "within the ceiling"
        );
        let ids = listed(request);
        let marker = ids.last().cloned().expect("a marker");
        assert!(
            !held.contains_key(&marker),
            "the marker is no work: {marker}"
        );
        let left_out: Vec<String> = held.keys().filter(|u| !ids.contains(u)).cloned().collect();
        assert!(left_out.len() > 1, "works left out: {ids:?}");

        // The source lost one of the works left out; it answers without it.
        let lost = left_out[0].clone();
        held.remove(&lost);
        answer(&hub, request, &held);
        eventually("the lost work found unconfirmed", || {
            hub.desync().counts().unconfirmed == 1
        })
        .await;
        assert!(
            hub.works()
                .iter()
                .any(|w| w.metadata.uid.as_deref() == Some(lost.as_str())),
            "nothing deleted on the inference"
        );

        // Asked at once, the lost work listed first and a marker last.
        let question = source.taken().await;
        let question = question.first().expect("a question");
        let ids = listed(question);
        assert_eq!(ids.first(), Some(&lost));
        assert_eq!(hub.desync().counts().asked, 1);

        // The source does not hold it: its deletion heals the desync.
        answer(&hub, question, &held);
        eventually("the question settled", || !hub.desync().settling()).await;
        let counts = hub.desync().counts();
        assert_eq!(
            (
                counts.unconfirmed,
                counts.healed_deleted,
                hub.desync().unconfirmed_now()
            ),
            (1, 1, 0)
        );
        assert!(hub.works_listed(), "the marker ends the answer");
        let gone = hub
            .works()
            .into_iter()
            .find(|w| w.metadata.uid.as_deref() == Some(lost.as_str()))
            .expect("being deleted");
        assert!(gone.metadata.deletion_timestamp.is_some());
        assert!(
            source.taken().await.is_empty(),
            "no further question once settled"
        );
    }

    #[tokio::test]
    async fn a_request_that_fits_lists_every_work_without_a_marker() {
        let (hub, source, _tx) = hub_with_ceiling(100_000);
        for i in 0..20 {
            hub.apply_spec(&create(&format!("u{i:02}"), 1));
        }
        hub.request_spec_resync(&source.publisher, Request::Subscribe);
        let ids = listed(&source.taken().await[0]);
        assert_eq!(ids.len(), 20);
        assert!(ids.iter().all(|id| id.starts_with('u')));
    }
}
