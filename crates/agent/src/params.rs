//! Request parameters of the agent's own writes: every write names the agent's field manager, so
//! `managedFields` shows `work-agent` rather than `unknown`.

use kube::api::{DeleteParams, PatchParams, PostParams, Preconditions};

/// The field manager of every write the agent makes itself (the default of server-side apply).
pub const FIELD_MANAGER: &str = work_api::DEFAULT_FIELD_MANAGER;

/// Parameters of a merge patch by the agent.
pub fn patch() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// Parameters of a create or replace by the agent.
pub fn post() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// Parameters of a delete of exactly the object `uid` (a 409 Conflict if the name now belongs to
/// another object), with the server's default propagation.
pub fn delete_of(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// [`delete_of`] with Background propagation.
pub fn delete_background_of(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        propagation_policy: DeleteParams::background().propagation_policy,
        ..delete_of(uid)
    }
}
