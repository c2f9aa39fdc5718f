//! Works kept in this process, with the API server's answers: a resourceVersion per write, 404
//! for a missing work, 409 for a stale version, finalizer list or UID, and a watch that re-lists
//! after a gap. The in-memory hub of tests and the hub behind a message broker (whose source keeps
//! the works; the agent keeps its copy here, as upstream's agent does) both stand on it.
//!
//! A work is kept as the watch store keeps it ([`StoredWork`]: compact JSON text) and decoded
//! when read; the watch events share that text with the store, so a work costs its text once,
//! not a decoded copy (manifests as `serde_json::Value` maps weigh several times their text).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::Status;
use kube::runtime::watcher;
use tokio::sync::broadcast;
use work_api::{ManifestWork, ManifestWorkStatus};

use super::seam::{WorkEvent, WorkEvents};
use crate::hub::stored_work::StoredWork;

/// Changes a watcher may fall behind by before it re-lists. The channel keeps the last this many
/// events (each a work's text) after every watcher has read them, so it is small; a watcher
/// that falls further behind re-lists, which costs no copy of the works' text.
const WATCH_BUFFER: usize = 64;

/// An API error as the Kubernetes API server words it.
pub fn api_error(code: u16, reason: &str, message: String) -> kube::Error {
    kube::Error::Api(Box::new(Status::failure(&message, reason).with_code(code)))
}

/// 404 for work `name`.
pub fn not_found(name: &str) -> kube::Error {
    api_error(
        404,
        "NotFound",
        format!("manifestworks \"{name}\" not found"),
    )
}

/// 409 with `message`.
pub fn conflict(message: String) -> kube::Error {
    api_error(409, "Conflict", message)
}

fn stored(work: &ManifestWork) -> Option<StoredWork> {
    serde_json::to_value(work)
        .ok()
        .and_then(StoredWork::from_value)
}

/// The work `stored` holds; it was encoded here, so it decodes (logged if it ever does not).
fn decoded(stored: &StoredWork) -> Option<ManifestWork> {
    stored
        .decode()
        .inspect_err(|e| {
            tracing::error!(work = ?stored.metadata.name, error = %e, "a kept work does not decode")
        })
        .ok()
}

/// What a finalizer write did.
#[derive(Debug)]
pub struct FinalizersWritten {
    /// The work as written.
    pub work: ManifestWork,
    /// The work was being deleted and has no finalizer left: it is gone now.
    pub removed: bool,
}

/// What a deletion did.
#[derive(Debug)]
pub enum Deletion {
    /// The work had no finalizers: it is gone.
    Removed(ManifestWork),
    /// The work waits for its finalizers (marked for deletion now or before).
    Marked(ManifestWork),
}

/// The works, by name, behind a lock, with their watchers.
#[derive(Clone)]
pub struct LocalWorks {
    state: Arc<Mutex<BTreeMap<String, StoredWork>>>,
    resource_version: Arc<std::sync::atomic::AtomicU64>,
    changes: broadcast::Sender<WorkEvent>,
}

impl Default for LocalWorks {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            resource_version: Arc::default(),
            changes: broadcast::channel(WATCH_BUFFER).0,
        }
    }
}

/// The works under the lock: read them, then commit or remove under the same lock.
pub struct Locked<'a> {
    works: MutexGuard<'a, BTreeMap<String, StoredWork>>,
    owner: &'a LocalWorks,
}

impl Locked<'_> {
    /// Every work as kept (metadata and text), by name.
    pub fn works(&self) -> &BTreeMap<String, StoredWork> {
        &self.works
    }

    /// Work `name`, decoded.
    pub fn get(&self, name: &str) -> Option<ManifestWork> {
        self.works.get(name).and_then(decoded)
    }

    /// Every work, decoded, in name order.
    pub fn decoded(&self) -> Vec<ManifestWork> {
        self.works.values().filter_map(decoded).collect()
    }

    /// Stores `work` at a new resourceVersion and tells the watchers; returns the work as stored
    /// (as an API server's answer, times to the second).
    pub fn commit(&mut self, mut work: ManifestWork) -> ManifestWork {
        let rv = 1 + self
            .owner
            .resource_version
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        work.metadata.resource_version = Some(rv.to_string());
        let name = work.metadata.name.clone().unwrap_or_default();
        match stored(&work) {
            Some(s) => {
                if let Some(as_stored) = decoded(&s) {
                    work = as_stored;
                }
                self.works.insert(name, s.clone());
                let _ = self.owner.changes.send(watcher::Event::Apply(s));
            }
            None => {
                // A work that does not encode cannot be kept; the one before it goes too, so
                // that nothing acts on a version the hub has replaced.
                tracing::error!(work = %name, "the work cannot be encoded; dropped");
                self.remove(&name);
            }
        }
        work
    }

    /// Removes work `name` and tells the watchers; returns it.
    pub fn remove(&mut self, name: &str) -> Option<ManifestWork> {
        let s = self.works.remove(name)?;
        let work = decoded(&s);
        let _ = self.owner.changes.send(watcher::Event::Delete(s));
        work
    }
}

impl LocalWorks {
    /// The works, locked.
    pub fn lock(&self) -> Locked<'_> {
        Locked {
            works: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            owner: self,
        }
    }

    /// Work `name` now.
    pub fn get(&self, name: &str) -> Option<ManifestWork> {
        self.lock().get(name)
    }

    /// The full list as a watch starts it.
    fn list(&self) -> Vec<WorkEvent> {
        let locked = self.lock();
        let mut events = vec![watcher::Event::Init];
        events.extend(
            locked
                .works
                .values()
                .cloned()
                .map(watcher::Event::InitApply),
        );
        events.push(watcher::Event::InitDone);
        events
    }

    /// A watch of the works: the full list, then each change; a full list again after falling
    /// behind.
    pub fn watch(&self) -> WorkEvents {
        // Subscribed before listing: a change made in between is in both, which a watch allows.
        let changes = self.changes.subscribe();
        let initial = futures::stream::iter(self.list());
        let rest =
            futures::stream::unfold((self.clone(), changes), |(works, mut changes)| async move {
                match changes.recv().await {
                    Ok(event) => Some((vec![event], (works, changes))),
                    // Fell behind: start over with a full list, as a watch does after a gap.
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let changes = works.changes.subscribe();
                        let list = works.list();
                        Some((list, (works, changes)))
                    }
                    Err(broadcast::error::RecvError::Closed) => None,
                }
            })
            .flat_map(futures::stream::iter);
        initial.chain(rest).map(Ok).boxed()
    }

    /// Replaces the status of work `name` if it is still at `resource_version`, once `deliver`
    /// accepted the work with its new status (nothing changes when it refuses).
    pub fn write_status(
        &self,
        name: &str,
        resource_version: Option<&str>,
        status: &ManifestWorkStatus,
        deliver: impl FnOnce(&ManifestWork) -> Result<(), kube::Error>,
    ) -> Result<ManifestWork, kube::Error> {
        let mut locked = self.lock();
        match locked.get(name) {
            None => Err(not_found(name)),
            Some(current)
                if resource_version
                    .is_some_and(|rv| Some(rv) != current.metadata.resource_version.as_deref()) =>
            {
                Err(conflict(format!("manifestwork {name} was modified")))
            }
            Some(mut current) => {
                current.status = Some(status.clone());
                deliver(&current)?;
                Ok(locked.commit(current))
            }
        }
    }

    /// Replaces the finalizers of `work` if its list is still the one `work` has; a work being
    /// deleted that is left without finalizers is removed once `deliver_removal` accepted it
    /// (nothing changes when it refuses).
    pub fn set_finalizers(
        &self,
        work: &ManifestWork,
        finalizers: Vec<String>,
        deliver_removal: impl FnOnce(&ManifestWork) -> Result<(), kube::Error>,
    ) -> Result<FinalizersWritten, kube::Error> {
        let name = work.metadata.name.clone().unwrap_or_default();
        let mut locked = self.lock();
        match locked.get(&name) {
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
                let removed = deleting && empty;
                if removed {
                    deliver_removal(&current)?;
                }
                let written = locked.commit(current);
                if removed {
                    locked.remove(&name);
                }
                Ok(FinalizersWritten {
                    work: written,
                    removed,
                })
            }
        }
    }

    /// Deletes work `name` as the API server does: gone at once without finalizers (once
    /// `deliver_removal` accepted it), otherwise marked with a deletionTimestamp until they are
    /// removed. `None` when there is no such work.
    pub fn delete(
        &self,
        name: &str,
        deliver_removal: impl FnOnce(&ManifestWork) -> Result<(), kube::Error>,
    ) -> Result<Option<Deletion>, kube::Error> {
        let mut locked = self.lock();
        let Some(mut work) = locked.get(name) else {
            return Ok(None);
        };
        if work.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) {
            deliver_removal(&work)?;
            return Ok(locked.remove(name).map(Deletion::Removed));
        }
        if work.metadata.deletion_timestamp.is_none() {
            work.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
            work = locked.commit(work);
        }
        Ok(Some(Deletion::Marked(work)))
    }

    /// Checks that work `name` is the object `uid`.
    pub fn check_uid(&self, name: &str, uid: &str) -> Result<(), kube::Error> {
        match self.lock().works.get(name) {
            None => Err(not_found(name)),
            Some(w) if w.metadata.uid.as_deref() != Some(uid) => Err(conflict(format!(
                "the UID of manifestwork {name} is not {uid}"
            ))),
            Some(_) => Ok(()),
        }
    }
}
