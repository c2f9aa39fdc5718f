//! `sequenceid`: a snowflake id (Twitter epoch, 10 node bits, 12 step bits) from node 1, as
//! upstream's agent makes them. Maestro refuses ids from another node and ids not newer than the
//! last one it stored, so ids must only grow, also across restarts.
//!
//! Across restarts: an id is `(ms since epoch) << 22 | node << 12 | step`, so a restarted agent
//! whose clock is not behind the previous run's last id produces larger ids by construction. When
//! the clock may have stepped back, start the generator with [`Snowflake::with_floor`] from the
//! largest id the previous run published (the agent can persist it, or read it back from what the
//! source returns); the generator then never goes below it, borrowing future milliseconds if needed.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

/// bwmarrin/snowflake's default epoch (ms).
pub const EPOCH_MS: u64 = 1_288_834_974_657;
/// The node upstream's agent uses.
pub const NODE: u64 = 1;
const STEP_BITS: u32 = 12;
const NODE_BITS: u32 = 10;
const STEP_MASK: u64 = (1 << STEP_BITS) - 1;

/// A monotonic snowflake generator (thread safe).
#[derive(Debug, Default)]
pub struct Snowflake {
    last: Mutex<u64>,
}

impl Snowflake {
    /// A generator with no floor.
    pub fn new() -> Self {
        Self::default()
    }

    /// A generator that only produces ids larger than `floor`.
    pub fn with_floor(floor: u64) -> Self {
        Self {
            last: Mutex::new(floor),
        }
    }

    /// The next id at wall-clock time.
    pub fn next_id(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        self.next_at(now)
    }

    /// The next id as if the clock read `now_ms` (Unix ms).
    pub fn next_at(&self, now_ms: u64) -> u64 {
        // A poisoned lock only means another thread panicked mid-update; the value is still a valid id.
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let candidate =
            (now_ms.saturating_sub(EPOCH_MS) << (STEP_BITS + NODE_BITS)) | (NODE << STEP_BITS);
        let id = if candidate > *last {
            candidate
        } else {
            // Same millisecond or a clock step back: next step of the last id's millisecond, or the
            // next millisecond when its steps are used up.
            let ms = *last >> (STEP_BITS + NODE_BITS);
            let step = *last & STEP_MASK;
            if step < STEP_MASK {
                (ms << (STEP_BITS + NODE_BITS)) | (NODE << STEP_BITS) | (step + 1)
            } else {
                ((ms + 1) << (STEP_BITS + NODE_BITS)) | (NODE << STEP_BITS)
            }
        };
        *last = id;
        id
    }

    /// The node bits of an id (what Maestro checks).
    pub fn node_of(id: u64) -> u64 {
        (id >> STEP_BITS) & ((1 << NODE_BITS) - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_is_node_1() {
        let s = Snowflake::new();
        let mut prev = 0;
        for now in [EPOCH_MS + 10, EPOCH_MS + 10, EPOCH_MS + 5, EPOCH_MS + 11] {
            let id = s.next_at(now);
            assert!(id > prev);
            assert_eq!(Snowflake::node_of(id), 1);
            prev = id;
        }
        // The observed Go id decodes as node 1 too.
        assert_eq!(Snowflake::node_of(2_125_174_315_350_495_232), 1);
        assert!(s.next_id() > prev);
    }

    #[test]
    fn floor_survives_a_clock_behind() {
        let floor = Snowflake::new().next_at(EPOCH_MS + 1_000_000);
        let s = Snowflake::with_floor(floor);
        let mut prev = floor;
        for _ in 0..5000 {
            let id = s.next_at(EPOCH_MS + 1);
            assert!(id > prev);
            prev = id;
        }
    }
}
