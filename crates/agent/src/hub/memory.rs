//! A hub kept in memory: works, their versions and the agent's writes, with the API server's
//! answers (see [`LocalWorks`]). It lets the work logic run with no hub API server, in tests and
//! in tools.

use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::events::Event;
use work_api::{ManifestWork, ManifestWorkStatus};

use super::local_works::LocalWorks;
use super::seam::{Hub, HubResult, WorkEvents};

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
struct Counters {
    uids: u64,
    requests: HubRequests,
    events: Vec<RecordedEvent>,
}

/// The works of one cluster namespace, in memory.
#[derive(Clone)]
pub struct MemoryHub {
    namespace: String,
    works: LocalWorks,
    counters: Arc<Mutex<Counters>>,
}

impl MemoryHub {
    /// An empty hub serving `namespace`.
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            works: LocalWorks::default(),
            counters: Arc::default(),
        }
    }

    fn counters(&self) -> std::sync::MutexGuard<'_, Counters> {
        self.counters.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates `work`, or replaces its spec and labels (a new generation when the spec changed),
    /// as its owner on the hub would.
    pub fn apply(&self, mut work: ManifestWork) -> ManifestWork {
        let name = work.metadata.name.clone().unwrap_or_default();
        work.metadata.namespace = Some(self.namespace.clone());
        let mut locked = self.works.lock();
        match locked.get(&name) {
            Some(mut current) => {
                let spec_changed = serde_json::to_value(&current.spec).ok()
                    != serde_json::to_value(&work.spec).ok();
                if spec_changed {
                    current.metadata.generation =
                        Some(current.metadata.generation.unwrap_or(1) + 1);
                }
                current.spec = work.spec;
                current.metadata.labels = work.metadata.labels;
                locked.commit(current)
            }
            None => {
                let uid = {
                    let mut counters = self.counters();
                    counters.uids += 1;
                    counters.uids
                };
                work.metadata.uid = Some(format!("memory-uid-{uid}"));
                work.metadata.generation = Some(1);
                work.metadata.creation_timestamp = Some(Time(Timestamp::now()));
                work.metadata.deletion_timestamp = None;
                work.status = None;
                locked.commit(work)
            }
        }
    }

    /// Deletes work `name` as its owner would: gone at once without finalizers, otherwise
    /// marked for deletion until the finalizers are removed. False when there is no such work.
    pub fn delete(&self, name: &str) -> bool {
        matches!(self.works.delete(name, |_| Ok(())), Ok(Some(_)))
    }

    /// The work `name` as the hub has it now.
    pub fn work(&self, name: &str) -> Option<ManifestWork> {
        self.works.get(name)
    }

    /// What the agent asked of the hub so far.
    pub fn requests(&self) -> HubRequests {
        self.counters().requests
    }

    /// The Events the agent recorded so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.counters().events.clone()
    }
}

impl Hub for MemoryHub {
    fn watch_works(&self) -> WorkEvents {
        self.works.watch()
    }

    fn get_work<'a>(&'a self, name: &'a str) -> HubResult<'a, Option<ManifestWork>> {
        self.counters().requests.reads += 1;
        let work = self.works.get(name);
        Box::pin(async move { Ok(work) })
    }

    fn write_status<'a>(
        &'a self,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a ManifestWorkStatus,
    ) -> HubResult<'a, ManifestWork> {
        self.counters().requests.status_writes += 1;
        let result = self
            .works
            .write_status(name, resource_version, status, |_| Ok(()));
        Box::pin(async move { result })
    }

    fn set_finalizers<'a>(
        &'a self,
        work: &'a ManifestWork,
        finalizers: Vec<String>,
    ) -> HubResult<'a, ManifestWork> {
        self.counters().requests.finalizer_writes += 1;
        let result = self
            .works
            .set_finalizers(work, finalizers, |_| Ok(()))
            .map(|written| written.work);
        Box::pin(async move { result })
    }

    fn delete_work<'a>(&'a self, name: &'a str, uid: &'a str) -> HubResult<'a, ()> {
        self.counters().requests.deletions += 1;
        let result = self.works.check_uid(name, uid);
        if result.is_ok() {
            self.delete(name);
        }
        Box::pin(async move { result })
    }

    fn record_event<'a>(&'a self, work: &'a ManifestWork, event: Event) -> HubResult<'a, ()> {
        let mut counters = self.counters();
        counters.requests.events += 1;
        counters.events.push(RecordedEvent {
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
