//! Faults a test source injects into its own traffic, for chaos runs: spec events sent twice or
//! held back behind later ones, spec resync answers split into parts that go out later, status
//! events lost in flight. The Maestro-shaped source ([`crate::maestro`]) routes every spec event
//! through [`WireFaults::outgoing`] before its front end puts it on a wire, so the faults look the
//! same on MQTT and gRPC.
//!
//! Nothing here changes what the source stores: a fault only changes what the agent receives
//! (or what the source receives of the agent's statuses), as a broker or a network would.

use std::collections::VecDeque;

use cloudevents::CloudEvent;
use cloudevents::types::EventType;

/// How many of each fault were injected so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultCounters {
    /// Spec events sent a second time.
    pub duplicated: u64,
    /// Spec events held back and sent after a later one (or on [`WireFaults::release`]).
    pub reordered: u64,
    /// Spec resync answers split into parts.
    pub split_answers: u64,
    /// Parts those answers went out in, in total.
    pub split_parts: u64,
    /// Agent status events lost in flight (never judged by the source).
    pub statuses_lost: u64,
    /// Spec resync answers held back whole (a source slow to prepare its answer).
    pub held_answers: u64,
    /// Events of spec resync answers lost on the way (a broker's full queue).
    pub answer_events_lost: u64,
}

/// One event bound for a consumer (cluster).
pub type Addressed = (String, CloudEvent);

/// The armed faults of a source and the events they hold back.
#[derive(Debug, Default)]
pub struct WireFaults {
    duplicate: u64,
    reorder: u64,
    split: Option<(u64, usize)>,
    hold_answers: u64,
    /// Answers to cut, and how many events of each go out.
    cut: Option<(u64, usize)>,
    lose_statuses: u64,
    lose_deleted: u64,
    /// Held batches, oldest first: each goes out after the next spec event, or on `release`.
    held: VecDeque<Vec<Addressed>>,
    counters: FaultCounters,
}

/// Whether `ev` is a spec event with a bundle (create, update, resync answer, delete with data).
fn is_spec_with_data(ev: &CloudEvent) -> bool {
    matches!(
        ev.event_type(),
        Ok(EventType::SpecCreate
            | EventType::SpecUpdate
            | EventType::SpecDelete
            | EventType::SpecResyncResponse)
    ) && ev.data.is_some()
}

impl WireFaults {
    /// Sends each of the next `n` spec events twice (a redelivery, as QoS 1 allows).
    pub fn duplicate_next(&mut self, n: u64) {
        self.duplicate += n;
    }

    /// Holds each of the next `n` spec events back until the spec event after it has gone out.
    pub fn reorder_next(&mut self, n: u64) {
        self.reorder += n;
    }

    /// Splits each of the next `answers` spec resync answers into `parts` parts: the first goes
    /// out at once, each further one after a later spec event or a [`WireFaults::release`].
    pub fn split_next_answers(&mut self, answers: u64, parts: usize) {
        self.split = Some((answers, parts.max(2)));
    }

    /// Holds each of the next `answers` spec resync answers back whole, until a later spec event
    /// or a [`WireFaults::release`]: a source slow to prepare its answer.
    pub fn hold_next_answers(&mut self, answers: u64) {
        self.hold_answers = answers;
    }

    /// Sends only the first `keep` events of each of the next `answers` spec resync answers and
    /// loses the rest, as a broker whose queue for the agent is full drops them.
    pub fn cut_next_answers(&mut self, answers: u64, keep: usize) {
        self.cut = Some((answers, keep));
    }

    /// Loses the next `n` status events from agents (0 stops losing them).
    pub fn lose_next_statuses(&mut self, n: u64) {
        self.lose_statuses = n;
    }

    /// Loses the next `n` status events that say `Deleted` (0 stops losing them): the source
    /// never hears those deletions, though the broker took them.
    pub fn lose_next_deleted(&mut self, n: u64) {
        self.lose_deleted = n;
    }

    /// Disarms every fault not injected yet; events already held stay held until released.
    pub fn disarm(&mut self) {
        self.duplicate = 0;
        self.reorder = 0;
        self.split = None;
        self.hold_answers = 0;
        self.cut = None;
        self.lose_statuses = 0;
        self.lose_deleted = 0;
    }

    /// The counters so far.
    pub fn counters(&self) -> FaultCounters {
        self.counters.clone()
    }

    /// Whether events are held back.
    pub fn holding(&self) -> bool {
        !self.held.is_empty()
    }

    /// What goes on the wire for one spec event `ev` to `consumer`, in order: the event (unless
    /// held back, or twice when duplicated), then the oldest held batch.
    pub fn outgoing(&mut self, consumer: &str, ev: CloudEvent) -> Vec<Addressed> {
        let mut out = Vec::new();
        let spec = is_spec_with_data(&ev);
        if spec && self.reorder > 0 {
            self.reorder -= 1;
            self.counters.reordered += 1;
            self.held.push_back(vec![(consumer.to_string(), ev)]);
            return out;
        }
        if spec && self.duplicate > 0 {
            self.duplicate -= 1;
            self.counters.duplicated += 1;
            out.push((consumer.to_string(), ev.clone()));
        }
        out.push((consumer.to_string(), ev));
        if spec && let Some(batch) = self.held.pop_front() {
            out.extend(batch);
        }
        out
    }

    /// What goes on the wire now of a spec resync answer: all of it, or its first part when a
    /// split is armed (the other parts are held, one batch each).
    pub fn answer(&mut self, consumer: &str, answer: Vec<CloudEvent>) -> Vec<Addressed> {
        let mut all: Vec<Addressed> = answer
            .into_iter()
            .map(|ev| (consumer.to_string(), ev))
            .collect();
        if let Some((left, keep)) = self.cut.filter(|(left, _)| *left > 0) {
            self.cut = Some((left - 1, keep));
            if all.len() > keep {
                self.counters.answer_events_lost += (all.len() - keep) as u64;
                all.truncate(keep);
            }
        }
        if self.hold_answers > 0 && !all.is_empty() {
            self.hold_answers -= 1;
            self.counters.held_answers += 1;
            self.held.push_back(all);
            return Vec::new();
        }
        let Some((left, parts)) = self.split.filter(|(left, _)| *left > 0) else {
            return all;
        };
        if all.len() < 2 {
            return all;
        }
        self.split = Some((left - 1, parts));
        let size = all.len().div_ceil(parts);
        let rest = all.split_off(size);
        self.counters.split_answers += 1;
        self.counters.split_parts += 1;
        for chunk in rest.chunks(size) {
            self.counters.split_parts += 1;
            self.held.push_back(chunk.to_vec());
        }
        all
    }

    /// The oldest held batch, for a source to send now (a held event must not wait forever when
    /// no spec event follows it).
    pub fn release(&mut self) -> Vec<Addressed> {
        self.held.pop_front().unwrap_or_default()
    }

    /// Whether the status event now received (`deleted`: it says `Deleted`) is lost in flight
    /// (counted).
    pub fn lose_status(&mut self, deleted: bool) -> bool {
        if deleted && self.lose_deleted > 0 {
            self.lose_deleted -= 1;
        } else if self.lose_statuses > 0 {
            self.lose_statuses -= 1;
        } else {
            return false;
        }
        self.counters.statuses_lost += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::types;

    fn spec(id: &str, version: i64) -> CloudEvent {
        let mut ev = CloudEvent::new(EventType::SpecUpdate, "maestro")
            .with_ext(
                types::EXT_RESOURCE_ID,
                cloudevents::ExtValue::String(id.into()),
            )
            .with_ext(
                types::EXT_RESOURCE_VERSION,
                cloudevents::ExtValue::Integer(version),
            );
        ev.data = Some(b"{}".to_vec());
        ev
    }

    fn ids(out: &[Addressed]) -> Vec<(String, i64)> {
        out.iter()
            .map(|(_, ev)| {
                (
                    ev.ext_string(types::EXT_RESOURCE_ID).unwrap_or_default(),
                    ev.ext_integer(types::EXT_RESOURCE_VERSION)
                        .ok()
                        .flatten()
                        .unwrap_or(-1),
                )
            })
            .collect()
    }

    #[test]
    fn unarmed_faults_pass_events_through() {
        let mut f = WireFaults::default();
        assert_eq!(ids(&f.outgoing("c", spec("a", 1))), [("a".into(), 1)]);
        assert!(!f.lose_status(false) && !f.lose_status(true));
        assert_eq!(f.answer("c", vec![spec("a", 1), spec("b", 1)]).len(), 2);
        assert_eq!(f.counters(), FaultCounters::default());
    }

    #[test]
    fn a_held_answer_goes_out_whole_on_release() {
        let mut f = WireFaults::default();
        f.hold_next_answers(1);
        assert!(f.answer("c", vec![spec("a", 1), spec("b", 1)]).is_empty());
        assert!(f.holding());
        assert_eq!(ids(&f.release()), [("a".into(), 1), ("b".into(), 1)]);
        assert_eq!(
            f.answer("c", vec![spec("a", 1)]).len(),
            1,
            "only the next one"
        );
        assert_eq!(f.counters().held_answers, 1);
    }

    #[test]
    fn a_cut_answer_loses_its_tail() {
        let mut f = WireFaults::default();
        f.cut_next_answers(1, 1);
        let sent = f.answer("c", vec![spec("a", 1), spec("b", 1), spec("c", 1)]);
        assert_eq!(ids(&sent), [("a".into(), 1)]);
        assert!(!f.holding(), "lost, not held");
        assert_eq!(f.answer("c", vec![spec("a", 1), spec("b", 1)]).len(), 2);
        assert_eq!(f.counters().answer_events_lost, 2);
    }

    #[test]
    fn a_reordered_event_follows_the_next_one() {
        let mut f = WireFaults::default();
        f.reorder_next(1);
        assert!(f.outgoing("c", spec("a", 2)).is_empty());
        assert!(f.holding());
        assert_eq!(
            ids(&f.outgoing("c", spec("a", 3))),
            [("a".into(), 3), ("a".into(), 2)]
        );
        assert!(!f.holding());
        // Held with nothing after it: released on demand.
        f.reorder_next(1);
        assert!(f.outgoing("c", spec("b", 1)).is_empty());
        assert_eq!(ids(&f.release()), [("b".into(), 1)]);
        assert_eq!(f.counters().reordered, 2);
    }

    #[test]
    fn duplicates_and_lost_statuses_are_counted() {
        let mut f = WireFaults::default();
        f.duplicate_next(1);
        assert_eq!(ids(&f.outgoing("c", spec("a", 1))).len(), 2);
        assert_eq!(ids(&f.outgoing("c", spec("a", 2))).len(), 1);
        f.lose_next_statuses(2);
        assert!(f.lose_status(false) && f.lose_status(true) && !f.lose_status(false));
        let c = f.counters();
        assert_eq!((c.duplicated, c.statuses_lost), (1, 2));
        // Only a `Deleted` is lost by `lose_next_deleted`.
        f.lose_next_deleted(1);
        assert!(!f.lose_status(false));
        assert!(f.lose_status(true) && !f.lose_status(true));
        assert_eq!(f.counters().statuses_lost, 3);
    }

    #[test]
    fn a_split_answer_goes_out_in_parts() {
        let mut f = WireFaults::default();
        f.split_next_answers(1, 3);
        let answer: Vec<_> = (1..=5).map(|i| spec(&format!("r{i}"), 1)).collect();
        let first = f.answer("c", answer);
        assert_eq!(ids(&first), [("r1".into(), 1), ("r2".into(), 1)]);
        // The next part goes after the next live event, the last one on release.
        let next = f.outgoing("c", spec("x", 4));
        assert_eq!(
            ids(&next),
            [("x".into(), 4), ("r3".into(), 1), ("r4".into(), 1)]
        );
        assert_eq!(ids(&f.release()), [("r5".into(), 1)]);
        assert!(f.release().is_empty());
        // Only the armed number of answers is split.
        assert_eq!(f.answer("c", vec![spec("a", 1), spec("b", 1)]).len(), 2);
        let c = f.counters();
        assert_eq!((c.split_answers, c.split_parts), (1, 3));
    }
}
