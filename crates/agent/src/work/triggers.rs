//! The queue of work names to reconcile from outside the works' own watch (resource watch
//! events, a namespace or CRD appearing): bounded, so a burst of events cannot grow memory
//! without limit. A name that does not fit is counted and dropped; the work's safety-net resync
//! still reconciles it.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;

/// How many work names may wait in the queue.
pub const CAPACITY: usize = 16_384;

/// The sending side, shared by every source of triggers.
#[derive(Clone, Debug)]
pub struct Triggers {
    tx: mpsc::Sender<String>,
    overflows: Counter,
    depth: Gauge,
}

impl Triggers {
    /// A queue of [`CAPACITY`] names; drops are counted in `overflows`, the names waiting shown
    /// in `depth`.
    pub fn channel(overflows: Counter, depth: Gauge) -> (Self, mpsc::Receiver<String>) {
        let (tx, rx) = mpsc::channel(CAPACITY);
        (
            Self {
                tx,
                overflows,
                depth,
            },
            rx,
        )
    }

    /// Takes the next name off the queue (the controller's side), keeping the depth gauge.
    pub async fn receive(rx: &mut mpsc::Receiver<String>, depth: &Gauge) -> Option<String> {
        let name = rx.recv().await;
        depth.set(i64::try_from(rx.len()).unwrap_or(i64::MAX));
        name
    }

    /// Queues a work; false once the controller is gone (then the sender should stop).
    pub fn send(&self, work: String) -> bool {
        match self.tx.try_send(work) {
            Ok(()) => {
                let waiting = self.tx.max_capacity() - self.tx.capacity();
                self.depth.set(i64::try_from(waiting).unwrap_or(i64::MAX));
                true
            }
            Err(mpsc::error::TrySendError::Full(work)) => {
                self.overflows.inc();
                tracing::debug!(work = %work, "trigger queue full; left to the resync");
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_counts_instead_of_growing() {
        let overflows = Counter::default();
        let depth = Gauge::default();
        let (triggers, mut rx) = Triggers::channel(overflows.clone(), depth.clone());
        for i in 0..CAPACITY + 3 {
            assert!(triggers.send(format!("w{i}")));
        }
        assert_eq!(overflows.get(), 3);
        assert_eq!(depth.get(), CAPACITY as i64);
        assert_eq!(rx.try_recv().ok().as_deref(), Some("w0"));
        drop(rx);
        assert!(!triggers.send("late".into()));
    }

    #[tokio::test]
    async fn the_depth_gauge_follows_sends_and_receives() {
        let depth = Gauge::default();
        let (triggers, mut rx) = Triggers::channel(Counter::default(), depth.clone());
        triggers.send("a".into());
        triggers.send("b".into());
        assert_eq!(depth.get(), 2);
        assert_eq!(
            Triggers::receive(&mut rx, &depth).await.as_deref(),
            Some("a")
        );
        assert_eq!(depth.get(), 1);
        Triggers::receive(&mut rx, &depth).await;
        assert_eq!(depth.get(), 0);
    }
}
