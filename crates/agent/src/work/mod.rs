//! The work logic between hub and spoke: reconcile a work, turn each manifest's outcome into
//! status, evaluate rules, and decide when to come back (triggers, backoff, TTL).

pub mod admission;
pub mod backoff;
pub mod completion_memory;
pub mod evaluate;
pub mod latest;
pub mod outcome;
pub mod reconcile;
pub mod resync;
pub mod states;
pub mod status;
pub mod status_size;
pub mod status_writer;
pub mod stored_work;
pub mod triggers;
pub mod ttl;
pub mod ttl_failures;
