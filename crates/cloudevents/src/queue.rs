//! What both transports' clients share: the publish queue that keeps only the latest unsent event
//! per work (so a long broker outage costs memory per work, not per status change), the key events
//! are queued under, and the reconnect backoff.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use backon::BackoffBuilder;

use crate::Error;
use crate::event::CloudEvent;
use crate::types::{self, EventType};

/// Events waiting to be published, in order, at most one per key.
#[derive(Debug)]
pub struct LatestQueue<T> {
    /// Key order of what waits.
    order: VecDeque<String>,
    /// Latest item per key.
    latest: HashMap<String, T>,
}

impl<T> Default for LatestQueue<T> {
    fn default() -> Self {
        Self {
            order: VecDeque::new(),
            latest: HashMap::new(),
        }
    }
}

impl<T> LatestQueue<T> {
    /// Items waiting.
    pub fn len(&self) -> usize {
        self.latest.len()
    }

    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.latest.is_empty()
    }

    /// Queues `item` under `key`, replacing an unsent item of the same key in its place. A new
    /// key is refused when `held` (what the caller holds besides this queue, e.g. in flight) plus
    /// the queue reach `capacity`.
    pub fn push(
        &mut self,
        key: String,
        item: T,
        capacity: usize,
        held: usize,
    ) -> Result<(), Error> {
        if !self.latest.contains_key(&key) {
            if self.len() + held >= capacity {
                return Err(Error::Binding(format!(
                    "publish queue full ({capacity} events)"
                )));
            }
            self.order.push_back(key.clone());
        }
        self.latest.insert(key, item);
        Ok(())
    }

    /// The oldest key's latest item.
    pub fn pop(&mut self) -> Option<(String, T)> {
        while let Some(key) = self.order.pop_front() {
            if let Some(item) = self.latest.remove(&key) {
                return Some((key, item));
            }
        }
        None
    }

    /// Whether an item for `key` waits.
    pub fn contains(&self, key: &str) -> bool {
        self.latest.contains_key(key)
    }

    /// The oldest item whose key `eligible` accepts (e.g. one not in flight already), skipping a
    /// work's final status while its last one still waits here.
    pub fn pop_first(&mut self, eligible: impl Fn(&str) -> bool) -> Option<(String, T)> {
        let at = self.order.iter().position(|k| {
            eligible(k) && goes_after(k).is_none_or(|b| !self.latest.contains_key(b))
        })?;
        let key = self.order.remove(at)?;
        match self.latest.remove(&key) {
            Some(item) => Some((key, item)),
            // An order entry without an item cannot be made; skip it if it ever is.
            None => self.pop_first(eligible),
        }
    }

    /// Puts an item the receiver refused for now back at the end, unless a newer one for the key
    /// is already queued.
    pub fn retry_later(&mut self, key: String, item: T) {
        if !self.latest.contains_key(&key) {
            self.order.push_back(key.clone());
            self.latest.insert(key, item);
        }
    }

    /// Puts an item that could not be delivered back at the front, unless a newer one for the
    /// key is already queued.
    pub fn requeue(&mut self, key: String, item: T) {
        if !self.latest.contains_key(&key) {
            self.order.push_front(key.clone());
            self.latest.insert(key, item);
        }
    }

    /// Drops the item of `key`.
    pub fn remove(&mut self, key: &str) -> Option<T> {
        let item = self.latest.remove(key)?;
        self.order.retain(|k| k != key);
        Some(item)
    }
}

/// Events the broker took but nobody heard: MQTT 5 acknowledges a publish that matched no
/// subscription with reason 0x10 ("no matching subscribers"), which is what a source that
/// subscribes with a clean start (Maestro's server) leaves behind while it restarts. The broker
/// does not keep such an event, and the source asks nobody for what it missed (Maestro addresses
/// its status resync request to the consumer's id, which an agent subscribed by name never sees),
/// so the agent holds the latest event per key and sends one again as a probe, after a delay that
/// grows from `min` to `max`; when any event is heard, every held one goes out again.
///
/// The delays only decide how soon a returning source hears what it missed, never what it hears.
#[derive(Debug)]
pub struct Unheard<T> {
    held: LatestQueue<T>,
    min: Duration,
    max: Duration,
    delay: Duration,
    probe_at: Option<Instant>,
}

impl<T> Unheard<T> {
    /// Probes after `min`, then twice as long each time, up to `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            held: LatestQueue::default(),
            min,
            max: max.max(min),
            delay: min,
            probe_at: None,
        }
    }

    /// Events held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Holds `item`, unheard at `now`, replacing a held one of the same key; schedules a probe
    /// when none is due.
    pub fn hold(&mut self, key: String, item: T, now: Instant) {
        if let Err(e) = self.held.push(key, item, usize::MAX, 0) {
            // Unreachable with no capacity limit; the caller's queue bounds what is held.
            tracing::warn!(error = %e, "an unheard event could not be held");
        }
        if self.probe_at.is_none() {
            self.probe_at = Some(now + self.delay);
            self.delay = (self.delay * 2).min(self.max);
        }
    }

    /// Whether an event of `key` is held.
    pub fn contains(&self, key: &str) -> bool {
        self.held.contains(key)
    }

    /// Drops the held event of `key`: a newer one replaces it.
    pub fn forget(&mut self, key: &str) {
        self.held.remove(key);
    }

    /// The oldest held event when a probe is due at `now`; the next probe is scheduled when it
    /// comes back unheard.
    pub fn probe(&mut self, now: Instant) -> Option<(String, T)> {
        if self.probe_at.is_some_and(|at| now >= at) {
            let probe = self.held.pop();
            if probe.is_some() {
                self.probe_at = None;
            }
            return probe;
        }
        None
    }

    /// When the next probe is due, while events are held.
    pub fn next_probe(&self) -> Option<Instant> {
        self.probe_at.filter(|_| !self.held.is_empty())
    }

    /// Someone heard an event: every held one, oldest first, to be sent again.
    pub fn heard(&mut self) -> Vec<(String, T)> {
        self.delay = self.min;
        self.probe_at = None;
        std::iter::from_fn(|| self.held.pop()).collect()
    }
}

/// The queue key of an event: the work's UID, so a newer status replaces an unsent one; a spec
/// resync request replaces an unsent one (it lists the versions held when it was made, so only
/// the newest is worth sending after a reconnect); other events queue on their own.
///
/// A work's final status (`Deleted=True`) has a key of its own: it must not replace a status
/// still waiting, because sources act on the last status before it. OCM's hub deletes a work
/// after its TTL only once it has seen `Complete=True`, and answers `Deleted` by releasing the
/// finalizer without looking at the conditions.
pub fn event_key(event: &CloudEvent) -> String {
    if let Some(uid) = event.ext_string(types::EXT_RESOURCE_ID) {
        if is_final_status(event) {
            return format!("{uid}{FINAL_SUFFIX}");
        }
        return uid;
    }
    if event.type_ == EventType::SpecResyncRequest.as_type() {
        return format!(
            "resync/{}",
            event
                .ext_string(types::EXT_ORIGINAL_SOURCE)
                .unwrap_or_default()
        );
    }
    format!("event/{}", event.id)
}

/// Appended to a work's key for its final status.
const FINAL_SUFFIX: &str = "/deleted";

/// The key whose event must be delivered before the one of `key` may go: a work's last status
/// before its final one.
pub fn goes_after(key: &str) -> Option<&str> {
    key.strip_suffix(FINAL_SUFFIX)
}

/// Whether `event` is a status with the condition `Deleted` = `True`.
fn is_final_status(event: &CloudEvent) -> bool {
    const NEEDLE: &[u8] = br#""type":"Deleted""#;
    let Some(data) = event.data.as_deref() else {
        return false;
    };
    if event.type_ != EventType::StatusUpdate.as_type()
        || !data.windows(NEEDLE.len()).any(|w| w == NEEDLE)
    {
        return false;
    }
    serde_json::from_slice::<crate::codec::ManifestBundleStatus>(data).is_ok_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Deleted" && c.status == "True")
    })
}

/// Upstream's reconnect delays: exponential from `min` to `max`, jittered, never giving up.
pub fn reconnect_backoff(min: Duration, max: Duration) -> impl Iterator<Item = Duration> {
    backon::ExponentialBuilder::default()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_jitter()
        .without_max_times()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_per_work_and_one_spec_resync_request() {
        let status = CloudEvent::new(EventType::StatusUpdate, "agent")
            .with_ext(types::EXT_RESOURCE_ID, crate::ExtValue::String("w1".into()));
        assert_eq!(event_key(&status), "w1");
        let resync = |_: u8| {
            CloudEvent::new(EventType::SpecResyncRequest, "agent").with_ext(
                types::EXT_ORIGINAL_SOURCE,
                crate::ExtValue::String(String::new()),
            )
        };
        assert_eq!(event_key(&resync(1)), event_key(&resync(2)));
        let mut deleted = status.clone();
        deleted.data = Some(
            br#"{"conditions":[{"type":"Complete","status":"True","reason":"r","message":"","lastTransitionTime":"2026-11-26T00:00:00Z"},{"type":"Deleted","status":"True","reason":"ManifestsDeleted","message":"","lastTransitionTime":"2026-11-26T00:00:00Z"}]}"#
                .to_vec(),
        );
        assert_eq!(
            event_key(&deleted),
            "w1/deleted",
            "the final status waits beside the last one"
        );
        let mut not_yet = deleted.clone();
        not_yet.data = Some(
            br#"{"conditions":[{"type":"Deleted","status":"False","reason":"r","message":"","lastTransitionTime":"2026-11-26T00:00:00Z"}]}"#
                .to_vec(),
        );
        assert_eq!(event_key(&not_yet), "w1");
        assert_eq!(goes_after("w1/deleted"), Some("w1"));
        assert_eq!(goes_after("w1"), None);
        let other = CloudEvent::new(EventType::StatusResyncRequest, "agent");
        assert_eq!(event_key(&other), format!("event/{}", other.id));
    }

    #[test]
    fn unheard_events_wait_latest_per_key_and_go_again_once_one_is_heard() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut u = Unheard::new(s(1), s(4));
        assert_eq!(u.probe(t0 + s(100)), None, "nothing held, no probe");
        u.hold("a".into(), 1, t0);
        u.hold("b".into(), 2, t0);
        u.hold("a".into(), 3, t0);
        assert_eq!(u.len(), 2, "latest per key");
        assert_eq!(u.probe(t0), None, "not before the delay");
        assert_eq!(
            u.probe(t0 + s(1)),
            Some(("a".to_string(), 3)),
            "oldest first"
        );
        assert_eq!(u.probe(t0 + s(1)), None, "one probe at a time");
        // The probe was unheard too: the next one waits twice as long.
        u.hold("a".into(), 3, t0 + s(2));
        assert_eq!(u.probe(t0 + s(3)), None);
        assert_eq!(u.probe(t0 + s(4)), Some(("b".to_string(), 2)));
        u.hold("b".into(), 2, t0 + s(4));
        let (k, v) = u.probe(t0 + s(8)).expect("due at 8");
        u.hold(k, v, t0 + s(8));
        assert_eq!(u.probe(t0 + s(11)), None, "capped at the max: due at 12");
        assert_eq!(u.probe(t0 + s(12)), Some(("b".to_string(), 2)));
        u.hold("c".into(), 4, t0 + s(12));
        u.forget("c");
        // The probe was heard: what is still held goes again.
        let again = u.heard();
        assert_eq!(
            again.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            ["a"],
            "the probe is out already and a forgotten key does not go again"
        );
        assert!(u.is_empty());
        u.hold("d".into(), 5, t0 + s(20));
        assert_eq!(u.probe(t0 + s(20)), None);
        assert!(u.probe(t0 + s(21)).is_some(), "back to the first delay");
    }

    #[test]
    fn latest_per_key_in_order_and_requeue_keeps_newer() {
        let mut q = LatestQueue::default();
        q.push("a".into(), 1, 10, 0).expect("room");
        q.push("b".into(), 2, 10, 0).expect("room");
        q.push("a".into(), 3, 10, 0).expect("replaces in place");
        assert_eq!(q.len(), 2);
        assert_eq!(q.pop(), Some(("a".to_string(), 3)));
        q.push("a".into(), 4, 10, 0).expect("room");
        q.requeue("a".into(), 3);
        q.requeue("c".into(), 5);
        assert_eq!(q.pop(), Some(("c".to_string(), 5)), "requeued at the front");
        assert_eq!(q.pop(), Some(("b".to_string(), 2)));
        assert_eq!(q.pop(), Some(("a".to_string(), 4)), "the newer one won");
        assert_eq!(q.pop(), None);
        q.push("a".into(), 1, 10, 0).expect("room");
        q.retry_later("b".into(), 2);
        q.retry_later("a".into(), 0);
        assert_eq!(
            q.pop(),
            Some(("a".to_string(), 1)),
            "the newer one stays, in its place"
        );
        assert_eq!(q.pop(), Some(("b".to_string(), 2)));
        q.push("a".into(), 1, 10, 0).expect("room");
        q.push("b".into(), 2, 10, 0).expect("room");
        assert_eq!(q.pop_first(|k| k != "a"), Some(("b".to_string(), 2)));
        assert!(q.contains("a") && !q.contains("b"));
        assert_eq!(q.pop_first(|k| k != "a"), None);
        assert_eq!(q.pop(), Some(("a".to_string(), 1)));
        q.push("w/deleted".into(), 1, 10, 0).expect("room");
        q.push("w".into(), 2, 10, 0).expect("room");
        assert_eq!(
            q.pop_first(|_| true),
            Some(("w".to_string(), 2)),
            "the last status before the final one, whatever their order"
        );
        assert_eq!(q.pop_first(|_| true), Some(("w/deleted".to_string(), 1)));
        q.push("x".into(), 1, 2, 1).expect("room for one");
        assert!(q.push("y".into(), 1, 2, 1).is_err(), "full");
        q.push("x".into(), 2, 2, 1)
            .expect("a queued key is replaced even when full");
    }
}
