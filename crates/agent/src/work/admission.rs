//! Work names on their way to the controller: each waits here, once, until fewer than a few
//! reconciles per worker are under way. kube-runtime's scheduler takes every request it is given
//! at once and keeps, per request, the work's key twice and the reason it was queued (about
//! 700 bytes); its tables never shrink, so a burst of 10,000 works (the initial list, a restart)
//! left megabytes behind for the agent's lifetime. Here a waiting work costs its name, and the
//! scheduler holds only the few admitted.
//!
//! No request is lost: a work asked for again while it is admitted waits until its reconcile is
//! done and is then admitted again, so a reconcile always starts after the last request.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};

use futures::Stream;
use tokio::sync::Notify;

/// Reconciles that may be admitted per worker: enough that a worker never waits for the
/// scheduler's debounce of the next one.
pub const PER_WORKER: usize = 4;

/// The works waiting and the works admitted.
#[derive(Debug)]
pub struct Admission {
    state: Mutex<State>,
    changed: Notify,
    limit: usize,
}

#[derive(Debug, Default)]
struct State {
    /// In the order they were asked for, each once.
    waiting: VecDeque<Arc<str>>,
    /// The names in `waiting`.
    queued: HashSet<Arc<str>>,
    /// Handed to the controller, their reconcile not done yet.
    admitted: HashSet<Arc<str>>,
    /// Admitted works asked for again: they wait for their reconcile to be done.
    again: HashSet<Arc<str>>,
}

impl Admission {
    /// Admits up to `limit` works at a time (at least one).
    pub fn new(limit: usize) -> Self {
        Self {
            state: Mutex::default(),
            changed: Notify::new(),
            limit: limit.max(1),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Asks for a reconcile of `work`.
    pub fn offer(&self, work: &str) {
        let mut state = self.state();
        if state.queued.contains(work) || state.again.contains(work) {
            return;
        }
        let name: Arc<str> = Arc::from(work);
        if state.admitted.contains(work) {
            state.again.insert(name);
            return;
        }
        state.queued.insert(name.clone());
        state.waiting.push_back(name);
        drop(state);
        self.changed.notify_one();
    }

    /// The controller is done with a reconcile of `work` (whichever request started it).
    pub fn done(&self, work: &str) {
        let mut state = self.state();
        if !state.admitted.remove(work) {
            return;
        }
        if let Some(name) = state.again.take(work) {
            state.queued.insert(name.clone());
            state.waiting.push_back(name);
        }
        if state.waiting.is_empty() && state.admitted.is_empty() {
            // A burst is over: give its room back.
            let limit = self.limit;
            state.queued.shrink_to(limit);
            state.waiting.shrink_to(limit);
            state.again.shrink_to(limit);
        }
        drop(state);
        self.changed.notify_one();
    }

    fn admit(&self) -> Option<Arc<str>> {
        let mut state = self.state();
        if state.admitted.len() >= self.limit {
            return None;
        }
        let name = state.waiting.pop_front()?;
        state.queued.remove(&name);
        state.admitted.insert(name.clone());
        Some(name)
    }

    /// The works admitted, as they are (one consumer: the controller's queue).
    pub fn admitted(self: Arc<Self>) -> impl Stream<Item = Arc<str>> + Send {
        futures::stream::unfold(self, |admission| async move {
            loop {
                if let Some(name) = admission.admit() {
                    return Some((name, admission));
                }
                // `notify_one` keeps a permit when nobody waits: no change is missed.
                admission.changed.notified().await;
            }
        })
    }

    /// Works waiting (for the queue gauge).
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use std::time::Duration;

    async fn next(out: &mut (impl Stream<Item = Arc<str>> + Unpin)) -> Option<String> {
        tokio::time::timeout(Duration::from_millis(50), out.next())
            .await
            .ok()
            .flatten()
            .map(|n| n.to_string())
    }

    #[tokio::test]
    async fn admits_up_to_the_limit_in_order_each_name_once() {
        let admission = Arc::new(Admission::new(2));
        for name in ["a", "b", "a", "c", "d", "c"] {
            admission.offer(name);
        }
        let mut out = Box::pin(admission.clone().admitted());
        assert_eq!(next(&mut out).await.as_deref(), Some("a"));
        assert_eq!(next(&mut out).await.as_deref(), Some("b"));
        assert_eq!(next(&mut out).await, None, "two are under way");
        assert_eq!(admission.waiting(), 2);
        admission.done("b");
        assert_eq!(next(&mut out).await.as_deref(), Some("c"));
        admission.done("not admitted");
        assert_eq!(next(&mut out).await, None);
        admission.done("a");
        admission.done("c");
        assert_eq!(next(&mut out).await.as_deref(), Some("d"));
        assert_eq!(next(&mut out).await, None);
    }

    #[tokio::test]
    async fn a_work_asked_for_while_admitted_goes_again_after_its_reconcile() {
        let admission = Arc::new(Admission::new(5));
        let mut out = Box::pin(admission.clone().admitted());
        admission.offer("a");
        assert_eq!(next(&mut out).await.as_deref(), Some("a"));
        // Asked for twice while its reconcile runs: one more reconcile, after this one.
        admission.offer("a");
        admission.offer("a");
        assert_eq!(next(&mut out).await, None, "not while it is admitted");
        admission.done("a");
        assert_eq!(next(&mut out).await.as_deref(), Some("a"));
        admission.done("a");
        assert_eq!(next(&mut out).await, None, "once only");
        assert_eq!(admission.waiting(), 0);
    }
}
