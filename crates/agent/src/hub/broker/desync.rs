//! Desync between the source and the agent, noticed and asked about.
//!
//! Two kinds are counted:
//! - **Unconfirmed**: a work the agent holds that a spec resync request left out (it did not fit
//!   the broker's ceiling, [`super::listing`]) and that did not come back by the end of the
//!   source's answer (its end marker's deletion). A source that still held it would have sent
//!   it, so the source has most likely lost or deleted it while the agent was away. The agent
//!   does not delete on that inference: it asks again with the work listed, and the source's
//!   answer decides (a deletion for an id it does not hold; silence for one it holds at that
//!   version). The question is asked at once and then paced, doubling from
//!   [`ASK_PERIOD_FIRST`] to [`ASK_PERIOD_LAST`], while the answer does not come.
//! - **Resent after deletion**: the source sends again a work the agent has deleted and told it
//!   so (a `Deleted` the source lost); the copy is ignored and the deletion told again.
//!
//! The answer is settled once the marker has come back and no spec event has come for
//! [`SETTLE_QUIET`]: Pub/Sub does not keep the order of a source's events, so there works of the
//! answer may still arrive after the marker. The wait only saves questions (a work that arrives
//! later clears itself, and a question costs one request); it decides nothing, as the agent
//! deletes only on the source's own deletion.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use super::listing::Listing;

/// Quiet after the last spec event that settles an answer whose marker came back.
pub const SETTLE_QUIET: Duration = Duration::from_secs(1);

/// The first wait before asking again about works still unconfirmed.
pub const ASK_PERIOD_FIRST: Duration = Duration::from_secs(30);
/// The longest wait between two questions (a source that answers nothing).
pub const ASK_PERIOD_LAST: Duration = Duration::from_secs(600);

/// The answer awaited to a request that left works out.
#[derive(Clone, Debug, Default)]
struct Awaited {
    marker: String,
    /// Works left out that have not come back yet.
    left_out: HashSet<String>,
    /// Unconfirmed works the request listed: its answer settles them.
    asked: HashSet<String>,
    /// Whether the marker came back.
    marker_back: bool,
}

/// Counts of desync seen since the start, for the metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DesyncCounts {
    /// Works found unconfirmed at the end of an answer.
    pub unconfirmed: u64,
    /// Works the source sent again after the agent deleted them.
    pub resent_after_deletion: u64,
    /// Requests sent to ask about unconfirmed works.
    pub asked: u64,
    /// Unconfirmed works the source then deleted (it no longer held them).
    pub healed_deleted: u64,
    /// Unconfirmed works the source then confirmed (it held them).
    pub healed_confirmed: u64,
}

/// What the end of an answer settled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Works found unconfirmed now (by id).
    pub unconfirmed: Vec<String>,
    /// Works asked about that the source confirmed by its silence.
    pub confirmed: Vec<String>,
}

/// The works the source did not confirm, and the request awaited about them.
#[derive(Debug, Default)]
pub struct Desync {
    awaited: Option<Awaited>,
    /// Unconfirmed works (by id), with when they were found.
    unconfirmed: BTreeMap<String, Instant>,
    /// When the next question may go out.
    next_ask: Option<Instant>,
    period: Duration,
    counts: DesyncCounts,
    /// When the latest spec event came.
    last_event: Option<Instant>,
}

impl Desync {
    /// A request went out with `listing`; `asked_again`: it was sent to ask about unconfirmed
    /// works, at `now`.
    pub fn requested(&mut self, listing: &Listing, asked_again: bool, now: Instant) {
        let asked = listing
            .versions
            .iter()
            .filter(|v| self.unconfirmed.contains_key(&v.resource_id))
            .map(|v| v.resource_id.clone())
            .collect();
        self.awaited = listing.marker.as_ref().map(|marker| Awaited {
            marker: marker.clone(),
            left_out: listing.left_out.clone(),
            asked,
            marker_back: false,
        });
        if asked_again {
            self.counts.asked += 1;
            self.period = if self.period.is_zero() {
                ASK_PERIOD_FIRST
            } else {
                (self.period * 2).min(ASK_PERIOD_LAST)
            };
            self.next_ask = Some(now + self.period);
        }
    }

    /// The source sent work `id` (a work, a deletion) at `now`: it is not unconfirmed, and not
    /// awaited. `deleted`: the event was a deletion.
    pub fn heard(&mut self, id: &str, deleted: bool, now: Instant) {
        self.last_event = Some(now);
        if let Some(awaited) = self.awaited.as_mut() {
            awaited.left_out.remove(id);
            awaited.asked.remove(id);
        }
        if self.unconfirmed.remove(id).is_some() {
            if deleted {
                self.counts.healed_deleted += 1;
            } else {
                self.counts.healed_confirmed += 1;
            }
        }
    }

    /// The end marker `id` came back; true when it is the awaited answer's.
    pub fn marker_back(&mut self, id: &str) -> bool {
        match self.awaited.as_mut() {
            Some(awaited) if awaited.marker == id => {
                awaited.marker_back = true;
                true
            }
            _ => false,
        }
    }

    /// Whether an answer waits to be settled (its marker is back, [`Desync::settle`] not done).
    pub fn settling(&self) -> bool {
        self.awaited.as_ref().is_some_and(|a| a.marker_back)
    }

    /// Settles the answer whose marker is back once no spec event came for [`SETTLE_QUIET`]
    /// by `now`: the works left out that did not come back and that the agent still `holds`
    /// are unconfirmed now; the unconfirmed works the request listed and the source did not
    /// delete are confirmed. `None` while it is not time yet (or nothing is to settle).
    pub fn settle(&mut self, holds: impl Fn(&str) -> bool, now: Instant) -> Option<Settled> {
        if !self.settling() {
            return None;
        }
        let quiet = self
            .last_event
            .is_none_or(|last| now.saturating_duration_since(last) >= SETTLE_QUIET);
        if !quiet {
            return None;
        }
        let awaited = self.awaited.take()?;
        let mut settled = Settled::default();
        for id in awaited.asked {
            if self.unconfirmed.remove(&id).is_some() {
                self.counts.healed_confirmed += 1;
                settled.confirmed.push(id);
            }
        }
        let mut found: Vec<String> = awaited
            .left_out
            .into_iter()
            .filter(|id| holds(id) && !self.unconfirmed.contains_key(id))
            .collect();
        found.sort();
        if !found.is_empty() && self.unconfirmed.is_empty() {
            // A new episode: ask at once.
            self.next_ask = Some(now);
            self.period = Duration::ZERO;
        }
        for id in &found {
            self.unconfirmed.insert(id.clone(), now);
        }
        self.counts.unconfirmed += found.len() as u64;
        settled.unconfirmed = found;
        Some(settled)
    }

    /// The source sent again work `id`, which the agent deleted.
    pub fn resent_after_deletion(&mut self) {
        self.counts.resent_after_deletion += 1;
    }

    /// The work `id` is gone from the agent's copy (deleted): no longer a question.
    pub fn forget(&mut self, id: &str) {
        self.unconfirmed.remove(id);
    }

    /// Whether a question about unconfirmed works is due at `now`.
    pub fn should_ask(&self, now: Instant) -> bool {
        !self.unconfirmed.is_empty() && self.next_ask.is_none_or(|at| now >= at)
    }

    /// The unconfirmed works, to list first.
    pub fn unconfirmed(&self) -> impl Iterator<Item = &str> {
        self.unconfirmed.keys().map(String::as_str)
    }

    /// How many works are unconfirmed now.
    pub fn unconfirmed_now(&self) -> usize {
        self.unconfirmed.len()
    }

    /// The counts since the start.
    pub fn counts(&self) -> DesyncCounts {
        self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cloudevents::codec::ResourceVersion;

    fn listing(listed: &[&str], left_out: &[&str], marker: Option<&str>) -> Listing {
        let mut versions: Vec<ResourceVersion> = listed
            .iter()
            .map(|id| ResourceVersion {
                resource_id: id.to_string(),
                resource_version: 1,
            })
            .collect();
        if let Some(m) = marker {
            versions.push(ResourceVersion {
                resource_id: m.into(),
                resource_version: 1,
            });
        }
        Listing {
            versions,
            left_out: left_out.iter().map(|s| s.to_string()).collect(),
            marker: marker.map(String::from),
            confirmations_left_out: 0,
        }
    }

    #[test]
    fn a_work_left_out_that_did_not_come_back_is_unconfirmed_at_the_marker() {
        let now = Instant::now();
        let mut d = Desync::default();
        d.requested(&listing(&["a"], &["b", "c", "d"], Some("m")), false, now);
        d.heard("b", false, now);
        assert!(
            !d.should_ask(now),
            "nothing is unconfirmed before the marker"
        );
        // Another id's deletion is no marker.
        assert!(!d.marker_back("x"));
        assert!(d.marker_back("m"));
        assert_eq!(d.settle(|_| true, now), None, "not while events still come");
        // "d" was deleted here meanwhile: not a question.
        let settled = d
            .settle(|id| id != "d", now + SETTLE_QUIET)
            .expect("settled");
        assert_eq!(settled.unconfirmed, ["c"]);
        assert_eq!(d.counts().unconfirmed, 1);
        assert!(d.should_ask(now + SETTLE_QUIET), "asked at once");
        assert_eq!(d.unconfirmed().collect::<Vec<_>>(), ["c"]);
    }

    #[test]
    fn asking_settles_unconfirmed_works_by_the_sources_answer_and_paces_the_next_question() {
        let now = Instant::now();
        let mut d = Desync::default();
        d.requested(&listing(&[], &["c", "e"], Some("m1")), false, now);
        d.marker_back("m1");
        d.settle(|_| true, now);
        assert_eq!(d.unconfirmed_now(), 2);
        // The question lists both; the source deletes "c" and is silent on "e".
        d.requested(&listing(&["c", "e"], &[], Some("m2")), true, now);
        assert!(!d.should_ask(now + Duration::from_secs(1)), "paced");
        d.heard("c", true, now);
        d.marker_back("m2");
        let settled = d.settle(|_| true, now + SETTLE_QUIET).expect("settled");
        assert_eq!(settled.confirmed, ["e"]);
        assert_eq!(d.unconfirmed_now(), 0);
        let counts = d.counts();
        assert_eq!((counts.healed_deleted, counts.healed_confirmed), (1, 1));
        assert_eq!(counts.asked, 1);
        assert!(!d.should_ask(now + ASK_PERIOD_LAST));
    }

    #[test]
    fn a_question_without_answer_is_asked_again_later_and_later() {
        let now = Instant::now();
        let mut d = Desync::default();
        d.requested(&listing(&[], &["c"], Some("m1")), false, now);
        d.marker_back("m1");
        d.settle(|_| true, now);
        d.requested(&listing(&["c"], &[], Some("m2")), true, now);
        assert!(!d.should_ask(now + ASK_PERIOD_FIRST - Duration::from_millis(1)));
        assert!(d.should_ask(now + ASK_PERIOD_FIRST));
        let then = now + ASK_PERIOD_FIRST;
        d.requested(&listing(&["c"], &[], Some("m3")), true, then);
        assert!(!d.should_ask(then + ASK_PERIOD_FIRST));
        assert!(d.should_ask(then + ASK_PERIOD_FIRST * 2));
        // A late marker of an earlier request settles nothing.
        assert!(!d.marker_back("m2"));
        assert_eq!(d.settle(|_| true, then), None);
        assert_eq!(d.unconfirmed_now(), 1);
    }

    #[test]
    fn a_work_that_arrives_after_the_marker_but_before_the_quiet_is_never_unconfirmed() {
        let now = Instant::now();
        let mut d = Desync::default();
        d.requested(&listing(&[], &["c", "e"], Some("m")), false, now);
        assert!(d.marker_back("m"));
        d.heard("c", false, now + SETTLE_QUIET / 2);
        assert_eq!(
            d.settle(|_| true, now + SETTLE_QUIET),
            None,
            "quiet counts from the last event"
        );
        let settled = d.settle(|_| true, now + SETTLE_QUIET * 2).expect("settled");
        assert_eq!(settled.unconfirmed, ["e"]);
    }

    #[test]
    fn a_work_that_arrives_after_the_marker_is_no_longer_unconfirmed() {
        let now = Instant::now();
        let mut d = Desync::default();
        d.requested(&listing(&[], &["c"], Some("m")), false, now);
        d.marker_back("m");
        d.settle(|_| true, now);
        d.heard("c", false, now);
        assert_eq!(d.unconfirmed_now(), 0);
        assert!(!d.should_ask(now));
        assert_eq!(d.counts().healed_confirmed, 1);
    }
}
