//! Integration tests live in `tests/`; they need a running control plane (`make cluster-up`).
