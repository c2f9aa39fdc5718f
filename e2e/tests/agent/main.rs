//! The real `work-agent` binary on a Kubernetes hub (or, in `memory_hub`, the runtime on a hub kept in
//! memory) and a real spoke: apply, status, rules and completion, deletion and eviction, gates,
//! identity, idle cost, sizes, limits, drift and held conditions, a progressive rollout. One test binary per area: each links kube, tokio and rustls.
//! Filter by module, e.g. `apply::`, `completion::`, `gates::`, `idle::`, `drift::`. `drift_bench::`
//! is a benchmark of 10,000 works, ignored unless asked for (`-- drift_bench:: --ignored`).

#[path = "../agent_common/mod.rs"]
mod agent_common;
mod apply;
mod blockers;
mod cache;
mod completion;
mod delete;
mod drift;
mod drift_bench;
mod eviction;
mod gates;
mod heavy_rules;
mod hostile;
mod identity;
mod idle;
mod latency;
mod lifecycle;
mod memory_hub;
mod rollout;
mod sizes;
