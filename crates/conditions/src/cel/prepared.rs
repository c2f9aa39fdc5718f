//! A live object held for evaluation, the parts of it that rules read converted to CEL, and a
//! small cache of those conversions keyed by uid and resourceVersion, so that the rules of
//! several evaluations of one object version share one conversion.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use cel::common::value::{CowVal, Val};
use cel::context::VariableResolver;

use crate::cel::object_reads::{OBJECT_VARIABLE, Reads};
use crate::cel::projection;

/// The parts of a live object that rules read, converted to CEL with their own strings.
pub(crate) struct Projected {
    value: Box<dyn Val>,
}

impl Projected {
    /// The parts of `object` that `reads` names, converted.
    fn of(object: &serde_json::Value, reads: &Reads) -> Self {
        Self {
            value: projection::project_owned(object, reads),
        }
    }

    /// The converted parts as the CEL variable `object`.
    pub(crate) fn variable(&self) -> ObjectVariable<'_> {
        ObjectVariable(self.value.as_ref())
    }
}

/// A live object held for evaluation ([`crate::Evaluator::prepare`] or
/// [`PreparedObject::new`]); each evaluation converts to CEL only the parts its rules read
/// (shared through the evaluator's cache when the object has a uid and resourceVersion).
#[derive(Debug)]
pub struct PreparedObject {
    json: serde_json::Value,
}

impl PreparedObject {
    /// Holds `object`.
    pub fn new(object: serde_json::Value) -> Self {
        Self { json: object }
    }

    /// The object as JSON.
    pub fn json(&self) -> &serde_json::Value {
        &self.json
    }
}

/// Binds a converted object as `object` without copying it into the context.
pub(crate) struct ObjectVariable<'a>(pub(crate) &'a (dyn Val + 'a));

impl VariableResolver for ObjectVariable<'_> {
    fn resolve<'b>(&'b self, variable: &str) -> Option<CowVal<'b, 'b>> {
        (variable == OBJECT_VARIABLE).then_some(CowVal::Borrowed(self.0))
    }
}

/// A bounded cache of converted object parts keyed by uid, holding one resourceVersion each (an
/// object has one live version) and the reads it was converted for; the oldest goes first.
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
    reads: Arc<Reads>,
    bytes: usize,
    object: Arc<Projected>,
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

    /// The parts of `object` that `reads` names, converted: from the cache when its uid and
    /// resourceVersion were seen with reads that cover these, else converted (outside the lock,
    /// together with what was read of this version before) and kept; None when it has no uid
    /// and resourceVersion to key on (or the cache is off).
    pub(crate) fn cached(
        &self,
        object: &serde_json::Value,
        reads: &Reads,
    ) -> Option<Arc<Projected>> {
        let (uid, rv) = cache_key(object).filter(|_| self.capacity > 0)?;
        let earlier = {
            let entries = self.lock();
            match entries.by_uid.get(uid).filter(|e| e.resource_version == rv) {
                Some(e) if e.reads.covers(reads) => return Some(e.object.clone()),
                Some(e) => Some(e.reads.clone()),
                None => None,
            }
        };
        let reads = match earlier {
            // Another rule set on the same version: convert for both from now on.
            Some(earlier) => {
                let mut union = (*earlier).clone();
                union.merge(reads);
                union
            }
            None => reads.clone(),
        };
        self.count_conversion();
        let projected = Arc::new(Projected::of(object, &reads));
        let bytes = projection::estimated_bytes(object, &reads);
        self.insert(uid, rv, Arc::new(reads), bytes, projected.clone());
        Some(projected)
    }

    /// Counts a conversion made outside the cache.
    pub(crate) fn count_conversion(&self) {
        self.conversions.fetch_add(1, Ordering::Relaxed);
    }

    fn insert(&self, uid: &str, rv: &str, reads: Arc<Reads>, bytes: usize, object: Arc<Projected>) {
        if bytes > self.max_bytes {
            return;
        }
        let mut entries = self.lock();
        // A newer version of a cached object takes the older one's place in the eviction
        // order (no scan of the order on every new version).
        let replaced = entries.by_uid.remove(uid);
        if let Some(old) = &replaced {
            entries.bytes -= old.bytes;
        }
        while entries.by_uid.len() >= self.capacity || entries.bytes + bytes > self.max_bytes {
            match entries.order.pop_front() {
                Some(oldest) if oldest == uid => entries.order.push_back(oldest),
                Some(oldest) => {
                    if let Some(old) = entries.by_uid.remove(&oldest) {
                        entries.bytes -= old.bytes;
                    }
                }
                None => break,
            }
        }
        entries.bytes += bytes;
        if replaced.is_none() {
            entries.order.push_back(uid.to_string());
        }
        entries.by_uid.insert(
            uid.to_string(),
            Entry {
                resource_version: rv.to_string(),
                reads,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(uid: &str, rv: &str) -> serde_json::Value {
        json!({"metadata": {"uid": uid, "resourceVersion": rv}, "spec": {"replicas": 3, "paused": false}})
    }

    fn reads(source: &str) -> Reads {
        Reads::of(&cel::Env::stdlib().parser().parse(source).expect("parses"))
    }

    impl Projected {
        fn json(&self) -> serde_json::Value {
            let value = cel::Value::try_from(self.value.as_ref()).expect("converts");
            crate::cel::convert::value_to_json(&value).expect("json")
        }
    }

    fn whole() -> Reads {
        Reads::Whole
    }

    #[test]
    fn one_conversion_per_resource_version() {
        let cache = ObjectCache::new(4, 1 << 20);
        let a = cache.cached(&object("u1", "1"), &whole()).unwrap();
        let b = cache.cached(&object("u1", "1"), &whole()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert_eq!(cache.conversions(), 1);
        cache.cached(&object("u1", "2"), &whole());
        assert_eq!(cache.conversions(), 2);
        assert_eq!(
            cache.lock().by_uid.len(),
            1,
            "the older version was dropped"
        );
        assert_eq!(cache.lock().order.len(), 1);
        for rv in 3..10 {
            cache.cached(&object("u1", &rv.to_string()), &whole());
        }
        assert_eq!(cache.lock().order.len(), 1, "one place per uid");
    }

    #[test]
    fn reads_not_covered_convert_again_for_both() {
        let cache = ObjectCache::new(4, 1 << 20);
        let replicas = reads("object.spec.replicas");
        let paused = reads("object.spec.paused");
        let a = cache.cached(&object("u1", "1"), &replicas).unwrap();
        assert_eq!(
            a.json(),
            json!({"spec": {"replicas": 3}}),
            "only what is read is kept"
        );
        assert!(Arc::ptr_eq(
            &a,
            &cache.cached(&object("u1", "1"), &replicas).unwrap()
        ));
        let b = cache.cached(&object("u1", "1"), &paused).unwrap();
        assert_eq!(cache.conversions(), 2);
        assert_eq!(b.json(), json!({"spec": {"replicas": 3, "paused": false}}));
        let c = cache.cached(&object("u1", "1"), &replicas).unwrap();
        assert!(Arc::ptr_eq(&b, &c), "the union serves both");
        assert_eq!(cache.conversions(), 2);
    }

    #[test]
    fn objects_without_uid_or_version_are_not_cached() {
        let cache = ObjectCache::new(4, 1 << 20);
        let bare = json!({"metadata": {"uid": "u1"}});
        assert!(cache.cached(&bare, &whole()).is_none());
        assert!(
            ObjectCache::new(0, 1 << 20)
                .cached(&object("u1", "1"), &whole())
                .is_none()
        );
    }

    #[test]
    fn bounded_by_count_and_bytes() {
        let cache = ObjectCache::new(2, 1 << 20);
        for uid in ["a", "b", "c"] {
            cache.cached(&object(uid, "1"), &whole());
        }
        assert_eq!(cache.lock().by_uid.len(), 2);
        assert!(cache.lock().by_uid.contains_key("c"));
        let tiny = ObjectCache::new(8, 100);
        tiny.cached(&object("a", "1"), &whole());
        assert_eq!(tiny.lock().by_uid.len(), 0, "over the byte bound: not kept");
    }

    #[test]
    fn the_variable_resolves_only_object() {
        let projected = Projected::of(&object("u", "1"), &whole());
        let var = projected.variable();
        assert!(var.resolve("object").is_some());
        assert!(var.resolve("other").is_none());
        assert_eq!(
            PreparedObject::new(object("u", "1")).json()["spec"]["replicas"],
            3
        );
    }
}
