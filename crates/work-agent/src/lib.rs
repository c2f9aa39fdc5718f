//! The work agent as a library: subcommands, the agent's controllers and its metrics. The
//! `work-agent` binary is a thin dispatcher over this crate.

pub mod agent;
pub mod cmd_convert;
pub mod cmd_crd;
pub mod cmd_eval;
pub mod cmd_explain;
pub mod cmd_lint;
pub mod cmd_rules;
pub mod cmd_run;
pub mod convert;
pub mod health;
pub mod http;
pub mod hub_auth;
pub mod hub_credentials;
pub mod leader;
pub mod lint_cel;
pub mod metrics;
pub mod rule_library;
pub mod terminate_on_files;
pub mod upstream_flags;
pub mod yaml_depth;
