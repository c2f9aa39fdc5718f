//! What operators reach: the HTTP(S) endpoints and probes (serving the registry of
//! `crate::metrics`), leader election, and exit on changed files.

pub mod health;
pub mod http;
pub mod leader;
pub mod terminate_on_files;
