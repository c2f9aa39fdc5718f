//! One resource type's watched objects as the agent keeps them (the applied objects of each
//! watched type, and the AppliedManifestWorks): namespace and name → the object's packed JSON.
//! kube-runtime's reflector store keys each object with its own copies of its type, name,
//! namespace, UID and resourceVersion, and holds its `ObjectMeta` (some 360 bytes inline) beside
//! them: about 700 bytes an object before its text. Here an object is its key's text and
//! its packed JSON. Events are taken as a reflector takes them: a (re-)list replaces the objects
//! whole, when it is done.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError, RwLock};

use kube::runtime::watcher::Event;

use crate::packed::PackedJson;
use crate::spoke::live_object::LiveObject;

/// The objects of one resource type (cheap to clone: the clones share them).
#[derive(Clone, Default)]
pub struct ObjectStore {
    objects: Arc<RwLock<Objects>>,
}

#[derive(Default)]
struct Objects {
    current: HashMap<Box<str>, PackedJson>,
    /// The list in progress, taken whole when it is done.
    listing: Option<HashMap<Box<str>, PackedJson>>,
}

/// The key of an object: namespace (empty for a cluster-scoped one), `/`, name. Neither a
/// namespace nor a name may hold a `/`.
fn key(namespace: &str, name: &str) -> Box<str> {
    format!("{namespace}/{name}").into_boxed_str()
}

fn key_of(object: &LiveObject) -> Box<str> {
    key(
        object.metadata.namespace.as_deref().unwrap_or_default(),
        object.metadata.name.as_deref().unwrap_or_default(),
    )
}

impl ObjectStore {
    /// Takes one watch event, as a reflector's store does.
    pub fn apply(&self, event: &Event<LiveObject>) {
        let mut objects = self.objects.write().unwrap_or_else(PoisonError::into_inner);
        match event {
            Event::Apply(o) => {
                objects.current.insert(key_of(o), o.json().clone());
            }
            Event::Delete(o) => {
                objects.current.remove(&key_of(o));
            }
            Event::Init => objects.listing = Some(HashMap::new()),
            Event::InitApply(o) => {
                objects
                    .listing
                    .get_or_insert_with(HashMap::new)
                    .insert(key_of(o), o.json().clone());
            }
            Event::InitDone => {
                if let Some(mut listed) = objects.listing.take() {
                    listed.shrink_to_fit();
                    objects.current = listed;
                }
            }
        }
    }

    /// The object `namespace`/`name` (namespace empty for a cluster-scoped one), if held.
    pub fn get(&self, namespace: &str, name: &str) -> Option<PackedJson> {
        self.objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .current
            .get(&key(namespace, name))
            .cloned()
    }

    /// Every object held (their texts are shared, not copied).
    pub fn all(&self) -> Vec<PackedJson> {
        self.objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .current
            .values()
            .cloned()
            .collect()
    }

    /// How many objects are held.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.objects
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .current
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn live(namespace: &str, name: &str, rv: &str) -> LiveObject {
        LiveObject::from_value(json!({
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": rv},
            "data": {"v": rv},
        }))
        .expect("a JSON object")
    }

    fn version(store: &ObjectStore, namespace: &str, name: &str) -> Option<String> {
        let text = store.get(namespace, name)?.text()?;
        let value: serde_json::Value = serde_json::from_str(&text).ok()?;
        value["metadata"]["resourceVersion"]
            .as_str()
            .map(String::from)
    }

    #[test]
    fn events_change_the_objects_and_a_list_replaces_them_when_done() {
        let store = ObjectStore::default();
        for e in [
            Event::Init,
            Event::InitApply(live("a", "x", "1")),
            Event::InitApply(live("b", "x", "1")),
            Event::InitDone,
        ] {
            store.apply(&e);
        }
        assert_eq!(store.len(), 2);
        assert_eq!(version(&store, "a", "x").as_deref(), Some("1"));
        store.apply(&Event::Apply(live("a", "x", "2")));
        assert_eq!(version(&store, "a", "x").as_deref(), Some("2"));
        store.apply(&Event::Delete(live("b", "x", "1")));
        assert_eq!(store.get("b", "x"), None);

        // A re-list: the old objects stay until it is done, then only the listed ones.
        store.apply(&Event::Init);
        store.apply(&Event::InitApply(live("c", "y", "5")));
        assert_eq!(version(&store, "a", "x").as_deref(), Some("2"));
        assert_eq!(store.get("c", "y"), None);
        store.apply(&Event::InitDone);
        assert_eq!(store.get("a", "x"), None);
        assert_eq!(version(&store, "c", "y").as_deref(), Some("5"));
        assert_eq!(store.len(), 1);
    }

    #[test]
    fn a_cluster_scoped_object_is_found_without_a_namespace() {
        let store = ObjectStore::default();
        let object = LiveObject::from_value(json!({"metadata": {"name": "n"}})).expect("object");
        store.apply(&Event::Apply(object));
        assert!(store.get("", "n").is_some());
        assert!(store.get("default", "n").is_none());
    }
}
