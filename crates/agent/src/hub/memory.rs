//! A hub kept in memory: works, their versions and the agent's writes, with the API server's
//! answers (404, 409 on a stale version or finalizer list or UID) and a watch that re-lists after
//! a gap. It lets the work logic run with no hub API server, in tests and in tools.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::Status;
use kube::runtime::events::Event;
use kube::runtime::watcher;
use tokio::sync::broadcast;
use work_api::{ManifestWork, ManifestWorkStatus};

use super::seam::{Hub, HubResult, WorkEvent, WorkEvents};
use crate::work::stored_work::StoredWork;

/// Changes a watcher may fall behind by before it re-lists.
const WATCH_BUFFER: usize = 1024;

/// What the agent asked of a [`MemoryHub`], by kind.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HubRequests {
    /// Status writes (accepted or refused).
    pub status_writes: u64,
    /// Finalizer list writes (accepted or refused).
    pub finalizer_writes: u64,
    /// Work deletions (accepted or refused).
    pub deletions: u64,
    /// Reads of one work.
    pub reads: u64,
    /// Events recorded.
    pub events: u64,
}

/// An Event the agent recorded, as the hub keeps it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The work it is about.
    pub work: String,
    /// Its reason.
    pub reason: String,
    /// Its message.
    pub note: Option<String>,
}

#[derive(Default)]
struct State {
    works: BTreeMap<String, ManifestWork>,
    resource_version: u64,
    uids: u64,
    requests: HubRequests,
    events: Vec<RecordedEvent>,
}

/// The works of one cluster namespace, in memory.
#[derive(Clone)]
pub struct MemoryHub {
    namespace: String,
    state: Arc<Mutex<State>>,
    changes: broadcast::Sender<WorkEvent>,
}

fn api_error(code: u16, reason: &str, message: String) -> kube::Error {
    kube::Error::Api(Box::new(Status::failure(&message, reason).with_code(code)))
}

fn not_found(name: &str) -> kube::Error {
    api_error(
        404,
        "NotFound",
        format!("manifestworks \"{name}\" not found"),
    )
}

fn conflict(message: String) -> kube::Error {
    api_error(409, "Conflict", message)
}

fn stored(work: &ManifestWork) -> Option<StoredWork> {
    serde_json::to_value(work)
        .ok()
        .and_then(StoredWork::from_value)
}

impl MemoryHub {
    /// An empty hub serving `namespace`.
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            state: Arc::default(),
            changes: broadcast::channel(WATCH_BUFFER).0,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stores `work` at a new version and tells the watchers.
    fn commit(&self, state: &mut State, mut work: ManifestWork) -> ManifestWork {
        state.resource_version += 1;
        work.metadata.resource_version = Some(state.resource_version.to_string());
        let name = work.metadata.name.clone().unwrap_or_default();
        state.works.insert(name, work.clone());
        if let Some(s) = stored(&work) {
            let _ = self.changes.send(watcher::Event::Apply(s));
        }
        work
    }

    /// Removes work `name` and tells the watchers.
    fn remove(&self, state: &mut State, name: &str) {
        if let Some(work) = state.works.remove(name)
            && let Some(s) = stored(&work)
        {
            let _ = self.changes.send(watcher::Event::Delete(s));
        }
    }

    /// Creates `work`, or replaces its spec and labels (a new generation when the spec changed),
    /// as its owner on the hub would.
    pub fn apply(&self, mut work: ManifestWork) -> ManifestWork {
        let mut state = self.lock();
        let name = work.metadata.name.clone().unwrap_or_default();
        work.metadata.namespace = Some(self.namespace.clone());
        match state.works.get(&name).cloned() {
            Some(mut current) => {
                let spec_changed = serde_json::to_value(&current.spec).ok()
                    != serde_json::to_value(&work.spec).ok();
                if spec_changed {
                    current.metadata.generation =
                        Some(current.metadata.generation.unwrap_or(1) + 1);
                }
                current.spec = work.spec;
                current.metadata.labels = work.metadata.labels;
                self.commit(&mut state, current)
            }
            None => {
                state.uids += 1;
                work.metadata.uid = Some(format!("memory-uid-{}", state.uids));
                work.metadata.generation = Some(1);
                work.metadata.creation_timestamp = Some(Time(Timestamp::now()));
                work.metadata.deletion_timestamp = None;
                work.status = None;
                self.commit(&mut state, work)
            }
        }
    }

    /// Deletes work `name` as its owner would: gone at once without finalizers, otherwise
    /// marked for deletion until the finalizers are removed. False when there is no such work.
    pub fn delete(&self, name: &str) -> bool {
        let mut state = self.lock();
        let Some(mut work) = state.works.get(name).cloned() else {
            return false;
        };
        if work.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            self.remove(&mut state, name);
        } else if work.metadata.deletion_timestamp.is_none() {
            work.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
            self.commit(&mut state, work);
        }
        true
    }

    /// The work `name` as the hub has it now.
    pub fn work(&self, name: &str) -> Option<ManifestWork> {
        self.lock().works.get(name).cloned()
    }

    /// What the agent asked of the hub so far.
    pub fn requests(&self) -> HubRequests {
        self.lock().requests
    }

    /// The Events the agent recorded so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.lock().events.clone()
    }

    /// The full list as a watch starts it.
    fn list(&self) -> Vec<WorkEvent> {
        let state = self.lock();
        let mut events = vec![watcher::Event::Init];
        events.extend(
            state
                .works
                .values()
                .filter_map(stored)
                .map(watcher::Event::InitApply),
        );
        events.push(watcher::Event::InitDone);
        events
    }
}

impl Hub for MemoryHub {
    fn watch_works(&self) -> WorkEvents {
        // Subscribed before listing: a change made in between is in both, which a watch allows.
        let changes = self.changes.subscribe();
        let hub = self.clone();
        let initial = futures::stream::iter(self.list());
        let rest = futures::stream::unfold((hub, changes), |(hub, mut changes)| async move {
            match changes.recv().await {
                Ok(event) => Some((vec![event], (hub, changes))),
                // Fell behind: start over with a full list, as a watch does after a gap.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let changes = hub.changes.subscribe();
                    let list = hub.list();
                    Some((list, (hub, changes)))
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        })
        .flat_map(futures::stream::iter);
        initial.chain(rest).map(Ok).boxed()
    }

    fn get_work<'a>(&'a self, name: &'a str) -> HubResult<'a, Option<ManifestWork>> {
        let mut state = self.lock();
        state.requests.reads += 1;
        let work = state.works.get(name).cloned();
        Box::pin(async move { Ok(work) })
    }

    fn write_status<'a>(
        &'a self,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a ManifestWorkStatus,
    ) -> HubResult<'a, ManifestWork> {
        let result = {
            let mut state = self.lock();
            state.requests.status_writes += 1;
            match state.works.get(name).cloned() {
                None => Err(not_found(name)),
                Some(current)
                    if resource_version.is_some_and(|rv| {
                        Some(rv) != current.metadata.resource_version.as_deref()
                    }) =>
                {
                    Err(conflict(format!("manifestwork {name} was modified")))
                }
                Some(mut current) => {
                    current.status = Some(status.clone());
                    Ok(self.commit(&mut state, current))
                }
            }
        };
        Box::pin(async move { result })
    }

    fn set_finalizers<'a>(
        &'a self,
        work: &'a ManifestWork,
        finalizers: Vec<String>,
    ) -> HubResult<'a, ManifestWork> {
        let name = work.metadata.name.clone().unwrap_or_default();
        let result = {
            let mut state = self.lock();
            state.requests.finalizer_writes += 1;
            match state.works.get(&name).cloned() {
                None => Err(not_found(&name)),
                Some(current)
                    if current.metadata.finalizers.clone().unwrap_or_default()
                        != work.metadata.finalizers.clone().unwrap_or_default() =>
                {
                    Err(conflict(format!(
                        "the finalizers of {name} changed since they were read"
                    )))
                }
                Some(mut current) => {
                    let deleting = current.metadata.deletion_timestamp.is_some();
                    let empty = finalizers.is_empty();
                    current.metadata.finalizers = (!empty).then_some(finalizers);
                    let written = self.commit(&mut state, current);
                    if deleting && empty {
                        self.remove(&mut state, &name);
                    }
                    Ok(written)
                }
            }
        };
        Box::pin(async move { result })
    }

    fn delete_work<'a>(&'a self, name: &'a str, uid: &'a str) -> HubResult<'a, ()> {
        let result = {
            let mut state = self.lock();
            state.requests.deletions += 1;
            match state.works.get(name) {
                None => Err(not_found(name)),
                Some(w) if w.metadata.uid.as_deref() != Some(uid) => Err(conflict(format!(
                    "the UID of manifestwork {name} is not {uid}"
                ))),
                Some(_) => Ok(()),
            }
        };
        if result.is_ok() {
            self.delete(name);
        }
        Box::pin(async move { result })
    }

    fn record_event<'a>(&'a self, work: &'a ManifestWork, event: Event) -> HubResult<'a, ()> {
        let mut state = self.lock();
        state.requests.events += 1;
        state.events.push(RecordedEvent {
            work: work.metadata.name.clone().unwrap_or_default(),
            reason: event.reason,
            note: event.note,
        });
        Box::pin(async move { Ok(()) })
    }

    fn reachable(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { true })
    }

    fn credentials_refused(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }

    fn watch_is_healthy(&self) -> bool {
        true
    }
}
