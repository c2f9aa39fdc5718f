//! What a ManifestWork author runs on a laptop, before shipping: evaluate rules against objects,
//! lint works, explain a verdict, pick rules from the library, convert other tools' health checks.
//! The agent never calls any of it.

pub mod convert;
pub mod eval;
pub mod explain;
pub mod lint;
pub mod lint_cel;
pub mod locate;
pub mod order;
pub mod rule_library;
pub mod rules;
pub mod yaml_depth;
