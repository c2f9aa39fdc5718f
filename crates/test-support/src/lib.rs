//! Integration-test helpers: connect to the local control plane, namespaces, CRDs, waits.
//!
//! The control planes are started outside the test process (`make cluster-up`, or `make test`
//! which wraps the run in `e2e/scripts/with-cluster.sh`); tests find them through the
//! `WORK_AGENT_*_KUBECONFIG` environment variables. A test that cannot reach its control plane
//! panics with instructions: integration tests never turn into silent skips.

mod agent;
pub mod agent_events;
mod apply;
pub mod broker_source;
pub mod certs;
mod client_cert;
mod cluster;
mod error;
mod fake_api;
pub mod grpc_source;
mod kubeconfig;
pub mod maestro;
pub mod mosquitto;
pub mod mqtt_source;
mod paths;
pub mod pubsub_source;
mod secret_volume;
pub mod tls_probe;
mod wait;
pub mod wire_faults;

pub use agent::{AGENT_BIN_ENV, AgentProcess};
pub use apply::{apply_yaml, apply_yaml_in, kustomize, parse_yaml_documents};
pub use client_cert::{CertIdentity, write_client_cert_kubeconfig};
pub use cluster::{
    HUB_KUBECONFIG_ENV, HUB_UPSTREAM_KUBECONFIG_ENV, SPOKE_KUBECONFIG_ENV, TestCluster,
    client_from_kubeconfig,
};
pub use error::Error;
pub use fake_api::{fake_client, status_failure};
pub use kubeconfig::{service_account_kubeconfig, try_service_account_kubeconfig};
pub use paths::{
    TempDir, free_port, our_crds_dir, repo_root, run_dir, unique_name, upstream_crds_dir,
};
pub use secret_volume::SecretVolume;
pub use wait::{Probe, TimedOut, poll_until, wait_for};
