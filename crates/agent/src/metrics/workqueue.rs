//! client-go's workqueue metrics (`workqueue_*{name}`) for the ManifestWork controller's queue,
//! under the names and the queue name (`ManifestWorkAgent`) that Maestro's agent dashboards and
//! runbooks query. The controller's queue is kube-runtime's scheduler, which shows nothing of
//! itself: the agent keeps the names it has queued and the reconciles running, as client-go's
//! queue does, and reads the gauges from them at each scrape.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;

/// The queue name Maestro's agent dashboards select (`workqueue_depth{name="ManifestWorkAgent"}`).
pub const QUEUE_NAME: &str = "ManifestWorkAgent";

/// client-go's workqueue latency buckets: 10 ns to 10 s, ×10 each. Written out, so that the
/// bound the SLOs select (`le="1.0"`) is exactly 1 (repeated multiplication drifts).
const LATENCY_BUCKETS: [f64; 10] = [1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The works waiting in the queue and the works being reconciled, each with the instant it
/// entered that state.
#[derive(Debug, Default)]
struct QueueState {
    waiting: HashMap<String, Instant>,
    running: HashMap<String, Instant>,
}

/// Entries the maps keep room for when the queue is empty.
const IDLE_ROOM: usize = 64;

impl QueueState {
    /// A burst is over: give its room back. A map keeps the room of its largest size, and the
    /// first list of 10,000 works left room for 16,384 names (about 0.7 MiB) for good.
    fn shrink_when_idle(&mut self) {
        if self.waiting.is_empty() && self.running.is_empty() {
            self.waiting.shrink_to(IDLE_ROOM);
            self.running.shrink_to(IDLE_ROOM);
        }
    }
}

/// The queue's metrics; clones share them.
#[derive(Clone, Debug)]
pub struct WorkQueueMetrics {
    state: Arc<Mutex<QueueState>>,
    adds: Counter,
    retries: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
}

impl Default for WorkQueueMetrics {
    fn default() -> Self {
        Self {
            state: Arc::default(),
            adds: Counter::default(),
            retries: Counter::default(),
            queue_duration: latency_histogram(),
            work_duration: latency_histogram(),
        }
    }
}

impl WorkQueueMetrics {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request to reconcile `work` entered the queue. As in client-go, a work already waiting
    /// is not added again (the queue holds each name once) and keeps its first time.
    pub fn added(&self, work: &str) {
        let mut state = self.state();
        if !state.waiting.contains_key(work) {
            state.waiting.insert(work.to_string(), Instant::now());
            self.adds.inc();
        }
    }

    /// The queue dropped its request for `work` (the work is gone from the hub).
    pub fn dropped(&self, work: &str) {
        let mut state = self.state();
        state.waiting.remove(work);
        state.shrink_when_idle();
    }

    /// A reconcile of `work` starts: its wait in the queue ends. A start without a request
    /// seen here is the controller's own requeue (a resync or a retry falling due): it counts
    /// as an add, and its wait is not known, so it is not observed.
    pub fn started(&self, work: &str) {
        let now = Instant::now();
        let mut state = self.state();
        match state.waiting.remove(work) {
            Some(since) => self
                .queue_duration
                .observe(now.saturating_duration_since(since).as_secs_f64()),
            None => {
                self.adds.inc();
            }
        }
        state.running.insert(work.to_string(), now);
    }

    /// The reconcile of `work` ended.
    pub fn finished(&self, work: &str) {
        let started = {
            let mut state = self.state();
            let started = state.running.remove(work);
            state.shrink_when_idle();
            started
        };
        if let Some(started) = started {
            self.work_duration.observe(
                Instant::now()
                    .saturating_duration_since(started)
                    .as_secs_f64(),
            );
        }
    }

    /// A failed reconcile was queued again after a back-off (client-go's `AddRateLimited`).
    pub fn retried(&self) {
        self.retries.inc();
    }
}

/// Encodes `metric` as the one sample of family `name`, labelled with the queue's name.
fn encode_one(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric: &impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    metric.encode(
        encoder
            .encode_descriptor(name, help, None, metric.metric_type())?
            .encode_family(&[("name", QUEUE_NAME)])?,
    )
}

impl Collector for WorkQueueMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let now = Instant::now();
        let (depth, unfinished, longest) = {
            let state = self.state();
            let running = state
                .running
                .values()
                .map(|t| now.saturating_duration_since(*t).as_secs_f64());
            let (sum, max) = running.fold((0.0_f64, 0.0_f64), |(s, m), d| (s + d, m.max(d)));
            (state.waiting.len(), sum, max)
        };
        let e = &mut encoder;
        encode_one(
            e,
            "workqueue_depth",
            "Current depth of workqueue",
            &ConstGauge::new(i64::try_from(depth).unwrap_or(i64::MAX)),
        )?;
        encode_one(
            e,
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            &self.adds,
        )?;
        encode_one(
            e,
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            &self.retries,
        )?;
        encode_one(
            e,
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            &self.queue_duration,
        )?;
        encode_one(
            e,
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            &self.work_duration,
        )?;
        encode_one(
            e,
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and not yet observed by work_duration",
            &ConstGauge::new(unfinished),
        )?;
        encode_one(
            e,
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            &ConstGauge::new(longest),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::registry::Registry;

    fn scrape(queue: &WorkQueueMetrics) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(queue.clone()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
        text
    }

    /// Asserts that the scrape of `queue` has each `sample`: `series value`, the queue's label
    /// added to the series (`series{le="1.0"}` becomes `series{le="1.0",name="..."}`).
    fn assert_samples(queue: &WorkQueueMetrics, samples: &[(&str, &str)]) {
        let text = scrape(queue);
        for (series, value) in samples {
            let label = format!("name=\"{QUEUE_NAME}\"");
            let line = match series.strip_suffix('}') {
                Some(open) => format!("{open},{label}}} {value}"),
                None => format!("{series}{{{label}}} {value}"),
            };
            assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
        }
    }

    #[test]
    fn a_work_queued_twice_before_its_reconcile_is_one_add() {
        let queue = WorkQueueMetrics::default();
        queue.added("a");
        queue.added("a");
        queue.added("b");
        assert_samples(
            &queue,
            &[("workqueue_depth", "2"), ("workqueue_adds_total", "2")],
        );
        queue.started("a");
        assert_samples(
            &queue,
            &[
                ("workqueue_depth", "1"),
                ("workqueue_queue_duration_seconds_count", "1"),
                ("workqueue_work_duration_seconds_count", "0"),
            ],
        );
        queue.finished("a");
        queue.dropped("b");
        assert_samples(
            &queue,
            &[
                ("workqueue_depth", "0"),
                ("workqueue_work_duration_seconds_count", "1"),
                ("workqueue_longest_running_processor_seconds", "0.0"),
            ],
        );
    }

    #[test]
    fn a_burst_gives_its_room_back_once_the_queue_is_empty() {
        let queue = WorkQueueMetrics::default();
        let names: Vec<String> = (0..10_000).map(|i| format!("w{i}")).collect();
        for n in &names {
            queue.added(n);
        }
        for n in &names {
            queue.started(n);
            queue.finished(n);
        }
        let state = queue.state();
        assert!(state.waiting.is_empty() && state.running.is_empty());
        assert!(
            state.waiting.capacity() <= 2 * IDLE_ROOM,
            "{} names of room kept",
            state.waiting.capacity()
        );
    }

    #[test]
    fn a_requeue_by_the_controller_is_an_add_without_a_measured_wait() {
        let queue = WorkQueueMetrics::default();
        queue.started("a");
        queue.finished("a");
        queue.retried();
        assert_samples(
            &queue,
            &[
                ("workqueue_adds_total", "1"),
                ("workqueue_retries_total", "1"),
                ("workqueue_queue_duration_seconds_count", "0"),
                // Upstream's buckets: the SLOs select le="1.0".
                (r#"workqueue_work_duration_seconds_bucket{le="1.0"}"#, "1"),
            ],
        );
    }

    #[test]
    fn a_running_reconcile_shows_in_the_unfinished_gauges() {
        let queue = WorkQueueMetrics::default();
        queue.started("a");
        std::thread::sleep(std::time::Duration::from_millis(20));
        let text = scrape(&queue);
        let value = |name: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}{{name=\"ManifestWorkAgent\"}} ")))
                .and_then(|v| v.parse().ok())
                .unwrap_or(-1.0)
        };
        assert!(value("workqueue_unfinished_work_seconds") >= 0.02, "{text}");
        assert!(
            value("workqueue_longest_running_processor_seconds") >= 0.02,
            "{text}"
        );
    }
}
