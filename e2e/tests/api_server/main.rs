//! The local control plane and the agent's libraries on it: the stack is real (`smoke`: if
//! these fail, distrust everything else), the applier against a real API server (`applier`) and TTL
//! garbage collection (`gc`). One test binary per area: each links kube, tokio and rustls.
//! Filter by module: `smoke::`, `applier::`, `gc::`.

#[path = "../agent_common/mod.rs"]
mod agent_common;
mod applier;
mod gc;
mod smoke;
