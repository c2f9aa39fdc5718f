//! What the agent asks of a hub whose source must hear its writes: a broker's source takes each
//! status and deletion as an event, later or never (the broker may lose what it acknowledged),
//! answers a list request one work at a time with no end marker, and keeps no status across an
//! agent restart. A Kubernetes hub takes every write with the request and keeps its works'
//! statuses: it has none of this ([`super::Hub::source_hearing`] is `None`).
//!
//! Having it is also what "the hub keeps no status" means to the work logic: the agent then keeps
//! what completion needs on the spoke (`work::completion_memory`), and keeps a completed work's
//! AppliedManifestWork until its source heard the deletion (`work::deletion`).

use futures::future::BoxFuture;
use work_api::ManifestWork;

/// Works whose deletion the source has heard, and how many it has not heard yet (see
/// [`SourceHearing::deletions_heard`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeletionsHeard {
    /// The works (by name) whose deletion the source heard since the last call.
    pub heard: Vec<String>,
    /// Deletions told and not heard yet.
    pub unheard: usize,
}

/// A work this agent deleted in an earlier run, as its source knows it (see
/// [`SourceHearing::retell_deletion`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GoneWork<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its UID (the source's resource id).
    pub uid: &'a str,
    /// The source that sent it.
    pub source: &'a str,
    /// Its last known generation.
    pub generation: i64,
}

/// A hub whose source hears the agent's writes only when it takes their events, and gives no
/// status back after a restart (a broker's source).
pub trait SourceHearing: Send + Sync {
    /// Whether the works the agent holds are the source's whole list: a source answers a spec
    /// resync request one event per work, with no end marker, so the copy is partial until the
    /// answer is in. Eviction waits for it.
    fn works_listed(&self) -> bool;

    /// `missing` AppliedManifestWorks name works the agent does not hold: whether the source was
    /// asked for its list again (its answer may lose events on the way; eviction then waits for
    /// the new answer).
    fn ask_again_for_missing_works(&self, missing: usize) -> bool;

    /// The works released by `Hub::set_finalizers` whose deletion the source has heard since the
    /// last call: it hears one when it takes the work's `Deleted` event, which may be after a
    /// reconnect or never (the agent stopped before).
    fn deletions_heard(&self) -> DeletionsHeard;

    /// Tells the source again that `work`, deleted by an earlier run of the agent, is gone: that
    /// run may have stopped before the source heard it. Once heard,
    /// [`SourceHearing::deletions_heard`] names it.
    fn retell_deletion(&self, work: GoneWork<'_>) -> Result<(), ::kube::Error>;

    /// Resolves when the source takes an event after this was called
    /// ([`SourceHearing::deletions_heard`] and [`SourceHearing::status_heard`] may then have
    /// news); made before looking, so an event taken meanwhile is not missed.
    fn events_taken(&self) -> BoxFuture<'_, ()>;

    /// Whether the source has taken the last status written for work `name`: the cleanup of a
    /// deleted work waits for it, as upstream's agent's does.
    fn status_heard(&self, name: &str) -> bool;

    /// The most bytes of status JSON the source can be sent for `work` now, when the wire is
    /// the limit (a broker's packet ceiling less the status event's envelope); `None` when only
    /// the API server's object limit applies (`work::status_size`).
    fn status_room(&self, work: &ManifestWork) -> Option<usize>;
}
