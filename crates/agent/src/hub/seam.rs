//! The seam itself: what the work logic asks of a hub, whatever carries it.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use kube::runtime::events::Event;
use kube::runtime::watcher;
use work_api::{ManifestWork, ManifestWorkStatus};

use crate::hub::hearing::SourceHearing;
use crate::hub::stored_work::StoredWork;

/// One change of the cluster's works, as a watch reports it.
pub type WorkEvent = watcher::Event<StoredWork>;

/// The works of the cluster namespace: a full list (`Init`, `InitApply` for each work,
/// `InitDone`) first and again after any gap, then each change as it happens.
pub type WorkEvents = BoxStream<'static, Result<WorkEvent, watcher::Error>>;

/// A hub answer: the object written or read, or the API error that refused it.
pub type HubResult<'a, T> = BoxFuture<'a, Result<T, ::kube::Error>>;

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

    /// Adds the hub's own metrics (a transport's counters) to the agent's registry.
    fn register_metrics(&self, _registry: &mut prometheus_client::registry::Registry) {}

    /// How long the controller holds a work's reconcile request to fold the ones that follow.
    /// A Kubernetes hub echoes each of the agent's own work writes back through the watch a few
    /// milliseconds later; the pause folds those echoes into one reconcile.
    fn reconcile_debounce(&self) -> Duration {
        Duration::from_millis(50)
    }

    /// What the agent asks of a hub whose source must hear its writes (a broker's source takes
    /// them as events, later or never, and gives no status back after a restart); `None` for a
    /// hub that takes each write with the request and keeps its works' statuses (Kubernetes).
    fn source_hearing(&self) -> Option<&dyn SourceHearing> {
        None
    }
}
