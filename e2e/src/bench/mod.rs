//! The agent benchmark (`make bench-agent`): N ManifestWorks of C ConfigMaps created at once
//! against live control planes; measures time to Applied+Available, API requests per manifest
//! (server side from each API server's `apiserver_request_total`, and from the agent's own
//! `work_agent_api_requests_total` when it has one), status latency, deletion time and memory.
//! Writes a Markdown and a JSON report. Documented in docs/performance.md. The MQTT benchmark
//! (`make bench-mqtt`, [`mqtt`]) measures an agent behind a message broker the same way.

pub mod agent;
pub mod cli;
pub mod hub_watch;
pub mod mqtt;
pub mod mqtt_report;
pub mod prometheus;
pub mod report;
pub mod run;
pub mod samples;
pub mod stats;
pub mod system;
