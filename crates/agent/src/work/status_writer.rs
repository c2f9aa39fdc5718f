//! The one place that writes ManifestWork status on the hub: a status is built from the freshest
//! object (the watch store's, or the agent's own latest write when the store has not caught up
//! yet; a fresh read only after a conflict), written only when it differs, with optimistic
//! locking and conflicts retried.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::ResourceExt;

use work_api::ManifestWork;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::error::Error;
use crate::hub::Hub;
use crate::latest::Latest;
use crate::work::status;
use crate::work::status_size::{MIN_STATUS_BUDGET, budget_for, fit_status, is_too_large};

const ATTEMPTS: usize = 5;

/// How long a released work is remembered at most: its deletion normally reaches the watch
/// within moments; a deletion missed by a watch gap must not keep the entry for ever.
const RELEASE_MEMORY: Duration = Duration::from_secs(300);

/// Writes ManifestWork status.
pub struct StatusWriter {
    hub: Arc<dyn Hub>,
    latest: Latest<ManifestWork>,
    released: Mutex<HashMap<String, Instant>>,
    /// Status budgets lowered after the API server refused a status as too large, per work.
    refused_budgets: Mutex<HashMap<String, usize>>,
}

impl StatusWriter {
    /// A writer of the status of `hub`'s works.
    pub fn new(hub: Arc<dyn Hub>) -> Self {
        Self {
            hub,
            latest: Latest::default(),
            released: Mutex::default(),
            refused_budgets: Mutex::default(),
        }
    }

    /// `seen` (from the watch store), or the agent's own later write of it: its metadata and
    /// status over the store's spec. The agent's writes leave the spec alone, so that is the spec
    /// it wrote at the same generation; at another one (the source changed the spec since),
    /// the store's copy is taken as it is (a write on it conflicts and re-reads).
    pub fn fresher(&self, seen: Arc<ManifestWork>) -> Arc<ManifestWork> {
        let ours = self.latest.fresher(&seen.name_any(), seen.clone());
        if Arc::ptr_eq(&ours, &seen) || ours.metadata.generation != seen.metadata.generation {
            return seen;
        }
        Arc::new(ManifestWork {
            metadata: ours.metadata.clone(),
            spec: seen.spec.clone(),
            status: ours.status.clone(),
        })
    }

    /// Remembers a work the agent just wrote (e.g. a finalizer patch), without its spec: the
    /// store has it, and while the store catches up (thousands of works after a restart) a
    /// spec per work would be held twice.
    pub fn record(&self, mut work: ManifestWork) {
        work.spec = Default::default();
        self.latest.record(&work.name_any(), work);
    }

    /// The watch delivered version `resource_version` of work `name`: drops the agent's own
    /// copy once the store has caught up.
    pub fn observe(&self, name: &str, resource_version: Option<&str>) {
        self.latest.observe(name, resource_version);
    }

    /// Forgets a work whose finalizer the agent removed. Until its deletion reaches the watch,
    /// [`StatusWriter::is_released`] says so: a reconcile of the store's older copy (still with
    /// the finalizer) then sends nothing instead of removing the finalizer a second time.
    pub fn forget(&self, name: &str) {
        self.latest.forget(name);
        self.refused_budgets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        let now = Instant::now();
        let mut released = self.released.lock().unwrap_or_else(PoisonError::into_inner);
        released.retain(|_, at| now.duration_since(*at) < RELEASE_MEMORY);
        released.insert(name.to_string(), now);
    }

    /// Whether the agent removed this work's finalizer and its deletion has not been seen yet.
    pub fn is_released(&self, name: &str) -> bool {
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .is_some_and(|at| at.elapsed() < RELEASE_MEMORY)
    }

    /// A live work of this name is in the watch (re-created after a deletion the watch missed).
    pub fn unrelease(&self, name: &str) {
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// Forgets everything about a work whose deletion the watch delivered.
    pub fn gone(&self, name: &str) {
        self.latest.forget(name);
        self.released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
        self.refused_budgets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }

    /// The status budget for a work: from its size and what the hub carries, or lower after a
    /// refusal.
    fn budget(&self, name: &str, work: &ManifestWork) -> usize {
        let refused = self
            .refused_budgets
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .copied();
        let stored = budget_for(work);
        let budget = self
            .hub
            .source_hearing()
            .and_then(|source| source.status_room(work))
            .map_or(stored, |room| room.min(stored));
        refused.map_or(budget, |r| r.min(budget))
    }

    /// Builds the status from `current` (then from a fresh read after each conflict) with `build`,
    /// which returns `None` when nothing needs writing. A status over the size budget is reduced
    /// first (see `status_size`); one the API server still refuses as too large is reduced
    /// further. Returns the work as written, if written.
    pub async fn write<F>(
        &self,
        current: &ManifestWork,
        build: F,
    ) -> Result<Option<ManifestWork>, Error>
    where
        F: Fn(&ManifestWork) -> Option<work_api::ManifestWorkStatus>,
    {
        let name = current.name_any();
        let mut fresh: Option<ManifestWork> = None;
        for attempt in 0..ATTEMPTS {
            let work = fresh.as_ref().unwrap_or(current);
            let budget = self.budget(&name, work);
            let Some(status) = build(work) else {
                return Ok(None);
            };
            let status = fit_status(
                status,
                work.status.as_ref(),
                budget,
                work.metadata.generation,
                Time(Timestamp::now()),
            );
            if !status::differs(work.status.as_ref(), &status) {
                return Ok(None);
            }
            let resource_version = work.resource_version();
            match self
                .hub
                .write_status(&name, resource_version.as_deref(), &status)
                .await
            {
                Ok(written) => {
                    self.record(ManifestWork {
                        metadata: written.metadata.clone(),
                        spec: Default::default(),
                        status: written.status.clone(),
                    });
                    return Ok(Some(written));
                }
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    tracing::debug!(work = %name, attempt, "status conflict, re-reading");
                    tokio::time::sleep(Duration::from_millis(20 * (attempt as u64 + 1))).await;
                    match self.hub.get_work(&name).await.map_err(Error::Hub)? {
                        Some(w) => fresh = Some(w),
                        None => return Ok(None),
                    }
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(None),
                Err(e) if is_too_large(&e) && budget > MIN_STATUS_BUDGET => {
                    // Remembered, so the next reconciles do not send a refused status again.
                    let budget = (budget / 2).max(MIN_STATUS_BUDGET);
                    self.refused_budgets
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(name.clone(), budget);
                    tracing::warn!(work = %name, error = %e, budget_bytes = budget,
                        "the API server refused the status as too large; writing a smaller one");
                }
                Err(e) => return Err(Error::Hub(e)),
            }
        }
        Err(Error::StatusConflict(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::memory::MemoryHub;
    use kube::api::ObjectMeta;
    use work_api::{ManifestWorkSpec, ManifestWorkStatus};

    fn work(version: &str, generation: i64, manifests: usize, observed: i64) -> ManifestWork {
        let mut spec = ManifestWorkSpec::default();
        spec.workload.manifests = vec![Default::default(); manifests];
        ManifestWork {
            metadata: ObjectMeta {
                name: Some("w".into()),
                resource_version: Some(version.into()),
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            spec,
            status: Some(ManifestWorkStatus {
                conditions: vec![conditions::Condition {
                    type_: "Applied".into(),
                    status: "True".into(),
                    reason: "AppliedManifestWorkComplete".into(),
                    message: String::new(),
                    last_transition_time: Time(Timestamp::UNIX_EPOCH),
                    observed_generation: Some(observed),
                }],
                ..ManifestWorkStatus::default()
            }),
        }
    }

    #[test]
    fn the_own_write_is_kept_without_its_spec_and_laid_over_the_stores() {
        let writer = StatusWriter::new(Arc::new(MemoryHub::new("cluster1")));
        writer.record(work("5", 2, 3, 2));
        let seen = Arc::new(work("4", 2, 3, 1));
        let fresher = writer.fresher(seen.clone());
        assert_eq!(fresher.resource_version().as_deref(), Some("5"));
        assert_eq!(fresher.spec, seen.spec, "the store's spec");
        assert_eq!(fresher.status, work("5", 2, 3, 2).status, "the own status");
        let kept = writer.latest.fresher("w", seen.clone());
        assert!(kept.spec.workload.manifests.is_empty(), "no spec kept");

        // The source changed the spec since the write: the store's copy as it is.
        let newer_spec = Arc::new(work("4", 3, 1, 1));
        assert!(Arc::ptr_eq(
            &writer.fresher(newer_spec.clone()),
            &newer_spec
        ));
        // The store caught up: its copy, and nothing kept.
        let caught_up = Arc::new(work("5", 2, 3, 2));
        assert!(Arc::ptr_eq(&writer.fresher(caught_up.clone()), &caught_up));
        assert!(Arc::ptr_eq(&writer.fresher(seen.clone()), &seen));
    }
}
