//! The `Deleted` status events told to the source, until the source has heard them.
//!
//! The broker taking an event is not the source hearing it: a source away from a shared
//! subscription, or a broker restarted without persistence, loses an event the broker has
//! acknowledged. For a work the source deleted, that costs nothing lasting: the source keeps it
//! as deleting and sends it back only as deleting. For a work the agent deleted itself (its TTL
//! ran out) the source still holds it as it was, and sends it back after a restart; the
//! AppliedManifestWork that holds its completion must therefore stay until the source shows it
//! no longer has the work. It shows that by answering a spec resync request that lists the
//! work's id with a deletion without data (sdk-go's source client and gRPC broker both do, for
//! an id they do not hold).
//!
//! So a deletion the agent made is `Taken` once the transport no longer holds its event, then
//! listed (at version 0) in the next spec resync request, and heard only when that answer
//! deletes it. If the answer comes in without it, the deletion is dropped unheard when the next
//! round may start: the kept AppliedManifestWork makes the eviction scan tell it again
//! (`SourceHearing::retell_deletion`). Rounds are paced (a backoff that a confirmation resets); the pacing
//! saves events and decides nothing.
//!
//! A source that holds no work at all for the cluster (sdk-go's source client, as Maestro's
//! server over MQTT) answers nothing, not even deletions: the record then stays until the
//! eviction grace period is over, told again each round.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use cloudevents::codec::ResourceVersion;

/// How long after the transport took a `Deleted` the agent asks whether it was heard (the source
/// handles a status in milliseconds; asking sooner would mostly find the work still there).
pub const CONFIRM_AFTER_TAKEN: Duration = Duration::from_secs(1);
/// The least time between two requests to confirm. A request lists every work the agent holds
/// (the source sends back any it does not list), 740 KB at 10,000 works: under steady TTL
/// deletions the agent sends one per period, whatever their number.
pub const CONFIRM_PERIOD_FIRST: Duration = Duration::from_secs(15);
/// The most time between two requests to confirm (a source away for long).
pub const CONFIRM_PERIOD_LAST: Duration = Duration::from_secs(300);

/// Where one told deletion stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// The transport still holds the event (queued, or not acknowledged).
    InTransport,
    /// The transport no longer holds it (since then); not asked about yet.
    Taken(Instant),
    /// Listed in the spec resync request whose answer is awaited.
    Asked,
    /// The answer came in without confirming it: dropped once the pacing allows the next
    /// round, and then told again by the eviction scan.
    Unconfirmed,
}

/// One `Deleted` told to the source.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Told {
    uid: String,
    /// The event's queue key in the transport.
    key: String,
    /// Whether the source must show it heard it (the agent deleted the work itself); else the
    /// transport taking the event is enough.
    confirm: bool,
    stage: Stage,
}

/// The deletions told and not yet heard, by work name.
#[derive(Debug, Default)]
pub struct ToldDeletions {
    told: BTreeMap<String, Told>,
    /// Heard since the last [`ToldDeletions::take_heard`].
    heard: Vec<String>,
    /// When the next request to confirm may go out.
    next_ask: Option<Instant>,
    /// The wait after the next request to confirm.
    period: Duration,
    /// Whether a request to confirm awaits its answer.
    asking: bool,
    /// Whether the request awaited confirmed something.
    confirmed_in_round: bool,
}

impl ToldDeletions {
    /// `Deleted` of work `name` (`uid`) was handed to the transport under `key`; with `confirm`,
    /// it is heard only once the source shows it no longer has the work.
    pub fn told(&mut self, name: &str, uid: &str, key: String, confirm: bool) {
        self.told.insert(
            name.to_string(),
            Told {
                uid: uid.to_string(),
                key,
                confirm,
                stage: Stage::InTransport,
            },
        );
    }

    /// Whether a deletion of work `name` is being told.
    pub fn is_telling(&self, name: &str) -> bool {
        self.told.contains_key(name)
    }

    /// How many deletions are told and not heard.
    pub fn unheard(&self) -> usize {
        self.told.len()
    }

    /// Moves on what the transport took by `now`: heard when no confirmation is needed, else
    /// taken; and drops the unconfirmed ones once the next round may start.
    pub fn refresh(&mut self, is_pending: impl Fn(&str) -> bool, now: Instant) {
        let heard = &mut self.heard;
        let next_round = self.next_ask.is_none_or(|at| now >= at);
        self.told.retain(|name, told| {
            if told.stage == Stage::Unconfirmed {
                return !next_round;
            }
            if told.stage != Stage::InTransport || is_pending(&told.key) {
                return true;
            }
            if !told.confirm {
                heard.push(name.clone());
                return false;
            }
            told.stage = Stage::Taken(now);
            true
        });
    }

    /// The source answered a deletion without data for `uid`: it does not hold the work. Returns
    /// whether that confirmed a told deletion.
    pub fn confirm(&mut self, uid: &str) -> bool {
        let Some(name) = self
            .told
            .iter()
            .find(|(_, t)| t.uid == uid && t.confirm)
            .map(|(name, _)| name.clone())
        else {
            return false;
        };
        self.told.remove(&name);
        self.heard.push(name);
        self.confirmed_in_round = true;
        true
    }

    /// The answer to the request that asked is in: what it did not confirm is unconfirmed
    /// (told again in the next round), and the next round waits the pacing, which grows unless
    /// something was confirmed.
    pub fn answer_in(&mut self, now: Instant) {
        if !self.asking {
            return;
        }
        self.asking = false;
        let mut unconfirmed = 0;
        for told in self.told.values_mut().filter(|t| t.stage == Stage::Asked) {
            told.stage = Stage::Unconfirmed;
            unconfirmed += 1;
        }
        if unconfirmed > 0 {
            tracing::info!(
                unconfirmed,
                "the source's answer did not show it heard these deletions; told again in the next round"
            );
        }
        self.period = if self.confirmed_in_round {
            CONFIRM_PERIOD_FIRST
        } else {
            (self.period * 2).clamp(CONFIRM_PERIOD_FIRST, CONFIRM_PERIOD_LAST)
        };
        self.confirmed_in_round = false;
        self.next_ask = Some(now + self.period);
    }

    /// Whether to send a request to confirm at `now`: some deletion was taken a while ago, none
    /// is awaiting an answer, and the pacing allows.
    pub fn should_ask(&self, now: Instant) -> bool {
        let due = self.told.values().any(|t| match t.stage {
            Stage::Taken(at) => now.saturating_duration_since(at) >= CONFIRM_AFTER_TAKEN,
            _ => false,
        });
        due && !self.asking && self.next_ask.is_none_or(|at| now >= at)
    }

    /// The ids to list (at version 0) in a spec resync request, each then awaiting
    /// its answer: every deletion to confirm that the transport took.
    pub fn ask(&mut self) -> Vec<ResourceVersion> {
        let mut listed = Vec::new();
        for told in self.told.values_mut().filter(|t| t.confirm) {
            if matches!(told.stage, Stage::Taken(_) | Stage::Asked) {
                told.stage = Stage::Asked;
                listed.push(ResourceVersion {
                    resource_id: told.uid.clone(),
                    resource_version: 0,
                });
            }
        }
        self.asking = !listed.is_empty();
        listed
    }

    /// The works whose deletion was heard since the last call.
    pub fn take_heard(&mut self) -> Vec<String> {
        std::mem::take(&mut self.heard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn ids(listed: &[ResourceVersion]) -> Vec<(&str, i64)> {
        listed
            .iter()
            .map(|v| (v.resource_id.as_str(), v.resource_version))
            .collect()
    }

    #[test]
    fn a_deletion_from_the_source_is_heard_once_the_transport_took_it() {
        let now = Instant::now();
        let mut told = ToldDeletions::default();
        told.told("w1", "u1", "k1".into(), false);
        told.refresh(|_| true, now);
        assert!(told.take_heard().is_empty());
        assert!(told.is_telling("w1"));
        told.refresh(|_| false, now);
        assert_eq!(told.take_heard(), ["w1"]);
        assert_eq!(told.unheard(), 0);
        assert!(!told.should_ask(now + 10 * S), "nothing to confirm");
    }

    #[test]
    fn a_deletion_made_here_is_heard_only_when_an_answer_deletes_it() {
        let start = Instant::now();
        let mut told = ToldDeletions::default();
        // Confirmed while still in the transport: the source does not have the work either way.
        told.told("w1", "u1", "k1".into(), true);
        assert!(told.confirm("u1"));
        assert_eq!(told.take_heard(), ["w1"]);
        told.told("w2", "u2", "k2".into(), true);
        told.refresh(|_| false, start);
        assert!(told.take_heard().is_empty(), "taken is not heard");
        assert!(
            !told.should_ask(start),
            "the source gets a moment to handle it"
        );
        assert!(told.should_ask(start + CONFIRM_AFTER_TAKEN));
        let listed = told.ask();
        assert_eq!(ids(&listed), [("u2", 0)]);
        assert!(!told.should_ask(start + 100 * S), "one request at a time");
        assert!(!told.confirm("u-other"));
        assert!(told.confirm("u2"));
        assert_eq!(told.take_heard(), ["w2"]);
        assert_eq!(told.unheard(), 0);
    }

    #[test]
    fn an_answer_without_the_deletion_leaves_it_unheard_for_the_next_round_which_comes_later() {
        let start = Instant::now();
        let mut told = ToldDeletions::default();
        told.told("w1", "u1", "k1".into(), true);
        told.refresh(|_| false, start);
        let at = start + CONFIRM_AFTER_TAKEN;
        assert_eq!(told.ask().len(), 1);
        told.answer_in(at);
        assert!(told.take_heard().is_empty(), "not heard");
        // Kept (so not told again) until the next round may start, then dropped: the eviction
        // scan tells it again.
        told.refresh(|_| false, at + CONFIRM_PERIOD_FIRST - S);
        assert!(told.is_telling("w1"));
        let second = at + CONFIRM_PERIOD_FIRST;
        told.refresh(|_| false, second);
        assert!(!told.is_telling("w1"), "dropped");
        assert!(told.take_heard().is_empty(), "not heard");
        told.told("w1", "u1", "k2".into(), true);
        told.refresh(|_| false, second);
        assert!(told.should_ask(second + CONFIRM_AFTER_TAKEN));
        assert_eq!(told.ask().len(), 1);
        told.answer_in(second);
        // The pacing doubled.
        told.refresh(|_| false, second + 2 * CONFIRM_PERIOD_FIRST - S);
        assert!(told.is_telling("w1"));
        told.refresh(|_| false, second + 2 * CONFIRM_PERIOD_FIRST);
        assert!(!told.is_telling("w1"));
    }

    #[test]
    fn the_pacing_never_exceeds_its_ceiling_and_a_confirmation_resets_it() {
        let mut now = Instant::now();
        let mut told = ToldDeletions::default();
        for _ in 0..20 {
            told.told("w1", "u1", "k".into(), true);
            told.refresh(|_| false, now);
            now += CONFIRM_PERIOD_LAST;
            assert!(told.should_ask(now));
            told.ask();
            told.answer_in(now);
        }
        assert_eq!(told.period, CONFIRM_PERIOD_LAST);
        told.told("w1", "u1", "k".into(), true);
        told.told("w2", "u2", "k".into(), true);
        told.refresh(|_| false, now);
        now += CONFIRM_PERIOD_LAST;
        assert_eq!(told.ask().len(), 2);
        assert!(told.confirm("u1"));
        told.answer_in(now);
        assert_eq!(told.period, CONFIRM_PERIOD_FIRST);
        assert_eq!(told.take_heard(), ["w1"]);
    }

    #[test]
    fn an_event_still_in_the_transport_is_not_listed() {
        let now = Instant::now();
        let mut told = ToldDeletions::default();
        told.told("w1", "u1", "k1".into(), true);
        told.refresh(|_| true, now);
        assert!(!told.should_ask(now + 10 * S));
        assert!(told.ask().is_empty());
    }
}
