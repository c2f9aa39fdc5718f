//! The hub as the agent sees it, behind one seam: a stream of the cluster's works in; status
//! writes, finalizer bookkeeping, TTL deletions and Events out.
//!
//! [`Hub`] is everything the work logic asks of the hub. [`KubeHub`] is the Kubernetes hub (a
//! watch and merge patches on ManifestWorks); [`MemoryHub`] keeps works in memory, for tests of
//! the work logic without a hub API server. Answers speak the Kubernetes API's terms (`kube::Error`
//! with a 404, 409, 403 or 413 status), because that is the contract ManifestWorks come with and
//! the work logic decides on those codes; a hub behind a broker answers in the same terms.

pub mod auth;
pub mod broker;
pub mod credentials;
pub mod kube;
pub mod local_works;
pub mod memory;
pub mod seam;
pub mod stored_work;

pub use self::kube::KubeHub;
pub use memory::MemoryHub;
pub use seam::{DeletionsHeard, GoneWork, Hub, HubResult, WorkEvent, WorkEvents};
