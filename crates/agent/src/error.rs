//! Errors of a reconcile. Each is retried with backoff by the controller's error policy.

/// What failed during a reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A call to the hub API server failed.
    #[error("hub: {0}")]
    Hub(#[source] kube::Error),
    /// A call to the spoke API server failed.
    #[error("spoke: {0}")]
    Spoke(#[source] kube::Error),
    /// Applying, reading or deleting a resource on the spoke failed.
    #[error("spoke resource: {0}")]
    Resource(#[from] applier::ApplyError),
    /// TTL garbage collection failed.
    #[error("ttl gc: {0}")]
    Gc(#[from] gc::GcError),
    /// Encoding a patch failed.
    #[error("encoding: {0}")]
    Encode(#[from] serde_json::Error),
    /// The status of a work could not be written after several conflicts.
    #[error("status of {0}: still conflicting after retries")]
    StatusConflict(String),
    /// Cleaning up the resources of a deleted work failed for some of them (all were tried).
    #[error("cleanup: {0}")]
    Cleanup(String),
    /// The reconcile task stopped abnormally.
    #[error("reconcile task failed: {0}")]
    Task(String),
}

impl Error {
    /// Whether the API server answered 409 Conflict.
    pub fn is_conflict(&self) -> bool {
        match self {
            Error::Hub(kube::Error::Api(s)) | Error::Spoke(kube::Error::Api(s)) => s.is_conflict(),
            Error::Resource(e) => e.is_conflict(),
            _ => false,
        }
    }

    /// Whether the hub answered 404: the work itself is gone (deleted while it was being
    /// reconciled); its watch's delete event forgets it, so there is nothing to retry.
    pub fn is_work_gone(&self) -> bool {
        matches!(self, Error::Hub(kube::Error::Api(s)) if s.is_not_found())
    }
}
