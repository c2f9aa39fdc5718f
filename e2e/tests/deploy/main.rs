//! What the agent's deployments promise: `deploy/` on real API servers (`manifests`), the shipped
//! RBAC and nothing more (`least_privilege`), the network policies (`network_policies`, no
//! cluster), the klusterlet's command line (`drop_in`), a hub set up as OCM sets it up (`ocm_hub`)
//! and the image in podman (`image`, ignored: `make image-smoke`). One test binary per area: each
//! links kube, tokio and rustls.

#[path = "../agent_common/mod.rs"]
mod agent_common;
mod drop_in;
mod image;
mod least_privilege;
mod manifests;
mod network_policies;
mod ocm_hub;
