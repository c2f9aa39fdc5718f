//! What every reconcile gets: clients, applier, evaluator, metrics, config, status writer, watches,
//! retry state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::Api;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;
use work_api::{AppliedManifestWork, ManifestWork};

use super::applied_work::AppliedWorks;
use super::backoff::Backoff;
use super::cleanup_memory::CleanupMemory;
use super::config::AgentConfig;
use super::executor::ExecutorCheck;
use super::states::WorkStates;
use super::status_writer::StatusWriter;
use super::stored_work::StoredWork;
use super::watches::Watches;
use crate::hub_auth::HubAuth;
use crate::metrics::Metrics;

/// Shared state of the controllers.
pub struct Context {
    /// Hub client.
    pub hub: kube::Client,
    /// Spoke client.
    pub spoke: kube::Client,
    /// Writes manifests to the spoke.
    pub applier: applier::Applier,
    /// Resolves kinds to resources (shared cache with the applier).
    pub resolver: applier::Resolver,
    /// Evaluates condition rules.
    pub evaluator: &'static conditions::Evaluator,
    /// Prometheus metrics.
    pub metrics: Arc<Metrics>,
    /// Startup settings.
    pub config: AgentConfig,
    /// The one writer of ManifestWork status.
    pub status: StatusWriter,
    /// Resource watches and the object → work index.
    pub watches: Watches,
    /// Records Events on the hub (TTL deletions).
    pub recorder: Recorder,
    /// Per-work state for the gauges.
    pub states: WorkStates,
    /// Permission checks of `spec.executor`.
    pub executor: ExecutorCheck,
    /// Retry state of blocked works.
    pub backoff: Arc<Backoff>,
    /// The works' AppliedManifestWorks (from their watch store).
    pub applied: AppliedWorks,
    /// Which resources each cleanup in progress has seen going.
    pub cleanups: CleanupMemory,
    /// The ManifestWorks of the served namespace (the store of their watch).
    pub work_store: Store<StoredWork>,
    /// True once `work_store` holds the watch's initial list.
    pub works_synced: Arc<AtomicBool>,
    /// What the ManifestWork watch says about the hub credentials (and the watch's health).
    pub hub_auth: HubAuth,
}

impl Context {
    /// ManifestWorks of the served namespace.
    pub fn works(&self) -> Api<ManifestWork> {
        Api::namespaced(self.hub.clone(), &self.config.cluster_name)
    }

    /// Whether the ManifestWork store holds a full list.
    pub fn works_are_synced(&self) -> bool {
        self.works_synced.load(Ordering::Acquire)
    }

    /// AppliedManifestWorks on the spoke.
    pub fn applied_works(&self) -> Api<AppliedManifestWork> {
        Api::all(self.spoke.clone())
    }
}
