//! Events as the agent makes them, for the crate's tests of what they take on a wire.

use crate::CloudEvent;
use crate::codec::{self, ResourceVersion, StatusReport};
use crate::types::EventType;

/// A `status.update_request` of `cluster1` with `metadata`, whose data is `data_bytes` bytes
/// (`None`: no data).
pub(crate) fn status(metadata: Option<serde_json::Value>, data_bytes: Option<usize>) -> CloudEvent {
    let status = work_api::ManifestWorkStatus::default();
    let report = StatusReport {
        uid: "6b8e0a52-5d3e-4c1e-9d8a-0f0e3c1b2a44",
        generation: 7,
        cluster: "cluster1",
        original_source: "maestro",
        metadata,
        status: &status,
    };
    let mut ev = codec::encode_status(
        &report,
        EventType::StatusUpdate,
        "cluster1-work-agent",
        2_125_174_315_350_495_232,
    )
    .expect("encodes");
    // A fixed time: the clock's varies in length (trailing zeros of the fraction are dropped),
    // and the tests compare sizes of events made one after another.
    ev.time = chrono::DateTime::from_timestamp(1_800_000_000, 123_456_789);
    ev.data = data_bytes.map(|n| vec![b'x'; n]);
    ev
}

/// The spec resync request of `cluster1` to all sources, listing `works` works.
pub(crate) fn resync_request(works: usize) -> CloudEvent {
    let versions = (0..works)
        .map(|i| ResourceVersion {
            resource_id: format!("00000000-0000-0000-0000-{i:012}"),
            resource_version: 1,
        })
        .collect();
    codec::encode_spec_resync_request(versions, "cluster1", "cluster1-work-agent").expect("encodes")
}
