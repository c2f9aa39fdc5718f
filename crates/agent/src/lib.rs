//! The work agent's runtime, as a library: one controller over the ManifestWorks of one cluster.
//!
//! Four layers, imports pointing down only (`scripts/agent-layers.py` checks it):
//!
//! - wiring: [`controller`], [`run`], [`serve`] (probes, HTTP, leader election).
//! - logic: [`work`] (reconcile, apply, deletion, eviction, status, rules, TTL, and the [`Context`]
//!   every reconcile gets).
//! - adapters, each on its own: [`hub`] (the hub behind one seam, [`hub::Hub`]: work events in;
//!   status, finalizers, TTL deletions and Events out) and [`spoke`] (the managed cluster's
//!   watches and caches, AppliedManifestWorks, executor checks, feedback).
//! - base: settings, errors, API clients, [`metrics`], compact stores.
//!
//! See `docs/architecture.md`.

pub mod backoff;
pub mod client;
pub mod config;
pub mod controller;
pub mod error;
pub mod finalizer_patch;
pub mod hub;
pub mod latest;
pub mod metrics;
pub mod packed;
pub mod params;
pub mod run;
pub mod serve;
pub mod spoke;
pub mod stored;
pub mod tls;
pub mod work;

pub use config::AgentConfig;
pub use error::Error;
pub use run::{Clients, RunError, run, run_until, run_with_hub};
pub use work::context::Context;
