//! What the client holds of the events bound for the source, whatever the wire: the latest unsent
//! event per work, the ones on their way, the ones no source heard and the ones a source refused
//! for now; and what each outcome of a send does to them. Plain data; the client's tasks lock it.

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::Error;
use crate::event::CloudEvent;
use crate::queue::{LatestQueue, Unheard, goes_after};
use crate::transport::Sent;
use crate::types;

use super::stats::Stats;

/// First delay before an unheard event is sent again as a probe.
const UNHEARD_RETRY_MIN: Duration = Duration::from_secs(1);
/// Longest delay between two probes while no source listens: how late at most a returning
/// source hears what it missed (one held event is sent per period while it is away).
const UNHEARD_RETRY_MAX: Duration = Duration::from_secs(10);
/// First wait before an event the source refused is tried again; it doubles per refusal in a row.
const REFUSED_DELAY: Duration = Duration::from_millis(100);
/// Longest wait between tries of an event the source refused.
const MAX_REFUSED_DELAY: Duration = Duration::from_secs(5);

/// The events bound for the source, by the work they are of ([`crate::queue::event_key`]).
pub(super) struct Outbox {
    /// What waits to be sent: the latest event per work.
    queue: LatestQueue<CloudEvent>,
    /// Handed to the transport, not settled yet (one per work at a time, so that a work's
    /// statuses arrive in order).
    inflight: HashMap<String, CloudEvent>,
    /// Taken by a broker while no source listened: sent again once one does.
    unheard: Unheard<CloudEvent>,
    /// Refused by the source for now, with when to try again.
    delayed: HashMap<String, (Instant, CloudEvent)>,
    /// Refusals in a row per work, for the retry delay.
    refusals: HashMap<String, u32>,
    /// The last answer was "nobody listens" (logged once per outage).
    nobody_listens: bool,
    capacity: usize,
    /// Counters for metrics and probes.
    pub(super) stats: Stats,
    /// Events dropped as over the wire's ceiling when they were to be sent.
    pub(super) too_large: u64,
}

/// What a settled send asks of the client besides the bookkeeping.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Settled {
    /// A source took an event: wake who waits for [`super::Publisher::taken`].
    pub taken: bool,
    /// The connection failed (why): end it and connect anew.
    pub lost: Option<String>,
}

impl Outbox {
    /// An empty outbox holding at most `capacity` works' events.
    pub(super) fn new(capacity: usize) -> Self {
        Self {
            queue: LatestQueue::default(),
            inflight: HashMap::new(),
            unheard: Unheard::new(UNHEARD_RETRY_MIN, UNHEARD_RETRY_MAX),
            delayed: HashMap::new(),
            refusals: HashMap::new(),
            nobody_listens: false,
            capacity,
            stats: Stats::default(),
            too_large: 0,
        }
    }

    /// Events waiting to be sent (not on their way, held unheard or refused for now).
    pub(super) fn waiting(&self) -> usize {
        self.queue.len()
    }

    fn depth(&self) -> usize {
        self.queue.len() + self.inflight.len() + self.unheard.len() + self.delayed.len()
    }

    fn count_depth(&mut self) {
        self.stats.queue_depth = self.depth();
    }

    /// Queues `event` under `key`, replacing a queued, unsent event of the same work (and any
    /// held one: the newer goes instead).
    pub(super) fn push(&mut self, key: String, event: CloudEvent) -> Result<(), Error> {
        self.unheard.forget(&key);
        self.delayed.remove(&key);
        let held = self.inflight.len() + self.unheard.len() + self.delayed.len();
        self.queue.push(key, event, self.capacity, held)?;
        self.count_depth();
        Ok(())
    }

    /// Whether the event of `key` published last is not yet taken: queued, on its way, held
    /// unheard, or refused for now.
    pub(super) fn is_pending(&self, key: &str) -> bool {
        self.queue.contains(key)
            || self.inflight.contains_key(key)
            || self.unheard.contains(key)
            || self.delayed.contains_key(key)
    }

    /// The next event to send, marked as on its way: the oldest queued one whose work has none
    /// on its way, and a work's final status only once its last one is through. Before looking,
    /// refused events that are due go back into the queue and, when nothing else could tell
    /// whether a source listens again, one unheard event is sent as a probe. Returns when the
    /// next refused event or probe is due, too.
    pub(super) fn next(&mut self, now: Instant) -> (Option<(String, CloudEvent)>, Option<Instant>) {
        let mut due = self.promote_due(now);
        if self.queue.is_empty() && self.inflight.is_empty() {
            match self.unheard.probe(now.into_std()) {
                Some((key, event)) => self.queue.requeue(key, event),
                None => {
                    let probe = self.unheard.next_probe().map(Instant::from_std);
                    due = due.into_iter().chain(probe).min();
                }
            }
        }
        let (inflight, delayed) = (&self.inflight, &self.delayed);
        let next = self.queue.pop_first(|k| {
            !inflight.contains_key(k)
                && goes_after(k)
                    .is_none_or(|b| !inflight.contains_key(b) && !delayed.contains_key(b))
        });
        if let Some((key, event)) = &next {
            self.inflight.insert(key.clone(), event.clone());
        }
        self.count_depth();
        (next, due)
    }

    /// Moves the refused events that are due back into the queue (unless a newer event of the
    /// work is queued or on its way); returns when the next one is due.
    fn promote_due(&mut self, now: Instant) -> Option<Instant> {
        let due: Vec<String> = self
            .delayed
            .iter()
            .filter(|(_, (at, _))| *at <= now)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            if let Some((_, event)) = self.delayed.remove(&key)
                && !self.inflight.contains_key(&key)
            {
                self.queue.retry_later(key, event);
            }
        }
        self.delayed.values().map(|(at, _)| *at).min()
    }

    /// Books what became of the event of `key` that was on its way.
    pub(super) fn settle(&mut self, key: String, outcome: Sent, now: Instant) -> Settled {
        let Some(event) = self.inflight.remove(&key) else {
            return Settled::default();
        };
        let mut settled = Settled::default();
        match outcome {
            Sent::Taken => {
                self.refusals.remove(&key);
                *self.stats.sent.entry(event.type_).or_default() += 1;
                settled.taken = true;
                // Someone listens again: what nobody heard goes out (behind anything newer).
                let again = self.unheard.heard();
                if std::mem::take(&mut self.nobody_listens) {
                    tracing::info!(
                        events = again.len(),
                        "a source listens again; sending the events nobody heard"
                    );
                }
                for (key, event) in again {
                    self.queue.retry_later(key, event);
                }
            }
            Sent::NobodyListens => {
                if !std::mem::replace(&mut self.nobody_listens, true) {
                    tracing::info!(
                        event_type = %event.type_,
                        "the broker says no source is subscribed; holding events until one is"
                    );
                }
                self.stats.unheard += 1;
                if !self.queue.contains(&key) {
                    self.unheard.hold(key, event, now.into_std());
                }
            }
            Sent::Refused(why) => {
                let refusals = self.refusals.entry(key.clone()).or_default();
                *refusals = refusals.saturating_add(1);
                let delay = REFUSED_DELAY
                    .saturating_mul(1 << (*refusals - 1).min(16))
                    .min(MAX_REFUSED_DELAY);
                tracing::warn!(
                    event_type = %event.type_,
                    key = %key,
                    error = %why,
                    ?delay,
                    "the source could not apply the event; trying again"
                );
                // Unless a newer event of the work came meanwhile: that one goes instead.
                if !self.queue.contains(&key) {
                    self.delayed.insert(key, (now + delay, event));
                }
            }
            Sent::Malformed(why) => {
                self.refusals.remove(&key);
                self.stats.dropped += 1;
                tracing::error!(
                    event_type = %event.type_,
                    key = %key,
                    error = %why,
                    "the source refused the event as malformed; dropped"
                );
            }
            Sent::TooLarge(why) => {
                self.refusals.remove(&key);
                self.too_large += 1;
                tracing::warn!(
                    event_type = %event.type_,
                    resource_id = event.ext_string(types::EXT_RESOURCE_ID).as_deref().unwrap_or(""),
                    error = %why,
                    "the event is over the wire's ceiling; dropped"
                );
            }
            Sent::Lost(why) => {
                self.queue.requeue(key, event);
                settled.lost = Some(why);
            }
        }
        self.count_depth();
        settled
    }

    /// After a connection loss or a failed attempt: not ready, a reconnect counted.
    pub(super) fn disconnected(&mut self) {
        self.stats.ready = false;
        self.stats.reconnects += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::event_key;
    use crate::types::{self, EventType};
    use crate::{CloudEvent, ExtValue};

    fn status(uid: &str, n: u32) -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::StatusUpdate, "agent")
            .with_ext(types::EXT_RESOURCE_ID, ExtValue::String(uid.into()));
        ev.data = Some(format!(r#"{{"n":{n}}}"#).into_bytes());
        ev
    }

    fn deleted(uid: &str) -> CloudEvent {
        let mut ev = status(uid, 0);
        ev.data = Some(br#"{"conditions":[{"type":"Deleted","status":"True","reason":"ManifestsDeleted","message":"","lastTransitionTime":"2026-01-01T00:00:00Z"}]}"#.to_vec());
        ev
    }

    fn push(out: &mut Outbox, ev: CloudEvent) -> String {
        let key = event_key(&ev);
        out.push(key.clone(), ev).expect("room");
        key
    }

    fn sent_data(out: &mut Outbox, now: Instant) -> Option<String> {
        out.next(now)
            .0
            .map(|(_, ev)| String::from_utf8(ev.data.unwrap_or_default()).unwrap_or_default())
    }

    #[test]
    fn a_newer_status_replaces_the_queued_one_and_a_work_has_one_on_its_way() {
        let now = Instant::now();
        let mut out = Outbox::new(10);
        let a = push(&mut out, status("a", 1));
        push(&mut out, status("a", 2));
        assert_eq!(out.stats.queue_depth, 1);
        assert_eq!(sent_data(&mut out, now).as_deref(), Some(r#"{"n":2}"#));
        push(&mut out, status("a", 3));
        assert_eq!(out.next(now).0, None, "a's last status is still on its way");
        assert!(out.is_pending(&a));
        assert!(out.settle(a.clone(), Sent::Taken, now).taken);
        assert_eq!(sent_data(&mut out, now).as_deref(), Some(r#"{"n":3}"#));
        out.settle(a.clone(), Sent::Taken, now);
        assert!(!out.is_pending(&a));
        assert_eq!(
            out.stats.sent.get(
                "io.open-cluster-management.works.v1alpha1.manifestbundles.status.update_request"
            ),
            Some(&2)
        );
    }

    #[test]
    fn a_final_status_waits_for_the_works_last_one() {
        let now = Instant::now();
        let mut out = Outbox::new(10);
        let a = push(&mut out, status("a", 1));
        assert!(out.next(now).0.is_some());
        let gone = push(&mut out, deleted("a"));
        assert_ne!(gone, a);
        assert_eq!(
            out.next(now).0,
            None,
            "Deleted goes after the status on its way"
        );
        out.settle(a, Sent::Taken, now);
        assert_eq!(out.next(now).0.map(|(k, _)| k), Some(gone));
    }

    #[test]
    fn a_lost_event_goes_first_again_unless_a_newer_one_waits() {
        let now = Instant::now();
        let mut out = Outbox::new(10);
        let a = push(&mut out, status("a", 1));
        push(&mut out, status("b", 1));
        assert!(out.next(now).0.is_some());
        let settled = out.settle(a.clone(), Sent::Lost("reset".into()), now);
        assert!(settled.lost.is_some() && !settled.taken);
        assert_eq!(out.next(now).0.map(|(k, _)| k), Some(a.clone()));
        push(&mut out, status("a", 2));
        out.settle(a, Sent::Lost("reset".into()), now);
        assert_eq!(sent_data(&mut out, now).as_deref(), Some(r#"{"n":1}"#), "b");
        assert_eq!(
            sent_data(&mut out, now).as_deref(),
            Some(r#"{"n":2}"#),
            "a's newer one"
        );
    }

    #[test]
    fn a_refused_event_waits_a_growing_delay_and_a_malformed_one_is_dropped() {
        let now = Instant::now();
        let mut out = Outbox::new(10);
        let a = push(&mut out, status("a", 1));
        out.next(now);
        out.settle(a.clone(), Sent::Refused("conflict".into()), now);
        assert!(out.is_pending(&a));
        let (none, due) = out.next(now);
        assert_eq!(none, None);
        assert_eq!(due, Some(now + REFUSED_DELAY));
        let (again, _) = out.next(now + REFUSED_DELAY);
        assert!(again.is_some());
        out.settle(a.clone(), Sent::Refused("conflict".into()), now);
        assert_eq!(out.next(now).1, Some(now + REFUSED_DELAY * 2));
        out.next(now + REFUSED_DELAY * 2);
        out.settle(a.clone(), Sent::Malformed("bad".into()), now);
        assert!(!out.is_pending(&a));
        assert_eq!(out.stats.dropped, 1);
    }

    #[test]
    fn an_event_over_the_ceiling_is_dropped_and_counted_apart() {
        let now = Instant::now();
        let mut out = Outbox::new(10);
        let a = push(&mut out, status("a", 1));
        out.next(now);
        let settled = out.settle(a.clone(), Sent::TooLarge("over".into()), now);
        assert_eq!(settled, Settled::default(), "the connection stays up");
        assert!(!out.is_pending(&a));
        assert_eq!((out.too_large, out.stats.dropped), (1, 0));
        assert_eq!(out.stats.queue_depth, 0);
    }

    #[test]
    fn unheard_events_go_again_once_a_source_listens() {
        let now = Instant::now();
        let mut out = Outbox::new(10);
        let a = push(&mut out, status("a", 1));
        let b = push(&mut out, status("b", 1));
        out.next(now);
        out.settle(a.clone(), Sent::NobodyListens, now);
        assert!(out.is_pending(&a), "held until a source hears it");
        assert_eq!(out.stats.unheard, 1);
        out.next(now);
        assert!(out.settle(b.clone(), Sent::Taken, now).taken);
        assert_eq!(out.next(now).0.map(|(k, _)| k), Some(a));
    }

    #[test]
    fn an_unheard_event_is_probed_when_nothing_else_goes() {
        let now = Instant::now();
        let mut out = Outbox::new(10);
        let a = push(&mut out, status("a", 1));
        out.next(now);
        out.settle(a.clone(), Sent::NobodyListens, now);
        assert_eq!(out.next(now).0, None, "not before the probe delay");
        assert_eq!(out.next(now + UNHEARD_RETRY_MIN).0.map(|(k, _)| k), Some(a));
    }

    #[test]
    fn the_queue_refuses_new_works_beyond_its_capacity() {
        let mut out = Outbox::new(2);
        push(&mut out, status("a", 1));
        push(&mut out, status("b", 1));
        assert!(out.push("c".into(), status("c", 1)).is_err());
        assert!(
            out.push("a".into(), status("a", 2)).is_ok(),
            "a newer one takes its place"
        );
    }
}
