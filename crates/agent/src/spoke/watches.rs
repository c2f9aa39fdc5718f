//! The live objects, from the watch cache: one label-filtered watch and its store
//! ([`ObjectStore`]) per resource type in use on the spoke, started on demand, and an index from
//! objects to the works that apply them, so an event on an object re-queues exactly those
//! works. Reconciles read the live objects from the stores (no GET); a store that has not
//! finished its initial list says "unknown", and the caller reads the object instead.
//!
//! An object a work must see without writing it (a `ReportOnly` manifest, or one the work may take
//! over only if identical) carries no label of the agent's: it gets a watch of its own, by name
//! ([`Watches::watch_object`]), kept while a work asks for it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use prometheus_client::metrics::gauge::Gauge;
use serde_json::Value;

use applier::ResolvedResource;

use crate::spoke::live_object::{LiveObject, SharedResource, object_value};
use crate::spoke::object_store::ObjectStore;
use crate::spoke::triggers::Triggers;

/// Identifies an object: group, resource (plural), namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// API group.
    pub group: String,
    /// Resource (plural).
    pub resource: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// An object as the index keeps it: `group/resource/namespace/name` in one text, shared by both
/// directions. None of the four holds a `/` (API groups and resource names are DNS names, and
/// so are namespaces; object names are path segments), so the text names one object.
type ObjectId = Arc<str>;

fn object_id(key: &ObjectKey) -> String {
    format!(
        "{}/{}/{}/{}",
        key.group, key.resource, key.namespace, key.name
    )
}

/// The start of the ids of a resource type's objects.
fn type_prefix(group: &str, resource: &str) -> String {
    format!("{group}/{resource}/")
}

/// Objects → works. Pure data; the watch tasks read it. Each object and each work name is held
/// once and shared by both directions, an object as one text (an [`ObjectKey`] of four strings
/// cost some 200 bytes), and an object's works are a sorted list, not a tree: with thousands of
/// works of one object each, a key per direction and a B-tree node per object were most of the
/// index's bytes.
#[derive(Default, Debug)]
pub struct ResourceIndex {
    /// Each indexed object's works, sorted, without repeats.
    by_object: HashMap<ObjectId, Vec<Arc<str>>>,
    by_work: HashMap<Arc<str>, Vec<ObjectId>>,
    /// Indexed objects per resource type (group, resource).
    per_type: HashMap<(String, String), usize>,
}

impl ResourceIndex {
    /// Records the objects a work uses now (replacing what it used before).
    pub fn set_work(&mut self, work: &str, keys: Vec<ObjectKey>) {
        self.remove_work(work);
        let name: Arc<str> = Arc::from(work);
        let mut kept: Vec<ObjectId> = Vec::with_capacity(keys.len());
        for key in keys {
            let id = object_id(&key);
            if !kept.iter().any(|k| **k == *id) {
                kept.push(self.link(&name, &key, id));
            }
        }
        self.by_work.insert(name, kept);
    }

    /// Adds `work` to the works of `key` (whose id is `id`); the index's shared copy of the id.
    fn link(&mut self, work: &Arc<str>, key: &ObjectKey, id: String) -> ObjectId {
        let shared = match self.by_object.get_key_value(id.as_str()) {
            Some((shared, _)) => shared.clone(),
            None => {
                *self
                    .per_type
                    .entry((key.group.clone(), key.resource.clone()))
                    .or_default() += 1;
                let shared: ObjectId = Arc::from(id);
                self.by_object.insert(shared.clone(), Vec::new());
                shared
            }
        };
        if let Some(works) = self.by_object.get_mut(&*shared)
            && let Err(at) = works.binary_search(work)
        {
            works.insert(at, work.clone());
        }
        shared
    }

    /// Whether any indexed object is of this resource type.
    pub fn type_in_use(&self, group: &str, resource: &str) -> bool {
        self.per_type
            .contains_key(&(group.to_string(), resource.to_string()))
    }

    /// Adds one object to those a work uses (kept until the next [`ResourceIndex::set_work`]).
    pub fn add(&mut self, work: &str, key: ObjectKey) {
        let id = object_id(&key);
        let name = match self.by_work.get_key_value(work) {
            Some((_, ids)) if ids.iter().any(|k| **k == *id) => return,
            Some((name, _)) => name.clone(),
            None => Arc::from(work),
        };
        let shared = self.link(&name, &key, id);
        self.by_work.entry(name).or_default().push(shared);
    }

    /// Forgets a work.
    pub fn remove_work(&mut self, work: &str) {
        for id in self.by_work.remove(work).unwrap_or_default() {
            let Some(works) = self.by_object.get_mut(&*id) else {
                continue;
            };
            if let Ok(at) = works.binary_search_by(|w| (**w).cmp(work)) {
                works.remove(at);
            }
            if works.is_empty() {
                self.by_object.remove(&*id);
                let mut parts = id.splitn(3, '/');
                let type_key = (
                    parts.next().unwrap_or_default().to_string(),
                    parts.next().unwrap_or_default().to_string(),
                );
                if let Some(count) = self.per_type.get_mut(&type_key) {
                    *count -= 1;
                    if *count == 0 {
                        self.per_type.remove(&type_key);
                    }
                }
            }
        }
    }

    /// Number of indexed objects.
    pub fn object_count(&self) -> usize {
        self.by_object.len()
    }

    /// The works using an object.
    pub fn works_of(&self, key: &ObjectKey) -> Vec<String> {
        self.by_object
            .get(object_id(key).as_str())
            .map(|w| w.iter().map(|w| w.to_string()).collect())
            .unwrap_or_default()
    }

    /// The works that use any object of a resource type, each once.
    pub fn works_of_type(&self, group: &str, resource: &str) -> Vec<String> {
        if !self.type_in_use(group, resource) {
            return Vec::new();
        }
        let prefix = type_prefix(group, resource);
        let works: BTreeSet<&str> = self
            .by_object
            .iter()
            .filter(|(id, _)| id.starts_with(&prefix))
            .flat_map(|(_, works)| works.iter().map(|w| &**w))
            .collect();
        works.into_iter().map(str::to_string).collect()
    }
}

/// What the watch cache says about an object.
#[derive(Clone, Debug, PartialEq)]
pub enum Cached {
    /// No synced store for its type (not watched, or the initial list is not done): read it.
    Unknown,
    /// The store is synced and does not have it.
    Absent,
    /// The object as last seen (with its `apiVersion` and `kind`).
    Present(Value),
}

impl Cached {
    /// Absence turned into `Unknown` (so the applier asks the API server): for a decision that
    /// must not rest on the store being up to date, e.g. skipping the deletion of an object the
    /// store has not seen yet.
    pub fn doubting_absence(self) -> Self {
        match self {
            Cached::Absent => Cached::Unknown,
            other => other,
        }
    }

    /// As the applier takes it: `None` when unknown (it reads), else the object or its absence.
    pub fn hint(&self) -> Option<Option<&Value>> {
        match self {
            Cached::Unknown => None,
            Cached::Absent => Some(None),
            Cached::Present(object) => Some(Some(object)),
        }
    }
}

/// The watch and store of one resource type.
struct TypeWatch {
    handle: tokio::task::JoinHandle<()>,
    store: ObjectStore,
    resource: SharedResource,
    /// True once the store holds the initial list.
    synced: tokio::sync::watch::Receiver<bool>,
}

/// The watch and store of one object the agent does not label, with the works that ask for it.
struct ObjectWatch {
    handle: tokio::task::JoinHandle<()>,
    store: ObjectStore,
    resource: SharedResource,
    synced: tokio::sync::watch::Receiver<bool>,
    works: BTreeSet<Arc<str>>,
}

/// How long a reconcile waits for a new store's initial list before it reads the object
/// itself: a list is one request for all objects of the type, a read one per object.
const SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Which works a watch's events wake after a (re-)list: every work using its type, or only the
/// works of its one object.
#[derive(Clone, Debug)]
enum Scope {
    Type,
    Object(ObjectKey),
}

/// Starts watches on demand, keeps their stores, and forwards events as work names to re-queue.
pub struct Watches {
    spoke: kube::Client,
    label_selector: String,
    index: Arc<Mutex<ResourceIndex>>,
    started: Mutex<HashMap<(String, String), TypeWatch>>,
    objects: Mutex<HashMap<ObjectKey, ObjectWatch>>,
    type_watches: std::sync::atomic::AtomicUsize,
    object_watches: std::sync::atomic::AtomicUsize,
    trigger: Triggers,
    watches_gauge: Gauge,
    index_gauge: Gauge,
}

fn set_gauge(gauge: &Gauge, n: usize) {
    gauge.set(i64::try_from(n).unwrap_or(i64::MAX));
}

impl Watches {
    /// Watches objects labelled `label_selector`; work names to re-queue go to `trigger`.
    pub fn new(spoke: kube::Client, label_selector: String, trigger: Triggers) -> Self {
        Self {
            spoke,
            label_selector,
            index: Arc::default(),
            started: Mutex::default(),
            objects: Mutex::default(),
            type_watches: Default::default(),
            object_watches: Default::default(),
            trigger,
            watches_gauge: Gauge::default(),
            index_gauge: Gauge::default(),
        }
    }

    /// Reports the number of open watches and of indexed objects in these gauges.
    pub fn with_size_gauges(mut self, watches: Gauge, index_objects: Gauge) -> Self {
        self.watches_gauge = watches;
        self.index_gauge = index_objects;
        self
    }

    /// Records which objects a work uses; stops the watches no work needs any more.
    pub fn set_work(&self, work: &str, keys: Vec<ObjectKey>) {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        index.set_work(work, keys);
        set_gauge(&self.index_gauge, index.object_count());
        self.stop_unused(&index);
    }

    /// Stops (and drops the store of) every watch whose type no indexed object has.
    fn stop_unused(&self, index: &ResourceIndex) {
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        started.retain(|(group, resource), watch| {
            let used = index.type_in_use(group, resource);
            if !used {
                tracing::debug!(group = %group, resource = %resource, "stopping watch: no work uses the type");
                watch.handle.abort();
            }
            used
        });
        self.count_type_watches(started.len());
    }

    /// Records one more object a work uses, before it is written: an event on it between the
    /// write and the end of the reconcile then still wakes the work.
    pub fn add(&self, work: &str, key: ObjectKey) {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        index.add(work, key);
        set_gauge(&self.index_gauge, index.object_count());
    }

    /// Forgets a work; stops the watches no work needs any more.
    pub fn remove_work(&self, work: &str) {
        self.keep_object_watches(work, &[]);
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        index.remove_work(work);
        set_gauge(&self.index_gauge, index.object_count());
        self.stop_unused(&index);
    }

    /// Watches one object by name (with no label selector), for `work`: its events wake the
    /// works indexed for it, as the type watches' do. Kept until no work keeps it
    /// ([`Watches::keep_object_watches`]).
    pub fn watch_object(
        &self,
        work: &str,
        resource: &ResolvedResource,
        namespace: &str,
        name: &str,
    ) {
        let key = object_key(resource, namespace, name);
        let namespace = key.namespace.as_str();
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(watch) = objects.get_mut(&key)
            && !watch.handle.is_finished()
        {
            watch.works.insert(Arc::from(work));
            return;
        }
        let api_resource = SharedResource::new(resource.api_resource());
        let api: Api<LiveObject> = if namespace.is_empty() {
            Api::all_with(self.spoke.clone(), &api_resource)
        } else {
            Api::namespaced_with(self.spoke.clone(), namespace, &api_resource)
        };
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let store = ObjectStore::default();
        let writer = store.clone();
        let (ready, synced) = tokio::sync::watch::channel(false);
        let index = self.index.clone();
        let trigger = self.trigger.clone();
        let scope = Scope::Object(key.clone());
        let (group, plural) = (key.group.clone(), key.resource.clone());
        tracing::debug!(group = %group, resource = %plural, namespace = %namespace, name = %name, "starting an object watch");
        let handle = tokio::spawn(async move {
            let events = watcher::watcher(api, config).default_backoff();
            forward_events(events, writer, ready, index, trigger, group, plural, scope).await;
        });
        objects.insert(
            key,
            ObjectWatch {
                handle,
                store,
                resource: api_resource,
                synced,
                works: BTreeSet::from([Arc::from(work)]),
            },
        );
        self.count_watches(objects.len());
    }

    /// Keeps, of the object watches `work` asked for, those of `keys`; stops every object watch
    /// no work asks for any more.
    pub fn keep_object_watches(&self, work: &str, keys: &[ObjectKey]) {
        let mut objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        if objects.is_empty() {
            return;
        }
        objects.retain(|key, watch| {
            if !keys.contains(key) {
                watch.works.remove(work);
            }
            let used = !watch.works.is_empty();
            if !used {
                tracing::debug!(resource = %key.resource, namespace = %key.namespace, name = %key.name, "stopping an object watch: no work asks for it");
                watch.handle.abort();
            }
            used
        });
        self.count_watches(objects.len());
    }

    /// Sets the watches gauge: the type watches and the object watches.
    fn count_watches(&self, objects: usize) {
        use std::sync::atomic::Ordering;
        self.object_watches.store(objects, Ordering::Relaxed);
        let types = self.type_watches.load(Ordering::Relaxed);
        set_gauge(&self.watches_gauge, types + objects);
    }

    /// Sets the watches gauge after the type watches changed.
    fn count_type_watches(&self, types: usize) {
        use std::sync::atomic::Ordering;
        self.type_watches.store(types, Ordering::Relaxed);
        let objects = self.object_watches.load(Ordering::Relaxed);
        set_gauge(&self.watches_gauge, types + objects);
    }

    /// The object as its own watch has it: `Unknown` while no watch of it is synced.
    pub fn object_cached(
        &self,
        resource: &ResolvedResource,
        namespace: &str,
        name: &str,
    ) -> Cached {
        let key = object_key(resource, namespace, name);
        let objects = self.objects.lock().unwrap_or_else(PoisonError::into_inner);
        match objects.get(&key) {
            Some(w) => look_up(&w.store, &w.resource, &w.synced, &w.handle, &key),
            None => Cached::Unknown,
        }
    }

    /// [`Watches::object_cached`], after waiting (up to 10 s) for the object watch's first list.
    pub async fn object_cached_when_synced(
        &self,
        resource: &ResolvedResource,
        namespace: &str,
        name: &str,
    ) -> Cached {
        let synced = synced_flag(&self.objects, &object_key(resource, namespace, name), |w| {
            &w.synced
        });
        wait_synced(synced).await;
        self.object_cached(resource, namespace, name)
    }

    /// Number of object watches running.
    pub fn object_watch_count(&self) -> usize {
        self.objects
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Number of watches running (one per group+resource).
    pub fn watch_count(&self) -> usize {
        self.started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The object as the watch cache has it.
    pub fn cached(&self, resource: &ResolvedResource, namespace: &str, name: &str) -> Cached {
        let started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        match started.get(&(resource.group.clone(), resource.plural.clone())) {
            Some(w) => look_up(
                &w.store,
                &w.resource,
                &w.synced,
                &w.handle,
                &object_key(resource, namespace, name),
            ),
            None => Cached::Unknown,
        }
    }

    /// [`Watches::cached`], after waiting (up to 10 s) for the initial list of the type's store.
    pub async fn cached_when_synced(
        &self,
        resource: &ResolvedResource,
        namespace: &str,
        name: &str,
    ) -> Cached {
        let key = (resource.group.clone(), resource.plural.clone());
        wait_synced(synced_flag(&self.started, &key, |w| &w.synced)).await;
        self.cached(resource, namespace, name)
    }

    /// Makes sure a watch (and its store) runs for this resource type.
    pub fn ensure(&self, resource: &ResolvedResource) {
        let key = (resource.group.clone(), resource.plural.clone());
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        if started.get(&key).is_some_and(|w| !w.handle.is_finished()) {
            return;
        }
        let api_resource = SharedResource::new(resource.api_resource());
        let api: Api<LiveObject> = Api::all_with(self.spoke.clone(), &api_resource);
        let config = watcher::Config::default().labels(&self.label_selector);
        let store = ObjectStore::default();
        let writer = store.clone();
        let (ready, synced) = tokio::sync::watch::channel(false);
        let index = self.index.clone();
        let trigger = self.trigger.clone();
        let (group, plural) = key.clone();
        tracing::debug!(group = %group, resource = %plural, "starting watch");
        let handle = tokio::spawn(async move {
            let events = watcher::watcher(api, config).default_backoff();
            forward_events(
                events,
                writer,
                ready,
                index,
                trigger,
                group,
                plural,
                Scope::Type,
            )
            .await;
        });
        started.insert(
            key,
            TypeWatch {
                handle,
                store,
                resource: api_resource,
                synced,
            },
        );
        self.count_type_watches(started.len());
    }
}

/// The key of an object of `resource` (without a namespace when the resource has none).
fn object_key(resource: &ResolvedResource, namespace: &str, name: &str) -> ObjectKey {
    ObjectKey {
        group: resource.group.clone(),
        resource: resource.plural.clone(),
        namespace: if resource.namespaced {
            namespace.to_string()
        } else {
            String::new()
        },
        name: name.to_string(),
    }
}

/// What a store says of the object `key`: `Unknown` until its watch has listed, or once the
/// watch has ended.
fn look_up(
    store: &ObjectStore,
    resource: &SharedResource,
    synced: &tokio::sync::watch::Receiver<bool>,
    handle: &tokio::task::JoinHandle<()>,
    key: &ObjectKey,
) -> Cached {
    if !*synced.borrow() || handle.is_finished() {
        return Cached::Unknown;
    }
    match store.get(&key.namespace, &key.name) {
        None => Cached::Absent,
        Some(object) => match object_value(&object, resource) {
            Some(value) => Cached::Present(value),
            None => Cached::Unknown,
        },
    }
}

/// The "initial list done" flag of the watch under `key` in `watches`, when one runs.
fn synced_flag<K: std::hash::Hash + Eq, W>(
    watches: &Mutex<HashMap<K, W>>,
    key: &K,
    synced: impl Fn(&W) -> &tokio::sync::watch::Receiver<bool>,
) -> Option<tokio::sync::watch::Receiver<bool>> {
    let watches = watches.lock().unwrap_or_else(PoisonError::into_inner);
    watches.get(key).map(|w| synced(w).clone())
}

/// Waits (up to [`SYNC_WAIT`]) until a store has its first list.
async fn wait_synced(synced: Option<tokio::sync::watch::Receiver<bool>>) {
    if let Some(mut synced) = synced {
        let _ = tokio::time::timeout(SYNC_WAIT, synced.wait_for(|s| *s)).await;
    }
}

/// Puts the events of one type's watch into its store and turns them into work names to
/// re-queue. An object's own event wakes the works that use it. A (re-)list is different: the
/// store takes the listed objects only when the list is done, and an object deleted while the
/// watch was down has no event at all. So once a list is done every work using the type is
/// woken, and not before (a reconcile woken by a listed object would read the store's older
/// copy). An object watch's list wakes only the works of its object.
#[allow(clippy::too_many_arguments)]
async fn forward_events<S>(
    events: S,
    store: ObjectStore,
    ready: tokio::sync::watch::Sender<bool>,
    index: Arc<Mutex<ResourceIndex>>,
    trigger: Triggers,
    group: String,
    plural: String,
    scope: Scope,
) where
    S: futures::Stream<Item = Result<Event<LiveObject>, watcher::Error>>,
{
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        if let Ok(event) = &event {
            store.apply(event);
        }
        let works = match event {
            Ok(Event::Apply(o) | Event::Delete(o)) => {
                let key = ObjectKey {
                    group: group.clone(),
                    resource: plural.clone(),
                    namespace: o.metadata.namespace.clone().unwrap_or_default(),
                    name: o.metadata.name.clone().unwrap_or_default(),
                };
                index
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .works_of(&key)
            }
            Ok(Event::InitDone) => {
                ready.send_replace(true);
                let index = index.lock().unwrap_or_else(PoisonError::into_inner);
                match &scope {
                    Scope::Type => index.works_of_type(&group, &plural),
                    Scope::Object(key) => index.works_of(key),
                }
            }
            Ok(Event::Init | Event::InitApply(_)) => continue,
            Err(e) => {
                tracing::warn!(group = %group, resource = %plural, error = %e, "watch error");
                continue;
            }
        };
        for work in works {
            if !trigger.send(work) {
                return;
            }
        }
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        abort_all(&self.started, |w| &w.handle);
        abort_all(&self.objects, |w| &w.handle);
    }
}

/// Stops every watch of `watches`.
fn abort_all<K, W>(
    watches: &Mutex<HashMap<K, W>>,
    handle: impl Fn(&W) -> &tokio::task::JoinHandle<()>,
) {
    let mut watches = watches.lock().unwrap_or_else(PoisonError::into_inner);
    for (_, watch) in watches.drain() {
        handle(&watch).abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ApiResource;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group: "".into(),
            resource: "configmaps".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    fn configmaps() -> SharedResource {
        SharedResource::new(ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(
            &(),
        ))
    }

    fn live(name: &str, rv: &str) -> LiveObject {
        LiveObject::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": rv},
            "data": {"v": rv},
        }))
        .expect("a JSON object")
    }

    /// Runs `forward_events` over events the test sends, into a store.
    fn forwarding(
        index: ResourceIndex,
    ) -> (
        tokio::sync::mpsc::UnboundedSender<Event<LiveObject>>,
        tokio::sync::mpsc::Receiver<String>,
        ObjectStore,
        tokio::task::JoinHandle<()>,
    ) {
        let store = ObjectStore::default();
        let (events_tx, events_rx) = tokio::sync::mpsc::unbounded_channel();
        let events = futures::stream::unfold(events_rx, |mut rx| async move {
            rx.recv().await.map(|e| (Ok(e), rx))
        });
        let (trigger, triggers) = Triggers::channel(Default::default(), Default::default());
        let (ready, _synced) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(forward_events(
            events,
            store.clone(),
            ready,
            Arc::new(Mutex::new(index)),
            trigger,
            String::new(),
            "configmaps".into(),
            Scope::Type,
        ));
        (events_tx, triggers, store, task)
    }

    fn version_in(store: &ObjectStore, name: &str) -> Option<String> {
        let object = object_value(&store.get("ns", name)?, &configmaps())?;
        object["metadata"]["resourceVersion"]
            .as_str()
            .map(String::from)
    }

    const QUIET: std::time::Duration = std::time::Duration::from_millis(300);

    #[tokio::test]
    async fn a_relisted_object_wakes_its_work_only_once_the_store_has_it() {
        let mut index = ResourceIndex::default();
        index.set_work("w1", vec![key("a")]);
        let (events, mut triggers, store, task) = forwarding(index);
        for e in [
            Event::Init,
            Event::InitApply(live("a", "1")),
            Event::InitDone,
        ] {
            events.send(e).expect("forwarder runs");
        }
        assert_eq!(triggers.recv().await.as_deref(), Some("w1"));
        assert_eq!(version_in(&store, "a").as_deref(), Some("1"));
        // The watch broke and the object changed meanwhile: a re-list brings version 2.
        events.send(Event::Init).expect("forwarder runs");
        events
            .send(Event::InitApply(live("a", "2")))
            .expect("forwarder runs");
        if let Ok(Some(work)) = tokio::time::timeout(QUIET, triggers.recv()).await {
            assert_eq!(
                version_in(&store, "a").as_deref(),
                Some("2"),
                "{work} was woken while the store still had version 1"
            );
        }
        events.send(Event::InitDone).expect("forwarder runs");
        let woken = tokio::time::timeout(QUIET, triggers.recv()).await;
        assert_eq!(woken.ok().flatten().as_deref(), Some("w1"));
        assert_eq!(version_in(&store, "a").as_deref(), Some("2"));
        task.abort();
    }

    #[tokio::test]
    async fn an_object_deleted_while_the_watch_was_down_wakes_its_work() {
        let mut index = ResourceIndex::default();
        index.set_work("w1", vec![key("a")]);
        index.set_work("w2", vec![key("b")]);
        let (events, mut triggers, store, task) = forwarding(index);
        for e in [
            Event::Init,
            Event::InitApply(live("a", "1")),
            Event::InitApply(live("b", "1")),
            Event::InitDone,
        ] {
            events.send(e).expect("forwarder runs");
        }
        let mut first = vec![
            triggers.recv().await.unwrap_or_default(),
            triggers.recv().await.unwrap_or_default(),
        ];
        first.sort();
        assert_eq!(first, ["w1", "w2"]);
        // "a" was deleted during a watch gap: the re-list has only "b", and no event for "a".
        for e in [
            Event::Init,
            Event::InitApply(live("b", "1")),
            Event::InitDone,
        ] {
            events.send(e).expect("forwarder runs");
        }
        let mut woken = Vec::new();
        while let Ok(Some(w)) = tokio::time::timeout(QUIET, triggers.recv()).await {
            woken.push(w);
        }
        assert!(woken.iter().any(|w| w == "w1"), "woken: {woken:?}");
        assert_eq!(version_in(&store, "a"), None);
        task.abort();
    }

    #[test]
    fn index_tells_types_and_namespaces_apart() {
        let object = |group: &str, resource: &str, namespace: &str, name: &str| ObjectKey {
            group: group.into(),
            resource: resource.into(),
            namespace: namespace.into(),
            name: name.into(),
        };
        let mut index = ResourceIndex::default();
        index.set_work("core", vec![object("", "configmaps", "ns", "a")]);
        index.set_work("other-group", vec![object("x.io", "configmaps", "ns", "a")]);
        index.set_work("cluster", vec![object("", "configmaps", "", "a")]);
        index.set_work("other-ns", vec![object("", "configmaps", "ns2", "a")]);
        assert_eq!(index.object_count(), 4);
        assert_eq!(
            index.works_of(&object("", "configmaps", "ns", "a")),
            ["core"]
        );
        assert_eq!(
            index.works_of(&object("x.io", "configmaps", "ns", "a")),
            ["other-group"]
        );
        assert_eq!(
            index.works_of(&object("", "configmaps", "", "a")),
            ["cluster"]
        );
        assert_eq!(
            index.works_of_type("", "configmaps"),
            ["cluster", "core", "other-ns"]
        );
        assert_eq!(index.works_of_type("x.io", "configmaps"), ["other-group"]);
        index.remove_work("other-group");
        assert!(!index.type_in_use("x.io", "configmaps"));
        assert!(index.type_in_use("", "configmaps"));
    }

    #[test]
    fn index_maps_objects_to_every_work_using_them() {
        let mut index = ResourceIndex::default();
        index.set_work("w1", vec![key("a"), key("shared")]);
        index.set_work("w2", vec![key("shared")]);
        assert_eq!(index.object_count(), 2);
        assert_eq!(index.works_of(&key("shared")), vec!["w1", "w2"]);
        assert_eq!(index.works_of(&key("a")), vec!["w1"]);
        index.set_work("w1", vec![key("b")]);
        assert!(index.works_of(&key("a")).is_empty());
        assert_eq!(index.works_of(&key("shared")), vec!["w2"]);
        index.remove_work("w2");
        assert!(index.works_of(&key("shared")).is_empty());
        assert_eq!(index.works_of(&key("b")), vec!["w1"]);
        index.add("w1", key("c"));
        index.add("w1", key("c"));
        assert_eq!(index.works_of(&key("c")), vec!["w1"]);
        index.set_work("w1", vec![key("b")]);
        assert!(index.works_of(&key("c")).is_empty());
        assert!(index.type_in_use("", "configmaps"));
        index.remove_work("w1");
        assert!(!index.type_in_use("", "configmaps"));
        index.set_work("w3", vec![key("x"), key("x")]);
        index.set_work("w4", vec![key("x")]);
        index.remove_work("w3");
        assert!(index.type_in_use("", "configmaps"));
        assert_eq!(index.works_of_type("", "configmaps"), vec!["w4"]);
        assert!(index.works_of_type("apps", "deployments").is_empty());
        index.remove_work("w4");
        assert!(!index.type_in_use("", "configmaps"));
        assert_eq!(
            index.object_count(),
            0,
            "nothing is left once every work is gone"
        );
    }
}
