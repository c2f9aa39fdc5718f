//! Compiled expressions, shared across threads and works, bounded in number.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::cel::cost::Program;
use crate::error::EvalError;

/// A compiled expression (or why it does not compile; failures are cached too, so a bad
/// expression is not re-parsed on every reconcile).
pub(crate) type Compiled = Result<Arc<Program>, EvalError>;

/// A bounded map from source to compiled expression; the oldest entry goes first when full.
pub(crate) struct Cache {
    capacity: usize,
    inner: Mutex<Inner>,
    compiles: AtomicU64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Arc<str>, Compiled>,
    order: VecDeque<Arc<str>>,
}

impl Cache {
    /// An empty cache holding at most `capacity` expressions (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
            compiles: AtomicU64::new(0),
        }
    }

    /// The compiled `source`, compiling it with `compile` on a miss. The lock is not held
    /// while compiling, so two threads may compile the same new expression once each.
    pub(crate) fn get_or_compile(
        &self,
        source: &str,
        compile: impl FnOnce(&str) -> Compiled,
    ) -> Compiled {
        if let Some(hit) = self.lock().map.get(source) {
            return hit.clone();
        }
        self.compiles.fetch_add(1, Ordering::Relaxed);
        let compiled = compile(source);
        let mut inner = self.lock();
        if !inner.map.contains_key(source) {
            while inner.map.len() >= self.capacity {
                match inner.order.pop_front() {
                    Some(oldest) => {
                        inner.map.remove(&oldest);
                    }
                    None => break,
                }
            }
            let key: Arc<str> = Arc::from(source);
            inner.order.push_back(key.clone());
            inner.map.insert(key, compiled.clone());
        }
        compiled
    }

    /// How many times an expression was compiled.
    pub(crate) fn compile_count(&self) -> u64 {
        self.compiles.load(Ordering::Relaxed)
    }

    /// How many expressions are cached.
    pub(crate) fn len(&self) -> usize {
        self.lock().map.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave the map inconsistent: keep using it.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compile(_: &str) -> Compiled {
        Ok(Arc::new(Program::instrument(cel::IdedExpr::default())))
    }

    #[test]
    fn second_lookup_does_not_compile() {
        let cache = Cache::new(4);
        cache.get_or_compile("a", compile).unwrap();
        cache
            .get_or_compile("a", |_| panic!("compiled twice"))
            .unwrap();
        assert_eq!(cache.compile_count(), 1);
    }

    #[test]
    fn evicts_oldest_when_full() {
        let cache = Cache::new(2);
        for s in ["a", "b", "c"] {
            cache.get_or_compile(s, compile).unwrap();
        }
        assert_eq!(cache.len(), 2);
        cache
            .get_or_compile("c", |_| panic!("c was evicted"))
            .unwrap();
        cache.get_or_compile("a", compile).unwrap();
        assert_eq!(cache.compile_count(), 4);
    }
}
