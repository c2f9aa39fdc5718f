//! Watch-driven re-evaluation: one label-filtered watch per resource type in use on the spoke,
//! started on demand, and an index from objects to the works that apply (or read) them, so an
//! event on an object re-queues exactly those works.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::mpsc::UnboundedSender;

use applier::ResolvedResource;

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

/// Objects → works. Pure data; the watch tasks read it.
#[derive(Default, Debug)]
pub struct ResourceIndex {
    by_object: HashMap<ObjectKey, BTreeSet<String>>,
    by_work: HashMap<String, Vec<ObjectKey>>,
}

impl ResourceIndex {
    /// Records the objects a work uses now (replacing what it used before).
    pub fn set_work(&mut self, work: &str, keys: Vec<ObjectKey>) {
        self.remove_work(work);
        for key in &keys {
            self.by_object
                .entry(key.clone())
                .or_default()
                .insert(work.to_string());
        }
        self.by_work.insert(work.to_string(), keys);
    }

    /// Forgets a work.
    pub fn remove_work(&mut self, work: &str) {
        for key in self.by_work.remove(work).unwrap_or_default() {
            if let Some(works) = self.by_object.get_mut(&key) {
                works.remove(work);
                if works.is_empty() {
                    self.by_object.remove(&key);
                }
            }
        }
    }

    /// The works using an object.
    pub fn works_of(&self, key: &ObjectKey) -> Vec<String> {
        self.by_object
            .get(key)
            .map(|w| w.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Starts watches on demand and forwards events as work names to re-queue.
pub struct Watches {
    spoke: kube::Client,
    label_selector: String,
    index: Arc<Mutex<ResourceIndex>>,
    started: Mutex<HashMap<(String, String), tokio::task::JoinHandle<()>>>,
    trigger: UnboundedSender<String>,
}

impl Watches {
    /// Watches objects labelled `label_selector`; work names to re-queue go to `trigger`.
    pub fn new(
        spoke: kube::Client,
        label_selector: String,
        trigger: UnboundedSender<String>,
    ) -> Self {
        Self {
            spoke,
            label_selector,
            index: Arc::default(),
            started: Mutex::default(),
            trigger,
        }
    }

    /// Records which objects a work uses.
    pub fn set_work(&self, work: &str, keys: Vec<ObjectKey>) {
        self.index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set_work(work, keys);
    }

    /// Forgets a work.
    pub fn remove_work(&self, work: &str) {
        self.index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove_work(work);
    }

    /// Number of watches running (one per group+resource).
    pub fn watch_count(&self) -> usize {
        self.started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Makes sure a watch runs for this resource type.
    pub fn ensure(&self, resource: &ResolvedResource) {
        let key = (resource.group.clone(), resource.plural.clone());
        let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
        if started.get(&key).is_some_and(|h| !h.is_finished()) {
            return;
        }
        let api: Api<DynamicObject> = Api::all_with(self.spoke.clone(), &resource.api_resource());
        let config = watcher::Config::default().labels(&self.label_selector);
        let index = self.index.clone();
        let trigger = self.trigger.clone();
        let (group, plural) = key.clone();
        tracing::debug!(group = %group, resource = %plural, "starting watch");
        let handle = tokio::spawn(async move {
            let mut events = watcher::watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                let object = match event {
                    Ok(Event::Apply(o) | Event::Delete(o) | Event::InitApply(o)) => o,
                    Ok(Event::Init | Event::InitDone) => continue,
                    Err(e) => {
                        tracing::debug!(group = %group, resource = %plural, error = %e, "watch error");
                        continue;
                    }
                };
                let key = ObjectKey {
                    group: group.clone(),
                    resource: plural.clone(),
                    namespace: object.metadata.namespace.clone().unwrap_or_default(),
                    name: object.metadata.name.clone().unwrap_or_default(),
                };
                let works = index
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .works_of(&key);
                for work in works {
                    if trigger.send(work).is_err() {
                        return;
                    }
                }
            }
        });
        started.insert(key, handle);
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        for (_, handle) in self
            .started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
        {
            handle.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            group: "".into(),
            resource: "configmaps".into(),
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn index_maps_objects_to_every_work_using_them() {
        let mut index = ResourceIndex::default();
        index.set_work("w1", vec![key("a"), key("shared")]);
        index.set_work("w2", vec![key("shared")]);
        assert_eq!(index.works_of(&key("shared")), vec!["w1", "w2"]);
        assert_eq!(index.works_of(&key("a")), vec!["w1"]);
        index.set_work("w1", vec![key("b")]);
        assert!(index.works_of(&key("a")).is_empty());
        assert_eq!(index.works_of(&key("shared")), vec!["w2"]);
        index.remove_work("w2");
        assert!(index.works_of(&key("shared")).is_empty());
        assert_eq!(index.works_of(&key("b")), vec!["w1"]);
    }
}
