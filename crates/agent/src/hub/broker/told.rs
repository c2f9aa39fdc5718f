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
//! (`SourceHearing::retell_deletion`). Rounds are paced (a backoff that a confirmation resets);
//! the pacing saves events and decides nothing.
//!
//! A source that holds no work at all for the cluster (sdk-go's source client, as Maestro's
//! server over MQTT) answers nothing, not even deletions: the record then stays until the
//! eviction grace period is over, told again each round.
//!
//! Here are one told deletion ([`Told`]) and the pacing of the rounds ([`Rounds`]), as plain
//! data; a deleted work's record holds its told deletion ([`super::deletions`]).

use std::time::{Duration, Instant};

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
pub struct Told {
    /// The work's name: the source's records and the eviction loop speak of works by name.
    pub name: String,
    /// The event's queue key in the transport.
    key: String,
    /// Whether the source must show it heard it (the agent deleted the work itself); else the
    /// transport taking the event is enough.
    pub confirm: bool,
    /// Where it stands.
    stage: Stage,
}

/// What became of a told deletion as the transport moved on ([`Told::refresh`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Moved {
    /// Still told: in the transport, awaiting its confirmation, or unconfirmed within the
    /// pacing.
    Kept,
    /// Heard: the transport took it and no confirmation is needed.
    Heard,
    /// Dropped unheard: unconfirmed, and the next round may start (the eviction scan tells it
    /// again).
    Dropped,
}

impl Told {
    /// `Deleted` of work `name`, handed to the transport under `key`; with `confirm`, heard
    /// only once the source shows it no longer has the work.
    pub fn new(name: &str, key: String, confirm: bool) -> Self {
        Self {
            name: name.to_string(),
            key,
            confirm,
            stage: Stage::InTransport,
        }
    }

    /// Moves on as the transport did by `now` (`is_pending` says whether it still holds an
    /// event by its key); `next_round` says whether the next round may start.
    pub fn refresh(
        &mut self,
        is_pending: impl Fn(&str) -> bool,
        next_round: bool,
        now: Instant,
    ) -> Moved {
        if self.stage == Stage::Unconfirmed {
            return if next_round {
                Moved::Dropped
            } else {
                Moved::Kept
            };
        }
        if self.stage != Stage::InTransport || is_pending(&self.key) {
            return Moved::Kept;
        }
        if !self.confirm {
            return Moved::Heard;
        }
        self.stage = Stage::Taken(now);
        Moved::Kept
    }

    /// Whether a request should ask about it at `now`: the transport took it a while ago.
    pub fn is_due(&self, now: Instant) -> bool {
        match self.stage {
            Stage::Taken(at) => now.saturating_duration_since(at) >= CONFIRM_AFTER_TAKEN,
            _ => false,
        }
    }

    /// Listed in a request to confirm, when it needs a confirmation and the transport took it:
    /// its answer is then awaited. Returns whether it is listed.
    pub fn ask(&mut self) -> bool {
        let listed = self.confirm && matches!(self.stage, Stage::Taken(_) | Stage::Asked);
        if listed {
            self.stage = Stage::Asked;
        }
        listed
    }

    /// The answer to the request that listed it came in without confirming it: unconfirmed.
    /// Returns whether it was awaiting that answer.
    pub fn answer_in(&mut self) -> bool {
        let asked = self.stage == Stage::Asked;
        if asked {
            self.stage = Stage::Unconfirmed;
        }
        asked
    }
}

/// The pacing of the requests to confirm: one awaits its answer at a time, and the next waits
/// a period that doubles while nothing is confirmed.
#[derive(Debug, Default)]
pub struct Rounds {
    /// When the next request to confirm may go out.
    next_ask: Option<Instant>,
    /// The wait after the next request to confirm.
    pub(super) period: Duration,
    /// Whether a request to confirm awaits its answer.
    asking: bool,
    /// Whether the request awaited confirmed something.
    confirmed_in_round: bool,
}

impl Rounds {
    /// Whether the next round may start at `now`.
    pub fn next_round(&self, now: Instant) -> bool {
        self.next_ask.is_none_or(|at| now >= at)
    }

    /// Whether a request to confirm may go out at `now`: none awaits its answer, and the pacing
    /// allows.
    pub fn may_ask(&self, now: Instant) -> bool {
        !self.asking && self.next_round(now)
    }

    /// A request to confirm went out, awaiting an answer when it listed something.
    pub fn asked(&mut self, listed: bool) {
        self.asking = listed;
    }

    /// An answer confirmed a deletion.
    pub fn confirmed(&mut self) {
        self.confirmed_in_round = true;
    }

    /// Whether a request to confirm awaits its answer.
    pub fn is_asking(&self) -> bool {
        self.asking
    }

    /// The answer to the request that asked is in: the next round waits the pacing, which grows
    /// unless something was confirmed.
    pub fn answered(&mut self, now: Instant) {
        self.asking = false;
        self.period = if self.confirmed_in_round {
            CONFIRM_PERIOD_FIRST
        } else {
            (self.period * 2).clamp(CONFIRM_PERIOD_FIRST, CONFIRM_PERIOD_LAST)
        };
        self.confirmed_in_round = false;
        self.next_ask = Some(now + self.period);
    }
}
