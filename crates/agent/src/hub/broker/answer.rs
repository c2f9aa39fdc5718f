//! When the source has answered the agent's spec resync request. The protocol has no end marker:
//! the source sends each work of its answer as its own event. Until the answer is in, the agent's
//! copy lacks works the source still has, so eviction would mark their AppliedManifestWorks (a
//! spoke write each, and another to clear the mark when the work arrives). The answer counts as in
//! once no spec event has come for a quiet period after the request. An answer may also lose
//! events on the way (a broker drops what no longer fits the agent's queue): when records name
//! works the answer did not bring, the agent asks again, as long as each answer brings some of
//! them ([`AskedAgain`]), before eviction marks them. Eviction only marks and waits out its grace
//! period, so this saves writes and decides nothing: with the periods at zero the agent stays
//! correct.

use std::time::{Duration, Instant};

/// Quiet after the last spec event that ends an answer.
pub const QUIET_AFTER_LAST_EVENT: Duration = Duration::from_secs(1);
/// Quiet after the request with no spec event at all (a source with no works sends none).
pub const QUIET_WITHOUT_EVENTS: Duration = Duration::from_secs(5);
/// The same after a request asked again: the source is known to be there.
pub const QUIET_WITHOUT_EVENTS_AGAIN: Duration = Duration::from_secs(2);
/// Requests asked again per subscription, at most, however many works each brings.
pub const ASKED_AGAIN_AT_MOST: u32 = 100;
/// Longest wait: a source that keeps sending (churn right after the request) ends it too.
pub const LONGEST_WAIT: Duration = Duration::from_secs(120);

/// The requests asked again since the latest subscribe.
#[derive(Clone, Copy, Debug, Default)]
pub struct AskedAgain {
    /// Works missing when the agent last asked; none before it asked.
    missing: Option<usize>,
    times: u32,
}

impl AskedAgain {
    /// Whether to ask again with `missing` works missing now: first, and then as long as the
    /// last answer brought some of them (each asking then brings at least one, so it ends).
    pub fn ask(&mut self, missing: usize) -> bool {
        let progress = self.missing.is_none_or(|before| missing < before);
        let ask = missing > 0 && progress && self.times < ASKED_AGAIN_AT_MOST;
        if ask {
            self.missing = Some(missing);
            self.times += 1;
        }
        ask
    }
}

/// The state of the latest spec resync request's answer, and of the requests asked again since
/// the latest subscribe.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResyncAnswer {
    /// When the latest request was sent; none before the first subscribe.
    requested: Option<Instant>,
    /// When the latest spec event came after it.
    last_event: Option<Instant>,
    /// How long the answer may take to begin.
    silence: Duration,
    /// Whether the answer was seen in (kept until the next request).
    answered: bool,
    /// Kept across the requests asked again; a subscription's first request starts it anew.
    asked: AskedAgain,
}

impl ResyncAnswer {
    /// A request was sent at `now` (`again`: asked again in the same subscription): its
    /// answer is not in yet.
    pub fn requested(&mut self, now: Instant, again: bool) {
        let asked = if again {
            self.asked
        } else {
            AskedAgain::default()
        };
        *self = Self {
            requested: Some(now),
            last_event: None,
            silence: if again {
                QUIET_WITHOUT_EVENTS_AGAIN
            } else {
                QUIET_WITHOUT_EVENTS
            },
            answered: false,
            asked,
        };
    }

    /// Whether to ask again with `missing` works missing now ([`AskedAgain::ask`]).
    pub fn ask_again(&mut self, missing: usize) -> bool {
        self.asked.ask(missing)
    }

    /// A spec event came at `now`.
    pub fn event(&mut self, now: Instant) {
        if self.requested.is_some() && !self.answered {
            self.last_event = Some(now);
        }
    }

    /// The answer is known to be complete (its end marker came back): in at once.
    pub fn complete(&mut self) {
        if self.requested.is_some() {
            self.answered = true;
        }
    }

    /// Whether the answer is in at `now`; once it is, it stays in until the next request.
    pub fn is_in(&mut self, now: Instant) -> bool {
        if !self.answered {
            self.answered = self.requested.is_some_and(|requested| {
                let since_request = now.saturating_duration_since(requested);
                let quiet = match self.last_event {
                    Some(last) => now.saturating_duration_since(last) >= QUIET_AFTER_LAST_EVENT,
                    None => since_request >= self.silence,
                };
                quiet || since_request >= LONGEST_WAIT
            });
        }
        self.answered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn nothing_is_in_before_the_first_request() {
        let start = Instant::now();
        let mut answer = ResyncAnswer::default();
        answer.event(start);
        assert!(!answer.is_in(start + LONGEST_WAIT * 2));
    }

    #[test]
    fn an_answer_is_in_after_a_quiet_period_following_its_last_event() {
        let start = Instant::now();
        let mut answer = ResyncAnswer::default();
        answer.requested(start, false);
        for i in 1..=50 {
            answer.event(start + 300 * MS * i);
            assert!(!answer.is_in(start + 300 * MS * i + 900 * MS), "event {i}");
        }
        let last = start + 300 * MS * 50;
        assert!(answer.is_in(last + QUIET_AFTER_LAST_EVENT));
        // Kept: later events (the source's ordinary traffic) do not take it back.
        answer.event(last + QUIET_AFTER_LAST_EVENT + MS);
        assert!(answer.is_in(last + QUIET_AFTER_LAST_EVENT + 2 * MS));
    }

    #[test]
    fn a_source_with_nothing_to_send_is_answered_after_the_longer_quiet() {
        let start = Instant::now();
        let mut answer = ResyncAnswer::default();
        answer.requested(start, false);
        assert!(!answer.is_in(start + QUIET_AFTER_LAST_EVENT * 2));
        assert!(answer.is_in(start + QUIET_WITHOUT_EVENTS));
    }

    #[test]
    fn a_request_asked_again_waits_less_for_an_answer_to_begin() {
        let start = Instant::now();
        let mut answer = ResyncAnswer::default();
        answer.requested(start, true);
        assert!(!answer.is_in(start + QUIET_AFTER_LAST_EVENT));
        assert!(answer.is_in(start + QUIET_WITHOUT_EVENTS_AGAIN));
    }

    #[test]
    fn asked_again_while_each_answer_brings_missing_works() {
        let mut asked = AskedAgain::default();
        assert!(!asked.ask(0), "nothing missing");
        assert!(asked.ask(7000), "first");
        assert!(asked.ask(4000), "the last answer brought 3,000");
        assert!(asked.ask(1), "and then 3,999");
        assert!(!asked.ask(1), "the last answer brought none: mark");
        let mut stuck = AskedAgain::default();
        assert!(stuck.ask(5));
        assert!(!stuck.ask(5));
        let mut endless = AskedAgain::default();
        let times = (0..1000).rev().take_while(|n| endless.ask(n + 1)).count();
        assert_eq!(times, ASKED_AGAIN_AT_MOST as usize);
    }

    #[test]
    fn a_subscriptions_first_request_forgets_what_was_asked_before() {
        let start = Instant::now();
        let mut answer = ResyncAnswer::default();
        answer.requested(start, false);
        assert!(answer.ask_again(3));
        answer.requested(start, true);
        assert!(!answer.ask_again(3), "asked again, and nothing came");
        answer.requested(start, false);
        assert!(answer.ask_again(3), "a new subscription");
    }

    #[test]
    fn a_source_that_never_pauses_is_answered_after_the_longest_wait() {
        let start = Instant::now();
        let mut answer = ResyncAnswer::default();
        answer.requested(start, false);
        let mut t = start;
        while t < start + LONGEST_WAIT {
            answer.event(t);
            assert!(!answer.is_in(t));
            t += 100 * MS;
        }
        answer.event(t);
        assert!(answer.is_in(t));
    }

    #[test]
    fn a_new_request_waits_for_its_own_answer() {
        let start = Instant::now();
        let mut answer = ResyncAnswer::default();
        answer.requested(start, false);
        assert!(answer.is_in(start + QUIET_WITHOUT_EVENTS));
        let again = start + QUIET_WITHOUT_EVENTS * 2;
        answer.requested(again, false);
        assert!(!answer.is_in(again + MS));
        answer.event(again + 10 * MS);
        assert!(answer.is_in(again + 10 * MS + QUIET_AFTER_LAST_EVENT));
    }
}
