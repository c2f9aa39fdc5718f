//! The hub as the agent sees it, behind one seam: a stream of the cluster's works in; status
//! writes, finalizer bookkeeping, TTL deletions and Events out.
//!
//! [`Hub`] is everything the work logic asks of the hub; [`SourceHearing`] is what it asks on
//! top of that of a hub whose source must hear its writes (a broker's), offered by that hub
//! alone. [`KubeHub`] is the Kubernetes hub (a watch and merge patches on ManifestWorks);
//! [`MemoryHub`] keeps works in memory, for tests of the work logic without a hub API server.
//! Answers speak the Kubernetes API's terms (`kube::Error` with a 404, 409, 403 or 413 status),
//! because that is the contract ManifestWorks come with and the work logic decides on those
//! codes; a hub behind a broker answers in the same terms.

pub mod auth;
pub mod broker;
pub mod credentials;
pub mod hearing;
pub mod kube;
pub mod local_works;
pub mod memory;
pub mod seam;
pub mod stored_work;

pub use self::kube::KubeHub;
pub use hearing::{DeletionsHeard, GoneWork, SourceHearing};
pub use memory::MemoryHub;
pub use seam::{Hub, HubResult, WorkEvent, WorkEvents};
