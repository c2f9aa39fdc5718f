//! The agent's side of the CloudEvents work protocol, made as the agent makes it: for tests of the
//! clients and of the sources that need an agent's events without running an agent.

use std::sync::Arc;

use cloudevents::CloudEvent;
use cloudevents::client::SubscribedHook;
use cloudevents::codec::{self, StatusReport};
use cloudevents::types::EventType;
use work_api::ManifestWorkStatus;

/// The client id of the agent of `cluster`, as the agent names itself.
pub fn client_id(cluster: &str) -> String {
    format!("{cluster}-work-agent")
}

/// The `status.update_request` the agent of `cluster` publishes for the work `uid` of Maestro's
/// source at `generation`, with sequence id `seq`.
pub fn status_update(
    cluster: &str,
    uid: &str,
    generation: i64,
    seq: u64,
    status: &ManifestWorkStatus,
) -> Result<CloudEvent, cloudevents::Error> {
    let report = StatusReport {
        uid,
        generation,
        cluster,
        original_source: "maestro",
        metadata: None,
        status,
    };
    codec::encode_status(&report, EventType::StatusUpdate, &client_id(cluster), seq)
}

/// A subscribed hook that publishes an empty spec resync request, as a restarted agent does; a
/// request that cannot be made or queued is logged to stderr (the test then waits for it in vain
/// and says what it waited for).
pub fn resync_hook(cluster: &str) -> SubscribedHook {
    let cluster = cluster.to_string();
    Arc::new(move |p| {
        let queued = codec::encode_spec_resync_request(vec![], &cluster, p.source())
            .map_err(|e| e.to_string())
            .and_then(|ev| p.publish(ev).map_err(|e| e.to_string()));
        if let Err(e) = queued {
            eprintln!("the spec resync request of {cluster} was not queued: {e}");
        }
    })
}
