//! What every reconcile gets: clients, applier, evaluator, metrics, config, status writer, watches,
//! retry state.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::Api;
use kube::runtime::reflector::Store;
use work_api::AppliedManifestWork;

use crate::backoff::Backoff;
use crate::config::AgentConfig;
use crate::hub::Hub;
use crate::hub::stored_work::StoredWork;
use crate::metrics::Metrics;
use crate::spoke::applied_work::AppliedWorks;
use crate::spoke::cleanup_memory::CleanupMemory;
use crate::spoke::executor::ExecutorCheck;
use crate::spoke::watches::Watches;
use crate::work::states::WorkStates;
use crate::work::status_writer::StatusWriter;

/// Shared state of the controllers.
pub struct Context {
    /// The hub: where works come from and their status goes.
    pub hub: Arc<dyn Hub>,
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
}

impl Context {
    /// Whether the ManifestWork store holds a full list.
    pub fn works_are_synced(&self) -> bool {
        self.works_synced.load(Ordering::Acquire)
    }

    /// AppliedManifestWorks on the spoke.
    pub fn applied_works(&self) -> Api<AppliedManifestWork> {
        Api::all(self.spoke.clone())
    }
}
