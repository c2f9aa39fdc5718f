//! Bookkeeping for the `works` (by state) and `ttl_pending_deletions` gauges.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

use crate::metrics::{Metrics, StateLabels};

/// Last known state of each work, and which works wait for their TTL.
#[derive(Default, Debug)]
pub struct WorkStates {
    states: Mutex<HashMap<String, &'static str>>,
    ttl_pending: Mutex<BTreeSet<String>>,
    ttl_failures: Mutex<HashMap<String, u32>>,
}

impl WorkStates {
    /// Records a work's state (`None`: the work is gone) and moves the gauges.
    pub fn set(&self, metrics: &Metrics, work: &str, state: Option<&'static str>) {
        let mut states = self.states.lock().unwrap_or_else(PoisonError::into_inner);
        let old = match state {
            Some(s) => states.insert(work.to_string(), s),
            None => states.remove(work),
        };
        metrics
            .work_states
            .set(i64::try_from(states.len()).unwrap_or(i64::MAX));
        if old == state {
            return;
        }
        if let Some(old) = old {
            metrics
                .works
                .get_or_create(&StateLabels { state: old })
                .dec();
        }
        if let Some(new) = state {
            metrics
                .works
                .get_or_create(&StateLabels { state: new })
                .inc();
        }
    }

    /// Records whether a work waits for its TTL deadline.
    pub fn set_ttl_pending(&self, metrics: &Metrics, work: &str, pending: bool) {
        let mut set = self
            .ttl_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let changed = if pending {
            set.insert(work.to_string())
        } else {
            set.remove(work)
        };
        if changed {
            metrics
                .ttl_pending_deletions
                .set(i64::try_from(set.len()).unwrap_or(i64::MAX));
        }
    }
}

impl WorkStates {
    /// Counts one more failed TTL deletion of a work; returns the count so far.
    pub fn record_ttl_failure(&self, work: &str) -> u32 {
        let mut failures = self
            .ttl_failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = failures.entry(work.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// Forgets a work's failed TTL deletions (it was deleted, or is no longer due).
    pub fn clear_ttl_failures(&self, work: &str) {
        self.ttl_failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(work);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_follow_state_changes() {
        let metrics = Metrics::new();
        let states = WorkStates::default();
        states.set(&metrics, "a", Some("applying"));
        states.set(&metrics, "b", Some("applying"));
        states.set(&metrics, "a", Some("complete"));
        states.set(&metrics, "a", Some("complete"));
        states.set(&metrics, "b", None);
        let applying = metrics
            .works
            .get_or_create(&StateLabels { state: "applying" })
            .get();
        let complete = metrics
            .works
            .get_or_create(&StateLabels { state: "complete" })
            .get();
        assert_eq!((applying, complete), (0, 1));
        assert_eq!(metrics.work_states.get(), 1, "only a is held");
        states.set_ttl_pending(&metrics, "a", true);
        states.set_ttl_pending(&metrics, "a", true);
        assert_eq!(metrics.ttl_pending_deletions.get(), 1);
        states.set_ttl_pending(&metrics, "a", false);
        assert_eq!(metrics.ttl_pending_deletions.get(), 0);
    }

    #[test]
    fn ttl_failures_count_per_work_until_cleared() {
        let states = WorkStates::default();
        assert_eq!(states.record_ttl_failure("a"), 1);
        assert_eq!(states.record_ttl_failure("a"), 2);
        assert_eq!(states.record_ttl_failure("b"), 1);
        states.clear_ttl_failures("a");
        assert_eq!(states.record_ttl_failure("a"), 1);
    }
}
