//! The work logic between hub and spoke: reconcile a work, apply its manifests, turn each
//! manifest's outcome into status, evaluate rules, delete and evict, and decide when to come back
//! (TTL, resync, admission).

pub mod admission;
pub mod apply;
pub mod completion_memory;
pub mod context;
pub mod deletion;
pub mod drift;
pub mod evaluate;
pub mod eviction;
pub mod holds;
pub mod outcome;
pub mod reconcile;
pub mod resync;
pub mod states;
pub mod status;
pub mod status_size;
pub mod status_writer;
#[cfg(test)]
mod test_conditions;
pub mod ttl;
pub mod ttl_failures;
