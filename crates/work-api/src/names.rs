//! The API's names: group, version, finalizers and the condition types the agent owns.

/// API group of both kinds.
pub const GROUP: &str = "work.open-cluster-management.io";
/// API version of both kinds.
pub const VERSION: &str = "v1";
/// Finalizer the agent puts on each ManifestWork it serves.
pub const MANIFEST_WORK_FINALIZER: &str =
    "cluster.open-cluster-management.io/manifest-work-cleanup";
/// Finalizer the agent puts on each AppliedManifestWork.
pub const APPLIED_MANIFEST_WORK_FINALIZER: &str =
    "cluster.open-cluster-management.io/applied-manifest-work-cleanup";

/// Condition types the agent owns; a condition rule must not use these names.
pub mod condition_types {
    /// Resources applied.
    pub const APPLIED: &str = "Applied";
    /// Resources exist on the spoke.
    pub const AVAILABLE: &str = "Available";
    /// Status feedback collected.
    pub const STATUS_FEEDBACK_SYNCED: &str = "StatusFeedbackSynced";
    /// The work is being deleted.
    pub const DELETING: &str = "Deleting";
    /// The manifest's object differs from the work (beyond upstream; see the drift modes).
    pub const DRIFTED: &str = "Drifted";
    /// The well-known completion condition.
    pub const COMPLETE: &str = "Complete";
    /// The well-known health condition (beyond upstream).
    pub const HEALTHY: &str = "Healthy";
    /// Condition aggregated with "any True wins".
    pub const PROGRESSING: &str = "Progressing";

    /// Condition types written by the agent itself, never by a rule.
    pub const AGENT_OWNED: &[&str] = &[
        APPLIED,
        AVAILABLE,
        STATUS_FEEDBACK_SYNCED,
        DELETING,
        DRIFTED,
    ];
}
