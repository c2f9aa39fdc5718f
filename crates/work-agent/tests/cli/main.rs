//! The `work-agent` binary as users run it: each subcommand, and its allocator's configuration.
//! One binary for these suites, so they link once.

mod allocator;
mod authoring;
mod common;
mod crd;
mod crd_rules;
mod eval;
mod lint;
