//! The managed cluster's side, as the work logic uses it: the watches and caches of applied
//! resources and AppliedManifestWorks, their records, executor checks, status feedback, and the
//! triggers that wake works.

pub mod applied_work;
pub mod blockers;
pub mod cleanup_memory;
pub mod executor;
pub mod feedback;
pub mod live_object;
pub mod triggers;
pub mod watches;
