//! The agent's own manifest-level conditions, with the exact strings of semantics §3.

use work_api::condition_types::{APPLIED, AVAILABLE, STATUS_FEEDBACK_SYNCED};

use crate::condition::{ConditionUpdate, Status, cap_message, reasons};

/// Whether a manifest's resource exists on the spoke.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Availability<'a> {
    /// The resource exists.
    Exists,
    /// The resource is not there.
    Missing,
    /// It could not be read; the error says why.
    FetchFailed(&'a str),
    /// Its kind is not served by the spoke (or the manifest cannot be identified).
    IncompleteMeta,
}

/// `Applied`: True "Apply manifest complete", or False `"Failed to apply manifest: <error>"`.
pub fn applied_condition(result: Result<(), &str>) -> ConditionUpdate {
    match result {
        Ok(()) => ConditionUpdate::new(
            APPLIED,
            Status::True,
            reasons::APPLIED_MANIFEST_COMPLETE,
            "Apply manifest complete",
        ),
        Err(e) => ConditionUpdate::new(
            APPLIED,
            Status::False,
            reasons::APPLIED_MANIFEST_FAILED,
            cap_message(format!("Failed to apply manifest: {e}")),
        ),
    }
}

/// `Applied` and `Available` of a manifest that is not applied yet because it waits for another
/// manifest of its work: both Unknown `WaitingForDependency`, the message saying what it waits for.
pub fn waiting_conditions(waits_for: &str) -> [ConditionUpdate; 2] {
    let message = cap_message(waits_for.to_string());
    [
        ConditionUpdate::new(
            APPLIED,
            Status::Unknown,
            reasons::WAITING_FOR_DEPENDENCY,
            message.clone(),
        ),
        ConditionUpdate::new(
            AVAILABLE,
            Status::Unknown,
            reasons::WAITING_FOR_DEPENDENCY,
            message,
        ),
    ]
}

/// `Applied` False `GateInvalid` with the reason: a gate of the manifest can never hold, so it is
/// not applied while the work is as it is.
pub fn gate_invalid_condition(why: &str) -> ConditionUpdate {
    ConditionUpdate::new(
        APPLIED,
        Status::False,
        reasons::GATE_INVALID,
        cap_message(format!("Invalid gate: {why}")),
    )
}

/// `Applied` False `AppliedManifestSSAIgnoreFieldError` "Failed to process ignoreFields: <error>":
/// the manifest's `ignoreFields` cannot be used (an invalid path or jq expression).
pub fn ignore_fields_failed_condition(error: &str) -> ConditionUpdate {
    ConditionUpdate::new(
        APPLIED,
        Status::False,
        reasons::APPLIED_MANIFEST_SSA_IGNORE_FIELD_ERROR,
        cap_message(format!("Failed to process ignoreFields: {error}")),
    )
}

/// `Available`: True, False, Unknown `"Failed to fetch resource: <error>"`, or Unknown `"Resource
/// meta is incomplete"` (upstream's strings).
pub fn available_condition(state: Availability) -> ConditionUpdate {
    match state {
        Availability::Exists => ConditionUpdate::new(
            AVAILABLE,
            Status::True,
            reasons::RESOURCE_AVAILABLE,
            "Resource is available",
        ),
        Availability::Missing => ConditionUpdate::new(
            AVAILABLE,
            Status::False,
            reasons::RESOURCE_NOT_AVAILABLE,
            "Resource is not available",
        ),
        Availability::FetchFailed(e) => ConditionUpdate::new(
            AVAILABLE,
            Status::Unknown,
            reasons::FETCHING_RESOURCE_FAILED,
            cap_message(format!("Failed to fetch resource: {e}")),
        ),
        Availability::IncompleteMeta => ConditionUpdate::new(
            AVAILABLE,
            Status::Unknown,
            reasons::INCOMPLETE_RESOURCE_META,
            "Resource meta is incomplete",
        ),
    }
}

/// `StatusFeedbackSynced` of a manifest with feedback rules: True with an empty message, or False
/// `"Sync status feedback failed with error <error>"` (upstream's strings).
pub fn feedback_condition(result: Result<(), &str>) -> ConditionUpdate {
    match result {
        Ok(()) => ConditionUpdate::new(
            STATUS_FEEDBACK_SYNCED,
            Status::True,
            reasons::STATUS_FEEDBACK_SYNCED,
            "",
        ),
        Err(e) => ConditionUpdate::new(
            STATUS_FEEDBACK_SYNCED,
            Status::False,
            reasons::STATUS_FEEDBACK_SYNC_FAILED,
            cap_message(format!("Sync status feedback failed with error {e}")),
        ),
    }
}

/// `StatusFeedbackSynced` of a manifest without feedback rules: True `NoStatusFeedbackSynced`
/// with an empty message.
pub fn no_feedback_condition() -> ConditionUpdate {
    ConditionUpdate::new(
        STATUS_FEEDBACK_SYNCED,
        Status::True,
        reasons::NO_STATUS_FEEDBACK_SYNCED,
        "",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applied_strings() {
        let ok = applied_condition(Ok(()));
        assert_eq!(
            ok.parts(),
            (
                "Applied",
                Status::True,
                "AppliedManifestComplete",
                "Apply manifest complete"
            )
        );
        let failed = applied_condition(Err("conflict"));
        assert_eq!(
            (
                failed.status,
                failed.reason.as_str(),
                failed.message.as_str()
            ),
            (
                Status::False,
                "AppliedManifestFailed",
                "Failed to apply manifest: conflict"
            )
        );
    }

    #[test]
    fn available_strings() {
        let c = available_condition(Availability::Exists);
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (Status::True, "ResourceAvailable", "Resource is available")
        );
        let c = available_condition(Availability::Missing);
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (
                Status::False,
                "ResourceNotAvailable",
                "Resource is not available"
            )
        );
        let c = available_condition(Availability::FetchFailed("timeout"));
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (
                Status::Unknown,
                "FetchingResourceFailed",
                "Failed to fetch resource: timeout"
            )
        );
        assert_eq!(c.type_, "Available");
        let c = available_condition(Availability::IncompleteMeta);
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (
                Status::Unknown,
                "IncompleteResourceMeta",
                "Resource meta is incomplete"
            )
        );
    }

    #[test]
    fn feedback_strings() {
        let c = feedback_condition(Ok(()));
        assert_eq!(
            c.parts(),
            (
                "StatusFeedbackSynced",
                Status::True,
                "StatusFeedbackSynced",
                ""
            )
        );
        let c = feedback_condition(Err("bad path"));
        assert_eq!(
            (c.status, c.reason.as_str(), c.message.as_str()),
            (
                Status::False,
                "StatusFeedbackSyncFailed",
                "Sync status feedback failed with error bad path"
            )
        );
        let c = no_feedback_condition();
        assert_eq!(
            c.parts(),
            (
                "StatusFeedbackSynced",
                Status::True,
                "NoStatusFeedbackSynced",
                ""
            )
        );
    }

    #[test]
    fn long_errors_are_capped() {
        let long = "x".repeat(100_000);
        assert!(applied_condition(Err(&long)).message.len() <= crate::condition::MAX_MESSAGE_BYTES);
    }
}
