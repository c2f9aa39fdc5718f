//! What operators reach: the metrics registry, the HTTP(S) endpoints and probes, leader
//! election, and exit on changed files.

pub mod health;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod terminate_on_files;
pub mod tls;
pub mod workqueue;
