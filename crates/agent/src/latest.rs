//! The agent's own latest write of an object, overlaid on a watch store: a store lags behind
//! the agent's writes for a moment, and a reconcile in that moment should not act on (or
//! conflict with) the older copy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kube::Resource;

/// Whether resourceVersion `a` is newer than `b`. Resource versions are opaque to clients, but
/// every Kubernetes API server issues increasing integers (etcd revisions); anything else is
/// treated as not newer, so the watch store wins.
pub fn is_newer(a: Option<&str>, b: Option<&str>) -> bool {
    match (
        a.and_then(|a| a.parse::<u64>().ok()),
        b.and_then(|b| b.parse::<u64>().ok()),
    ) {
        (Some(a), Some(b)) => a > b,
        (Some(_), None) => b.is_none(),
        _ => false,
    }
}

/// The latest object the agent wrote, per name.
#[derive(Debug)]
pub struct Latest<K> {
    written: Mutex<HashMap<String, Arc<K>>>,
}

impl<K> Default for Latest<K> {
    fn default() -> Self {
        Self {
            written: Mutex::default(),
        }
    }
}

impl<K: Resource> Latest<K> {
    /// Remembers an object the agent just wrote (the server's answer), without its
    /// managedFields (nothing reads them, and they are often a third of the object).
    pub fn record(&self, name: &str, mut object: K) {
        object.meta_mut().managed_fields = None;
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), Arc::new(object));
    }

    /// `seen` (from a store), or the agent's own write of it when that is newer. Once the store
    /// caught up, the remembered write is dropped.
    pub fn fresher(&self, name: &str, seen: Arc<K>) -> Arc<K> {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        match written.get(name) {
            Some(ours)
                if is_newer(
                    ours.meta().resource_version.as_deref(),
                    seen.meta().resource_version.as_deref(),
                ) =>
            {
                ours.clone()
            }
            Some(_) => {
                written.remove(name);
                seen
            }
            None => seen,
        }
    }

    /// The store saw `seen` (a watch event): the agent's own write is dropped once the store
    /// has it or a newer version, so nothing is held for objects no reconcile reads again.
    pub fn observe(&self, name: &str, seen_version: Option<&str>) {
        let mut written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
        if written
            .get(name)
            .is_some_and(|ours| !is_newer(ours.meta().resource_version.as_deref(), seen_version))
        {
            written.remove(name);
        }
    }

    /// How many writes are held (for the size gauges and tests).
    pub fn len(&self) -> usize {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether no write is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets an object (it is gone).
    pub fn forget(&self, name: &str) {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    fn cm(rv: &str, data: &str) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                resource_version: Some(rv.into()),
                ..ObjectMeta::default()
            },
            data: Some([("k".to_string(), data.to_string())].into()),
            ..ConfigMap::default()
        }
    }

    #[test]
    fn resource_versions_compare_as_integers() {
        assert!(is_newer(Some("10"), Some("9")));
        assert!(!is_newer(Some("9"), Some("10")));
        assert!(!is_newer(Some("x"), Some("1")));
        assert!(!is_newer(None, Some("1")));
    }

    #[test]
    fn our_write_wins_until_the_store_catches_up() {
        let latest = Latest::default();
        latest.record("a", cm("12", "ours"));
        let stale = Arc::new(cm("11", "stale"));
        assert_eq!(
            latest
                .fresher("a", stale)
                .metadata
                .resource_version
                .as_deref(),
            Some("12")
        );
        let caught_up = Arc::new(cm("12", "ours"));
        assert!(Arc::ptr_eq(
            &latest.fresher("a", caught_up.clone()),
            &caught_up
        ));
        // Dropped once caught up: an older store copy now stands.
        let older = Arc::new(cm("11", "stale"));
        assert!(Arc::ptr_eq(&latest.fresher("a", older.clone()), &older));
        latest.record("b", cm("3", "x"));
        latest.forget("b");
        latest.record("c", cm("7", "ours"));
        latest.observe("c", Some("6"));
        assert_eq!(latest.len(), 1, "an older event keeps our write");
        latest.observe("c", Some("7"));
        assert!(latest.is_empty(), "the store caught up: dropped");
        let seen = Arc::new(cm("1", "y"));
        assert!(Arc::ptr_eq(&latest.fresher("b", seen.clone()), &seen));
    }
}
