//! Works kept in this process, with the API server's answers: a resourceVersion per write, 404
//! for a missing work, 409 for a stale version, finalizer list or UID, and a watch that folds
//! the changes a watcher has not read yet into one event per work. The in-memory hub of tests
//! and the hub behind a message broker (whose source keeps the works; the agent keeps its copy
//! here, as upstream's agent does) both stand on it.
//!
//! A work is kept as the watch store keeps it ([`StoredWork`]: compact JSON text) and decoded
//! when read; the watch events share that text with the store, so a work costs its text once,
//! not a decoded copy (manifests as `serde_json::Value` maps weigh several times their text).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::core::Status;
use kube::runtime::watcher;
use tokio::sync::Notify;
use work_api::{ManifestWork, ManifestWorkStatus};

use super::seam::{WorkEvent, WorkEvents};
use crate::hub::stored_work::StoredWork;

/// Works a watcher takes from its pending changes at a time.
const WATCH_BATCH: usize = 256;

/// What changed of one work since its watcher last read.
enum Change {
    /// Stored anew: the watcher reads the current copy.
    Applied,
    /// Removed: its last copy, for the Delete event.
    Removed(StoredWork),
    /// Removed, then stored anew (another object of the same name): both events.
    Replaced(StoredWork),
}

/// One watcher's unread changes: each work once, in the order it first changed. A burst of
/// changes costs a name each, never a backlog of copies, and a slow watcher never falls behind
/// into a re-list (which, during a burst of thousands of works, would re-list again and again).
#[derive(Default)]
struct Pending {
    order: VecDeque<String>,
    changes: HashMap<String, Change>,
}

/// A watcher's pending changes and its wake-up.
#[derive(Default)]
struct Watcher {
    pending: Mutex<Pending>,
    wake: Notify,
}

impl Watcher {
    fn note(&self, name: &str, change: Change) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let change = match (pending.changes.remove(name), change) {
            (None, change) => {
                pending.order.push_back(name.to_string());
                change
            }
            // Gone and back: the watcher still hears the first one's removal.
            (Some(Change::Removed(old) | Change::Replaced(old)), Change::Applied) => {
                Change::Replaced(old)
            }
            (Some(Change::Replaced(_)), Change::Removed(last)) => Change::Removed(last),
            (Some(_), change) => change,
        };
        pending.changes.insert(name.to_string(), change);
        drop(pending);
        self.wake.notify_one();
    }

    /// Up to [`WATCH_BATCH`] changes, oldest first.
    fn take(&self) -> Vec<(String, Change)> {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        let n = pending.order.len().min(WATCH_BATCH);
        let names: Vec<String> = pending.order.drain(..n).collect();
        let taken = names
            .into_iter()
            .filter_map(|name| {
                let change = pending.changes.remove(&name)?;
                Some((name, change))
            })
            .collect();
        if pending.order.is_empty() {
            // A burst is read: give its room back (a table never shrinks by itself, and a
            // restart's answer or a top-up brings every work at once).
            pending.order.shrink_to(WATCH_BATCH);
            pending.changes.shrink_to(WATCH_BATCH);
        }
        taken
    }
}

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

/// The works by name, and the names of those not named by their UID.
#[derive(Default)]
struct State {
    works: BTreeMap<String, StoredWork>,
    /// UID → name, for the works whose name is not their UID (a source that names works by
    /// UID, as Maestro does, costs nothing here): finds a work by UID without a search.
    named_otherwise: HashMap<String, String>,
}

impl State {
    /// Forgets the UID of the work `name` held, if it was indexed under that name.
    fn unindex(&mut self, name: &str) {
        let uid = self.works.get(name).and_then(|w| w.metadata.uid.as_deref());
        if let Some(uid) = uid
            && self.named_otherwise.get(uid).is_some_and(|n| n == name)
        {
            self.named_otherwise.remove(uid);
        }
    }
}

/// The works, by name, behind a lock, with their watchers.
#[derive(Clone, Default)]
pub struct LocalWorks {
    state: Arc<Mutex<State>>,
    resource_version: Arc<std::sync::atomic::AtomicU64>,
    watchers: Arc<Mutex<Vec<Weak<Watcher>>>>,
}

/// The works under the lock: read them, then commit or remove under the same lock.
pub struct Locked<'a> {
    state: MutexGuard<'a, State>,
    owner: &'a LocalWorks,
}

impl Locked<'_> {
    /// Every work as kept (metadata and text), by name.
    pub fn works(&self) -> &BTreeMap<String, StoredWork> {
        &self.state.works
    }

    /// Work `name`, decoded.
    pub fn get(&self, name: &str) -> Option<ManifestWork> {
        self.state.works.get(name).and_then(decoded)
    }

    /// The name of the work with `uid`, without a search.
    pub fn name_of_uid(&self, uid: &str) -> Option<String> {
        let has = |name: &str| {
            self.state
                .works
                .get(name)
                .is_some_and(|w| w.metadata.uid.as_deref() == Some(uid))
        };
        if has(uid) {
            return Some(uid.to_string());
        }
        self.state
            .named_otherwise
            .get(uid)
            .filter(|name| has(name))
            .cloned()
    }

    /// Every work, decoded, in name order.
    pub fn decoded(&self) -> Vec<ManifestWork> {
        self.state.works.values().filter_map(decoded).collect()
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
                self.state.unindex(&name);
                if let Some(uid) = s.metadata.uid.as_deref().filter(|uid| *uid != name) {
                    self.state
                        .named_otherwise
                        .insert(uid.to_string(), name.clone());
                }
                self.state.works.insert(name.clone(), s);
                self.owner.tell(&name, || Change::Applied);
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
        self.state.unindex(name);
        let s = self.state.works.remove(name)?;
        let work = decoded(&s);
        self.owner.tell(name, || Change::Removed(s.clone()));
        work
    }
}

impl LocalWorks {
    /// The works, locked.
    pub fn lock(&self) -> Locked<'_> {
        Locked {
            state: self.state.lock().unwrap_or_else(PoisonError::into_inner),
            owner: self,
        }
    }

    /// Work `name` now.
    pub fn get(&self, name: &str) -> Option<ManifestWork> {
        self.lock().get(name)
    }

    /// Notes a change of work `name` for every watcher (dropping those that are gone).
    fn tell(&self, name: &str, change: impl Fn() -> Change) {
        let mut watchers = self.watchers.lock().unwrap_or_else(PoisonError::into_inner);
        watchers.retain(|w| match w.upgrade() {
            Some(watcher) => {
                watcher.note(name, change());
                true
            }
            None => false,
        });
    }

    /// The events for `changes`, read from the works now.
    fn events_of(&self, changes: Vec<(String, Change)>) -> Vec<WorkEvent> {
        let locked = self.lock();
        let mut events = Vec::with_capacity(changes.len());
        for (name, change) in changes {
            let current = || {
                locked
                    .state
                    .works
                    .get(&name)
                    .cloned()
                    .map(watcher::Event::Apply)
            };
            match change {
                Change::Applied => events.extend(current()),
                Change::Removed(last) => events.push(watcher::Event::Delete(last)),
                Change::Replaced(old) => {
                    events.push(watcher::Event::Delete(old));
                    events.extend(current());
                }
            }
        }
        events
    }

    /// The full list as a watch starts it.
    fn list(&self) -> Vec<WorkEvent> {
        let locked = self.lock();
        let mut events = vec![watcher::Event::Init];
        events.extend(
            locked
                .state
                .works
                .values()
                .cloned()
                .map(watcher::Event::InitApply),
        );
        events.push(watcher::Event::InitDone);
        events
    }

    /// A watch of the works: the full list, then the changes, one event per work changed since
    /// the watcher last read (two when it was removed and stored anew).
    pub fn watch(&self) -> WorkEvents {
        // Registered before listing: a change made in between is in both, which a watch allows.
        let watcher = Arc::new(Watcher::default());
        self.watchers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&watcher));
        let initial = futures::stream::iter(self.list());
        let rest =
            futures::stream::unfold((self.clone(), watcher), |(works, watcher)| async move {
                loop {
                    let changes = watcher.take();
                    if changes.is_empty() {
                        // A change noted since `take` left a permit: no wake-up is lost.
                        watcher.wake.notified().await;
                        continue;
                    }
                    let events = works.events_of(changes);
                    if !events.is_empty() {
                        return Some((events, (works, watcher)));
                    }
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
        match self.lock().state.works.get(name) {
            None => Err(not_found(name)),
            Some(w) if w.metadata.uid.as_deref() != Some(uid) => Err(conflict(format!(
                "the UID of manifestwork {name} is not {uid}"
            ))),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn work(name: &str, uid: &str, generation: i64) -> ManifestWork {
        ManifestWork {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("c1".into()),
                uid: Some(uid.into()),
                generation: Some(generation),
                ..ObjectMeta::default()
            },
            ..ManifestWork::default()
        }
    }

    /// What one event says: kind, name, uid, generation.
    #[test]
    fn a_work_is_found_by_uid_under_its_name_or_another() {
        let works = LocalWorks::default();
        let mut locked = works.lock();
        locked.commit(work("u1", "u1", 1));
        locked.commit(work("w2", "u2", 1));
        assert_eq!(locked.name_of_uid("u1"), Some("u1".into()));
        assert_eq!(locked.name_of_uid("u2"), Some("w2".into()));
        assert_eq!(locked.name_of_uid("u3"), None);
        assert!(
            locked.state.named_otherwise.len() == 1,
            "a work named by its UID is not indexed"
        );
        // Renamed: the old name goes, the new one is found.
        locked.remove("w2");
        locked.commit(work("w2-new", "u2", 2));
        assert_eq!(locked.name_of_uid("u2"), Some("w2-new".into()));
        // A name taken over by another work: the first one's UID is no longer found there.
        locked.commit(work("w2-new", "u4", 1));
        assert_eq!(locked.name_of_uid("u2"), None);
        assert_eq!(locked.name_of_uid("u4"), Some("w2-new".into()));
        locked.remove("w2-new");
        locked.remove("u1");
        assert_eq!(locked.name_of_uid("u4"), None);
        assert_eq!(locked.name_of_uid("u1"), None);
        assert!(locked.state.named_otherwise.is_empty());
    }

    fn describe(event: &WorkEvent) -> (&'static str, String, String, i64) {
        let (kind, s) = match event {
            watcher::Event::Apply(s) => ("apply", s),
            watcher::Event::Delete(s) => ("delete", s),
            watcher::Event::InitApply(s) => ("init", s),
            watcher::Event::Init => return ("list", String::new(), String::new(), 0),
            watcher::Event::InitDone => return ("listed", String::new(), String::new(), 0),
        };
        (
            kind,
            s.metadata.name.clone().unwrap_or_default(),
            s.metadata.uid.clone().unwrap_or_default(),
            s.metadata.generation.unwrap_or(0),
        )
    }

    /// The events the watch has ready now.
    async fn ready(watch: &mut WorkEvents) -> Vec<(&'static str, String, String, i64)> {
        let mut seen = Vec::new();
        while let Ok(Some(Ok(event))) =
            tokio::time::timeout(std::time::Duration::from_millis(50), watch.next()).await
        {
            seen.push(describe(&event));
        }
        seen
    }

    #[test]
    fn a_watcher_gives_a_bursts_room_back_once_it_has_read_it() {
        let watcher = Watcher::default();
        for i in 0..10_000 {
            watcher.note(&format!("w{i}"), Change::Applied);
        }
        let mut read = 0;
        loop {
            let taken = watcher.take();
            if taken.is_empty() {
                break;
            }
            read += taken.len();
        }
        assert_eq!(read, 10_000);
        let pending = watcher
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert!(
            pending.changes.capacity() < 1_000 && pending.order.capacity() < 1_000,
            "room for {} changes and {} names kept",
            pending.changes.capacity(),
            pending.order.capacity()
        );
    }

    #[tokio::test]
    async fn a_burst_reaches_a_slow_watcher_folded_and_never_as_a_re_list() {
        let works = LocalWorks::default();
        let mut watch = works.watch();
        assert_eq!(ready(&mut watch).await.len(), 2, "an empty list first");
        // Five versions of each of 1,000 works while the watcher reads nothing.
        for generation in 1..=5 {
            for i in 0..1000 {
                works
                    .lock()
                    .commit(work(&format!("w{i}"), &format!("u{i}"), generation));
            }
        }
        let seen = ready(&mut watch).await;
        assert_eq!(seen.len(), 1000, "one event per work");
        assert!(
            seen.iter()
                .all(|(kind, _, _, generation)| *kind == "apply" && *generation == 5),
            "each the latest version, none a re-list"
        );
    }

    #[tokio::test]
    async fn removals_and_a_new_object_of_the_same_name_are_each_heard() {
        let works = LocalWorks::default();
        let mut watch = works.watch();
        ready(&mut watch).await;
        works.lock().commit(work("a", "u1", 1));
        works.lock().commit(work("b", "u2", 1));
        ready(&mut watch).await;

        works.lock().remove("a");
        works.lock().remove("b");
        works.lock().commit(work("b", "u3", 1));
        let seen = ready(&mut watch).await;
        assert_eq!(
            seen,
            [
                ("delete", "a".into(), "u1".into(), 1),
                ("delete", "b".into(), "u2".into(), 1),
                ("apply", "b".into(), "u3".into(), 1),
            ]
        );
        // Stored and removed before the watcher read: its removal, with its last copy.
        works.lock().commit(work("c", "u4", 1));
        works.lock().remove("c");
        assert_eq!(
            ready(&mut watch).await,
            [("delete", "c".into(), "u4".into(), 1)]
        );
    }

    #[tokio::test]
    async fn a_dropped_watch_is_forgotten_and_a_new_one_lists_first() {
        let works = LocalWorks::default();
        works.lock().commit(work("a", "u1", 1));
        drop(works.watch());
        works.lock().commit(work("a", "u1", 2));
        assert!(works.watchers.lock().expect("lock").is_empty());
        let mut watch = works.watch();
        assert_eq!(
            ready(&mut watch).await,
            [
                ("list", String::new(), String::new(), 0),
                ("init", "a".into(), "u1".into(), 2),
                ("listed", String::new(), String::new(), 0),
            ]
        );
    }
}
