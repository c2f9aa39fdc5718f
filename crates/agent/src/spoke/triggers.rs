//! The queue of work names to reconcile from outside the works' own watch (resource watch
//! events, a namespace or CRD appearing): bounded, so a burst of events cannot grow memory
//! without limit. A name that does not fit is counted and dropped; the work's safety-net resync
//! still reconciles it.

use std::collections::HashMap;
use std::time::Duration;

use futures::{Stream, StreamExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tokio_util::time::DelayQueue;
use tokio_util::time::delay_queue::Key;

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

/// The queue's names, each let out `delay` after the last time it was queued: a burst of spoke
/// changes to one work asks for one reconcile, after the burst. Holds one entry per work waiting,
/// so it is bounded by the works there are. With a zero `delay`, names go out as they come.
pub fn debounced(
    rx: mpsc::Receiver<String>,
    depth: Gauge,
    delay: Duration,
) -> impl Stream<Item = String> + Send {
    struct State {
        rx: mpsc::Receiver<String>,
        depth: Gauge,
        open: bool,
        waiting: DelayQueue<String>,
        keys: HashMap<String, Key>,
    }
    let state = State {
        rx,
        depth,
        open: true,
        waiting: DelayQueue::new(),
        keys: HashMap::new(),
    };
    futures::stream::unfold(state, move |mut st| async move {
        loop {
            tokio::select! {
                name = Triggers::receive(&mut st.rx, &st.depth), if st.open => match name {
                    Some(name) if delay.is_zero() => return Some((name, st)),
                    Some(name) => match st.keys.get(&name) {
                        Some(key) => st.waiting.reset(key, delay),
                        None => {
                            let key = st.waiting.insert(name.clone(), delay);
                            st.keys.insert(name, key);
                        }
                    },
                    None => st.open = false,
                },
                Some(expired) = st.waiting.next(), if !st.waiting.is_empty() => {
                    let name = expired.into_inner();
                    st.keys.remove(&name);
                    return Some((name, st));
                }
                else => return None,
            }
        }
    })
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

    #[tokio::test(start_paused = true)]
    async fn a_burst_for_one_work_goes_out_once_after_the_burst() {
        let (triggers, rx) = Triggers::channel(Counter::default(), Gauge::default());
        let start = tokio::time::Instant::now();
        // The controller polls the stream all the time: so does this consumer.
        let consumer = tokio::spawn(async move {
            let out = debounced(rx, Gauge::default(), Duration::from_millis(50));
            out.map(|name| (name, start.elapsed()))
                .collect::<Vec<_>>()
                .await
        });
        for _ in 0..3 {
            assert!(triggers.send("a".into()));
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        assert!(triggers.send("b".into()));
        tokio::time::sleep(Duration::from_millis(200)).await;
        drop(triggers);
        let out = consumer
            .await
            .expect("the consumer ends once the senders are gone");
        // "a" last came at 60 ms, "b" at 90 ms: each goes out once, 50 ms later.
        assert_eq!(
            out,
            vec![
                ("a".to_string(), Duration::from_millis(110)),
                ("b".to_string(), Duration::from_millis(140)),
            ]
        );
    }

    #[tokio::test]
    async fn without_a_delay_names_go_out_as_they_come() {
        let (triggers, rx) = Triggers::channel(Counter::default(), Gauge::default());
        let mut out = Box::pin(debounced(rx, Gauge::default(), Duration::ZERO));
        assert!(triggers.send("a".into()));
        assert!(triggers.send("a".into()));
        assert_eq!(out.next().await.as_deref(), Some("a"));
        assert_eq!(out.next().await.as_deref(), Some("a"));
    }
}
