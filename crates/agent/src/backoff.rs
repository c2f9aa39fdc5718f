//! Retrying blocked works: per-work exponential backoff (reset when the work's spec changes or it
//! is no longer blocked), the set of blocked works (woken at once when a namespace or CRD
//! appears), and one WARN per distinct failure rather than one per retry.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// First retry of a blocked work.
pub const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Longest wait between retries of a blocked work.
pub const MAX_RETRY: Duration = Duration::from_secs(300);

/// The wait before retry number `attempt` (0-based): 5 s, 10 s, 20 s, ... capped at 5 min.
pub fn delay(attempt: u32) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX);
    FIRST_RETRY.saturating_mul(factor).min(MAX_RETRY)
}

#[derive(Debug, Default)]
struct Blocked {
    generation: Option<i64>,
    attempts: u32,
    reported: BTreeSet<String>,
}

/// Blocked works and their retry state.
#[derive(Debug, Default)]
pub struct Backoff {
    works: Mutex<HashMap<String, Blocked>>,
}

impl Backoff {
    /// Records that `work` (at `generation`) is blocked with these failures; returns the wait
    /// before its next retry and the failures not reported before (to log once each).
    pub fn blocked(
        &self,
        work: &str,
        generation: Option<i64>,
        failures: &[String],
    ) -> (Duration, Vec<String>) {
        let mut works = self.works.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = works.entry(work.to_string()).or_default();
        if entry.generation != generation {
            *entry = Blocked {
                generation,
                ..Blocked::default()
            };
        }
        let wait = delay(entry.attempts);
        entry.attempts = entry.attempts.saturating_add(1);
        let new: Vec<String> = failures
            .iter()
            .filter(|f| !entry.reported.contains(*f))
            .cloned()
            .collect();
        // Only the current failures are remembered: one that goes away and comes back is new.
        entry.reported = failures.iter().cloned().collect();
        (wait, new)
    }

    /// Forgets a work (no longer blocked, or gone).
    pub fn clear(&self, work: &str) {
        self.works
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(work);
    }

    /// The works blocked now.
    pub fn blocked_works(&self) -> Vec<String> {
        self.works
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_cap() {
        assert_eq!(delay(0), Duration::from_secs(5));
        assert_eq!(delay(1), Duration::from_secs(10));
        assert_eq!(delay(5), Duration::from_secs(160));
        assert_eq!(delay(6), MAX_RETRY);
        assert_eq!(delay(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn backoff_grows_per_work_and_resets_on_spec_change() {
        let b = Backoff::default();
        let f = vec!["namespaces \"x\" not found".to_string()];
        assert_eq!(b.blocked("w", Some(1), &f), (delay(0), f.clone()));
        assert_eq!(b.blocked("w", Some(1), &f), (delay(1), vec![]));
        assert_eq!(b.blocked("other", Some(1), &f).0, delay(0));
        let g = vec!["other failure".to_string()];
        assert_eq!(b.blocked("w", Some(1), &g), (delay(2), g.clone()));
        assert_eq!(b.blocked("w", Some(2), &g), (delay(0), g.clone()));
        let mut blocked = b.blocked_works();
        blocked.sort();
        assert_eq!(blocked, ["other", "w"]);
        b.clear("w");
        assert_eq!(b.blocked_works(), ["other"]);
        assert_eq!(b.blocked("w", Some(2), &g).0, delay(0));
    }
}
