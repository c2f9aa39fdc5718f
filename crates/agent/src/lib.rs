//! The work agent's runtime, as a library: one controller over the ManifestWorks of one cluster.
//!
//! - [`hub`]: the hub behind one seam ([`hub::Hub`]): work events in; status, finalizers, TTL
//!   deletions and Events out. The Kubernetes hub is its first implementation.
//! - [`spoke`]: the managed cluster: watches and caches, apply, deletion, eviction, feedback,
//!   executor checks.
//! - [`work`]: the logic in between: reconcile, outcomes, status building and writing, rule
//!   evaluation, triggers, backoff, TTL.
//! - [`serve`]: what operators reach: metrics, probes, leader election.
//!
//! See `docs/architecture.md`.

pub mod client;
pub mod config;
pub mod context;
pub mod controller;
pub mod error;
pub mod finalizer_patch;
pub mod hub;
pub mod packed;
pub mod params;
pub mod run;
pub mod serve;
pub mod spoke;
pub mod stored;
pub mod work;

pub use config::AgentConfig;
pub use context::Context;
pub use error::Error;
pub use run::{Clients, RunError, run, run_until, run_with_hub};
