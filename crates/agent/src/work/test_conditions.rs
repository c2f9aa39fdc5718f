//! Conditions as the tests of `drift` and `holds` write them: at a fixed clock.

use conditions::{Condition, ConditionUpdate};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// `secs` after a fixed instant.
pub fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
}

/// `u` as written at [`at`]`(0)`, generation 1.
pub fn written(u: &ConditionUpdate) -> Condition {
    Condition {
        type_: u.type_.clone(),
        status: u.status.as_str().to_string(),
        reason: u.reason.clone(),
        message: u.message.clone(),
        last_transition_time: Time(at(0)),
        observed_generation: Some(1),
    }
}
