//! The seam itself: what the work logic asks of a hub, whatever carries it.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kube::runtime::events::Event;
use kube::runtime::watcher;
use work_api::{ManifestWork, ManifestWorkStatus};

use crate::hub::stored_work::StoredWork;

/// One change of the cluster's works, as a watch reports it.
pub type WorkEvent = watcher::Event<StoredWork>;

/// The works of the cluster namespace: a full list (`Init`, `InitApply` for each work,
/// `InitDone`) first and again after any gap, then each change as it happens.
pub type WorkEvents = BoxStream<'static, Result<WorkEvent, watcher::Error>>;

/// A hub answer: the object written or read, or the API error that refused it.
pub type HubResult<'a, T> = BoxFuture<'a, Result<T, ::kube::Error>>;

/// Works whose deletion a hub has heard, and how many it has not heard yet (see
/// [`Hub::deletions_heard`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeletionsHeard {
    /// The works (by name) whose deletion the hub heard since the last call.
    pub heard: Vec<String>,
    /// Deletions told and not heard yet.
    pub unheard: usize,
}

/// A work this agent deleted in an earlier run, as its source knows it (see
/// [`Hub::retell_deletion`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoneWork<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its UID (the source's resource id).
    pub uid: &'a str,
    /// The source that sent it.
    pub source: &'a str,
    /// Its last known generation.
    pub generation: i64,
}

/// What the agent needs from its hub.
pub trait Hub: Send + Sync + 'static {
    /// Watches the works assigned to this cluster (see [`WorkEvents`]).
    fn watch_works(&self) -> WorkEvents;

    /// Reads one work; `None` when it is gone.
    fn get_work<'a>(&'a self, name: &'a str) -> HubResult<'a, Option<ManifestWork>>;

    /// Replaces the status of work `name`, provided it is still at `resource_version`
    /// (409 Conflict otherwise); returns the work as written.
    fn write_status<'a>(
        &'a self,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a ManifestWorkStatus,
    ) -> HubResult<'a, ManifestWork>;

    /// Replaces the finalizer list of `work`, provided it is still the one `work` has (409
    /// Conflict otherwise); returns the work as written.
    fn set_finalizers<'a>(
        &'a self,
        work: &'a ManifestWork,
        finalizers: Vec<String>,
    ) -> HubResult<'a, ManifestWork>;

    /// Deletes work `name`, provided it is still the object `uid` (409 Conflict otherwise).
    fn delete_work<'a>(&'a self, name: &'a str, uid: &'a str) -> HubResult<'a, ()>;

    /// Records an Event about `work` for the people who own it.
    fn record_event<'a>(&'a self, work: &'a ManifestWork, event: Event) -> HubResult<'a, ()>;

    /// Whether the hub answers at all (for `/readyz`).
    fn reachable(&self) -> BoxFuture<'_, bool>;

    /// Whether the hub refuses the agent's credentials now (for `/healthz`).
    fn credentials_refused(&self) -> BoxFuture<'_, bool>;

    /// Whether the works' watch is connected and current: eviction of works the agent could not
    /// hear about waits for it.
    fn watch_is_healthy(&self) -> bool;

    /// Whether the works the agent holds are the hub's whole list: a broker's source answers a
    /// spec resync request one event per work, with no end marker, so the copy is partial until
    /// the answer is in. Eviction waits for it. A Kubernetes hub's list comes whole.
    fn works_listed(&self) -> bool {
        true
    }

    /// `missing` AppliedManifestWorks name works the agent does not hold: whether the hub was
    /// asked for its list again (a broker's answer may lose events on the way; eviction then
    /// waits for the new answer). A Kubernetes hub's list is whole: false.
    fn ask_again_for_missing_works(&self, _missing: usize) -> bool {
        false
    }

    /// The works released by [`Hub::set_finalizers`] whose deletion the hub has heard since the
    /// last call. A Kubernetes hub hears a release with the write itself and never lists one; a
    /// broker's source hears it when it takes the work's `Deleted` event, which may be after a
    /// reconnect or never (the agent stopped before).
    fn deletions_heard(&self) -> DeletionsHeard {
        DeletionsHeard::default()
    }

    /// Tells the hub again that `work`, deleted by an earlier run of the agent, is gone: that
    /// run may have stopped before the source heard it. Once heard, [`Hub::deletions_heard`]
    /// names it. Nothing for a hub that keeps statuses (it heard the deletion with its write).
    fn retell_deletion(&self, _work: GoneWork<'_>) -> Result<(), ::kube::Error> {
        Ok(())
    }

    /// Resolves when the source takes an event after this was called ([`Hub::deletions_heard`]
    /// and [`Hub::status_heard`] may then have news); never, for a hub that hears every write
    /// as it is made.
    fn events_taken(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::pending())
    }

    /// Whether the hub has taken the last status written for work `name`. A Kubernetes hub takes
    /// a status with the write; a broker's source when it takes the event.
    fn status_heard(&self, _name: &str) -> bool {
        true
    }

    /// Adds the hub's own metrics (a transport's counters) to the agent's registry.
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}

    /// How long the controller holds a work's reconcile request to fold the ones that follow.
    /// A Kubernetes hub echoes each of the agent's own work writes back through the watch a few
    /// milliseconds later; the pause folds those echoes into one reconcile.
    fn reconcile_debounce(&self) -> Duration {
        Duration::from_millis(50)
    }

    /// Whether a work's status comes back from the hub after an agent restart (a Kubernetes hub
    /// keeps it). A hub that does not (a broker: spec events carry no status) has the agent keep
    /// what completion needs on the spoke (`work::completion_memory`).
    fn keeps_status(&self) -> bool {
        true
    }

    /// The most bytes of status JSON the hub carries for `work` now, when the hub itself is the
    /// limit (a broker's packet ceiling less the status event's envelope); `None` when only the
    /// API server's object limit applies (`work::status_size`).
    fn status_room(&self, _work: &ManifestWork) -> Option<usize> {
        None
    }
}
