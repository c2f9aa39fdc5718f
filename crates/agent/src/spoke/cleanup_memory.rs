//! Which applied resources a cleanup has seen going: for those, absence from the watch cache
//! means gone. For any other, absence may only mean the store is behind, and the API server is
//! asked before the resource is given up.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

/// Per AppliedManifestWork, the UIDs of resources whose deletion or release its cleanup issued or
/// saw under way. Entries go when the cleanup ends or the work is forgotten, so the map holds
/// only cleanups in progress.
#[derive(Debug, Default)]
pub struct CleanupMemory {
    seen: Mutex<HashMap<String, HashSet<String>>>,
}

impl CleanupMemory {
    /// Records that the cleanup of `applied` deleted or released `uid`, or saw it terminating.
    /// A resource recorded without a UID (recorded before it was created, and the agent stopped
    /// before its UID followed) is not told apart from another such: it is never remembered.
    pub fn remember(&self, applied: &str, uid: &str) {
        if uid.is_empty() {
            return;
        }
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(applied.to_owned())
            .or_default()
            .insert(uid.to_owned());
    }

    /// Whether the cleanup of `applied` has seen `uid` going.
    pub fn saw_going(&self, applied: &str, uid: &str) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(applied)
            .is_some_and(|uids| uids.contains(uid))
    }

    /// Forgets the cleanup of `applied` (done, or its work is gone).
    pub fn forget(&self, applied: &str) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(applied);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_applied_work_until_forgotten() {
        let m = CleanupMemory::default();
        assert!(!m.saw_going("a", "u1"));
        m.remember("a", "u1");
        assert!(m.saw_going("a", "u1"));
        assert!(!m.saw_going("a", "u2"));
        assert!(!m.saw_going("b", "u1"));
        m.forget("a");
        assert!(!m.saw_going("a", "u1"));
    }

    #[test]
    fn a_resource_recorded_without_a_uid_is_never_taken_as_seen_going() {
        let m = CleanupMemory::default();
        m.remember("a", "");
        assert!(!m.saw_going("a", ""));
    }
}
