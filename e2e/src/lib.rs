//! Integration tests live in `tests/`; they need a running control plane (`make cluster-up`).
//! The library holds the agent benchmark (`src/bin/bench_agent.rs`).

pub mod bench;
