//! The managed cluster's side: the watches and caches of applied resources and
//! AppliedManifestWorks, and every write there (apply, deletion, eviction).

pub mod applied_work;
pub mod apply;
pub mod blockers;
pub mod cleanup_memory;
pub mod deletion;
pub mod eviction;
pub mod executor;
pub mod feedback;
pub mod live_object;
pub mod watches;
