//! A condition as rules and the agent make it before it is merged into a status: its
//! [`Status`], the [`ConditionUpdate`] itself, the exact reason strings and the message cap.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

/// Status of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Status {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// It cannot be told.
    Unknown,
}

impl Status {
    /// The Kubernetes spelling: "True", "False" or "Unknown".
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }

    /// Parses the Kubernetes spelling; anything else is `None`.
    pub fn parse(s: &str) -> Option<Status> {
        match s {
            "True" => Some(Status::True),
            "False" => Some(Status::False),
            "Unknown" => Some(Status::Unknown),
            _ => None,
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Every reason of a rule-made condition starts with this.
pub const CONDITION_RULE_REASON_PREFIX: &str = "ConditionRule";

/// Condition messages are capped at this many bytes.
pub const MAX_MESSAGE_BYTES: usize = 32768;

/// A condition before merging into status (no timestamps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionUpdate {
    /// Condition type.
    pub type_: String,
    /// Status.
    pub status: Status,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

impl ConditionUpdate {
    /// An update from its four parts.
    pub fn new(
        type_: impl Into<String>,
        status: Status,
        reason: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// Its four parts (type, status, reason, message) as one value, to compare with a tuple.
    pub fn parts(&self) -> (&str, Status, &str, &str) {
        (&self.type_, self.status, &self.reason, &self.message)
    }
}

/// The exact reason strings of semantics §3.
pub mod reasons {
    /// `Applied` True on a manifest.
    pub const APPLIED_MANIFEST_COMPLETE: &str = "AppliedManifestComplete";
    /// `Applied` False on a manifest.
    pub const APPLIED_MANIFEST_FAILED: &str = "AppliedManifestFailed";
    /// `Applied` False on a server-side-apply manifest whose `ignoreFields` cannot be used.
    pub const APPLIED_MANIFEST_SSA_IGNORE_FIELD_ERROR: &str = "AppliedManifestSSAIgnoreFieldError";
    /// `Available` True on a manifest.
    pub const RESOURCE_AVAILABLE: &str = "ResourceAvailable";
    /// `Available` False on a manifest.
    pub const RESOURCE_NOT_AVAILABLE: &str = "ResourceNotAvailable";
    /// `Available` Unknown on a manifest: its object could not be read.
    pub const FETCHING_RESOURCE_FAILED: &str = "FetchingResourceFailed";
    /// `Available` Unknown on a manifest: its kind is not served (or it cannot be identified).
    pub const INCOMPLETE_RESOURCE_META: &str = "IncompleteResourceMeta";
    /// `StatusFeedbackSynced` True on a manifest without feedback rules.
    pub const NO_STATUS_FEEDBACK_SYNCED: &str = "NoStatusFeedbackSynced";
    /// `StatusFeedbackSynced` True.
    pub const STATUS_FEEDBACK_SYNCED: &str = "StatusFeedbackSynced";
    /// `StatusFeedbackSynced` False.
    pub const STATUS_FEEDBACK_SYNC_FAILED: &str = "StatusFeedbackSyncFailed";
    /// A rule evaluated to True or False.
    pub const CONDITION_RULE_EVALUATED: &str = "ConditionRuleEvaluated";
    /// A rule's expression failed to compile or run, or returned the wrong type.
    pub const CONDITION_RULE_EXPRESSION_ERROR: &str = "ConditionRuleExpressionError";
    /// The evaluator failed internally.
    pub const CONDITION_RULE_INTERNAL_ERROR: &str = "ConditionRuleInternalError";
    /// The rule itself is invalid (unknown type, agent-owned condition name).
    pub const CONDITION_RULE_INVALID: &str = "ConditionRuleInvalid";
    /// The rule was not evaluated: the object could not be read or was never applied.
    pub const CONDITION_RULE_NOT_EVALUATED: &str = "ConditionRuleNotEvaluated";
    /// The object's status is stale (observedGeneration != generation).
    pub const CONDITION_RULE_STALE_STATUS: &str = "ConditionRuleStaleStatus";
    /// `Applied` and `Available` Unknown on a manifest that waits for another manifest of its
    /// work (its CRD Established, its Namespace Active, its APIService Available).
    pub const WAITING_FOR_DEPENDENCY: &str = "WaitingForDependency";
    /// `Applied` False on a manifest held by a gate that can never hold (a circle, a reference to
    /// no manifest, a condition no rule produces, an unreadable gates annotation).
    pub const GATE_INVALID: &str = "GateInvalid";
    /// `Applied` Unknown on a work: no manifest failed, some wait for what they depend on.
    pub const APPLIED_MANIFEST_WORK_WAITING: &str = "AppliedManifestWorkWaiting";
    /// `Applied` True on a work.
    pub const APPLIED_MANIFEST_WORK_COMPLETE: &str = "AppliedManifestWorkComplete";
    /// `Applied` False on a work.
    pub const APPLIED_MANIFEST_WORK_FAILED: &str = "AppliedManifestWorkFailed";
    /// `Available` True on a work.
    pub const RESOURCES_AVAILABLE: &str = "ResourcesAvailable";
    /// `Available` False on a work.
    pub const RESOURCES_NOT_AVAILABLE: &str = "ResourcesNotAvailable";
    /// `Available` Unknown on a work.
    pub const RESOURCES_STATUS_UNKNOWN: &str = "ResourcesStatusUnknown";
    /// Work-level condition aggregated from rule-made manifest conditions.
    pub const CONDITION_RULES_AGGREGATED: &str = "ConditionRulesAggregated";
    /// `Deleting` True on a work.
    pub const WORK_DELETING: &str = "WorkDeleting";
}

/// Whether a manifest condition was made by a condition rule (its reason starts with
/// `ConditionRule`).
pub fn is_rule_made(condition: &Condition) -> bool {
    condition.reason.starts_with(CONDITION_RULE_REASON_PREFIX)
}

/// Cuts `message` to at most [`MAX_MESSAGE_BYTES`] on a char boundary.
pub(crate) fn cap_message(mut message: String) -> String {
    if message.len() > MAX_MESSAGE_BYTES {
        let suffix = "...";
        let mut end = MAX_MESSAGE_BYTES - suffix.len();
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(suffix);
    }
    message
}
