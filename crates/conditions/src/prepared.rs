//! A live object converted to CEL once, and a small cache of them keyed by uid and
//! resourceVersion, so that the rules of several evaluations of one object version share one
//! conversion.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;
use self_cell::self_cell;

use crate::convert;

type ObjectVal<'a> = Box<dyn Val + 'a>;

self_cell!(
    /// The JSON and its CEL view, which borrows the JSON's strings.
    struct Converted {
        owner: serde_json::Value,
        #[covariant]
        dependent: ObjectVal,
    }
);

/// A live object ready for evaluation: its JSON and its CEL value, converted once.
///
/// Build one per object version with [`crate::Evaluator::prepare`] (cached by uid and
/// resourceVersion) or [`PreparedObject::new`], then evaluate any number of rule sets on it
/// with [`crate::Evaluator::evaluate_prepared`].
pub struct PreparedObject {
    converted: Converted,
}

impl std::fmt::Debug for PreparedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedObject")
            .field("object", self.json())
            .finish_non_exhaustive()
    }
}

impl PreparedObject {
    /// Converts `object` to CEL now.
    pub fn new(object: serde_json::Value) -> Self {
        Self {
            converted: Converted::new(object, |json| convert::json_to_val(json)),
        }
    }

    /// The object as JSON.
    pub fn json(&self) -> &serde_json::Value {
        self.converted.borrow_owner()
    }

    /// The object as the CEL variable `object`.
    pub(crate) fn variable(&self) -> ObjectVariable<'_> {
        ObjectVariable(self.converted.borrow_dependent().as_ref())
    }
}

/// Binds a converted object as `object` without copying it into the context.
pub(crate) struct ObjectVariable<'a>(pub(crate) &'a (dyn Val + 'a));

impl VariableResolver for ObjectVariable<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == "object").then_some(CowVal::Borrowed(self.0))
    }
}

/// A bounded cache of prepared objects keyed by uid, holding one resourceVersion each (an
/// object has one live version); the oldest goes first.
pub(crate) struct ObjectCache {
    capacity: usize,
    max_bytes: usize,
    inner: Mutex<Entries>,
    conversions: AtomicU64,
}

#[derive(Default)]
struct Entries {
    by_uid: HashMap<String, Entry>,
    /// Uids, oldest first.
    order: VecDeque<String>,
    bytes: usize,
}

struct Entry {
    resource_version: String,
    bytes: usize,
    object: Arc<PreparedObject>,
}

impl Entries {
    fn remove(&mut self, uid: &str) {
        if let Some(old) = self.by_uid.remove(uid) {
            self.bytes -= old.bytes;
            self.order.retain(|u| u != uid);
        }
    }
}

impl ObjectCache {
    /// Holds at most `capacity` objects whose JSON together weighs at most `max_bytes`
    /// (estimated); a capacity of 0 caches nothing.
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> Self {
        Self {
            capacity,
            max_bytes,
            inner: Mutex::new(Entries::default()),
            conversions: AtomicU64::new(0),
        }
    }

    /// How many objects were converted (cache misses and uncacheable objects).
    pub(crate) fn conversions(&self) -> u64 {
        self.conversions.load(Ordering::Relaxed)
    }

    /// `object` prepared, from the cache when its uid and resourceVersion were seen, else
    /// converted (outside the lock) and kept; None when it has no uid and resourceVersion to
    /// key on (or the cache is off).
    pub(crate) fn cached(&self, object: &serde_json::Value) -> Option<Arc<PreparedObject>> {
        let (uid, rv) = cache_key(object).filter(|_| self.capacity > 0)?;
        let hit = self
            .lock()
            .by_uid
            .get(uid)
            .filter(|e| e.resource_version == rv)
            .map(|e| e.object.clone());
        if hit.is_some() {
            return hit;
        }
        self.count_conversion();
        let prepared = Arc::new(PreparedObject::new(object.clone()));
        self.insert(uid, rv, estimated_bytes(object), prepared.clone());
        Some(prepared)
    }

    /// Counts a conversion made outside the cache.
    pub(crate) fn count_conversion(&self) {
        self.conversions.fetch_add(1, Ordering::Relaxed);
    }

    fn insert(&self, uid: &str, rv: &str, bytes: usize, object: Arc<PreparedObject>) {
        if bytes > self.max_bytes {
            return;
        }
        let mut entries = self.lock();
        entries.remove(uid);
        while entries.by_uid.len() >= self.capacity || entries.bytes + bytes > self.max_bytes {
            match entries.order.pop_front() {
                Some(oldest) => {
                    if let Some(old) = entries.by_uid.remove(&oldest) {
                        entries.bytes -= old.bytes;
                    }
                }
                None => break,
            }
        }
        entries.bytes += bytes;
        entries.order.push_back(uid.to_string());
        entries.by_uid.insert(
            uid.to_string(),
            Entry {
                resource_version: rv.to_string(),
                bytes,
                object,
            },
        );
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Entries> {
        // Entries are replaced whole: a panic elsewhere cannot leave them half-written.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// `(metadata.uid, metadata.resourceVersion)` when both are non-empty strings.
fn cache_key(object: &serde_json::Value) -> Option<(&str, &str)> {
    let metadata = object.get("metadata")?;
    let uid = metadata.get("uid")?.as_str().filter(|s| !s.is_empty())?;
    let rv = metadata
        .get("resourceVersion")?
        .as_str()
        .filter(|s| !s.is_empty())?;
    Some((uid, rv))
}

/// A rough size of `value` in memory: string bytes plus a fixed cost per node.
fn estimated_bytes(value: &serde_json::Value) -> usize {
    const NODE: usize = 64;
    match value {
        serde_json::Value::String(s) => NODE + s.len(),
        serde_json::Value::Array(items) => NODE + items.iter().map(estimated_bytes).sum::<usize>(),
        serde_json::Value::Object(fields) => {
            NODE + fields
                .iter()
                .map(|(k, v)| NODE + k.len() + estimated_bytes(v))
                .sum::<usize>()
        }
        _ => NODE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, rv: &str) -> serde_json::Value {
        json!({"metadata": {"uid": uid, "resourceVersion": rv}, "spec": {"replicas": 3}})
    }

    #[test]
    fn one_conversion_per_resource_version() {
        let cache = ObjectCache::new(4, 1 << 20);
        let a = cache.cached(&object("u1", "1")).unwrap();
        let b = cache.cached(&object("u1", "1")).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.conversions(), 1);
        cache.cached(&object("u1", "2"));
        assert_eq!(cache.conversions(), 2);
        assert_eq!(
            cache.lock().by_uid.len(),
            1,
            "the older version was dropped"
        );
        assert_eq!(cache.lock().order.len(), 1);
    }

    #[test]
    fn objects_without_uid_or_version_are_not_cached() {
        let cache = ObjectCache::new(4, 1 << 20);
        let bare = json!({"metadata": {"uid": "u1"}});
        assert!(cache.cached(&bare).is_none());
        assert!(
            ObjectCache::new(0, 1 << 20)
                .cached(&object("u1", "1"))
                .is_none()
        );
    }

    #[test]
    fn bounded_by_count_and_bytes() {
        let cache = ObjectCache::new(2, 1 << 20);
        for uid in ["a", "b", "c"] {
            cache.cached(&object(uid, "1"));
        }
        assert_eq!(cache.lock().by_uid.len(), 2);
        assert!(cache.lock().by_uid.contains_key("c"));
        let tiny = ObjectCache::new(8, 100);
        tiny.cached(&object("a", "1"));
        assert_eq!(tiny.lock().by_uid.len(), 0, "over the byte bound: not kept");
    }

    #[test]
    fn the_variable_resolves_only_object() {
        let prepared = PreparedObject::new(object("u", "1"));
        let var = prepared.variable();
        assert!(var.resolve("object").is_some());
        assert!(var.resolve("other").is_none());
        assert_eq!(prepared.json()["spec"]["replicas"], 3);
    }
}
