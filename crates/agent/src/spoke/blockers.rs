//! Wakes blocked works when something that may unblock them appears on the spoke: a Namespace
//! (a manifest in a missing namespace) or a CustomResourceDefinition (a kind not served yet).
//! One metadata-only watch each; events of the initial list wake nobody. A CRD deleted takes
//! its group out of the discovery cache, which so holds only what the spoke serves.

use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::watcher::{self, Event};

use crate::backoff::Backoff;
use crate::spoke::metadata_events;
use crate::spoke::triggers::Triggers;

/// Starts the two watches; they run until the returned handles are aborted or the trigger
/// queue closes.
pub fn spawn(
    spoke: kube::Client,
    backoff: Arc<Backoff>,
    triggers: Triggers,
    resolver: applier::Resolver,
) -> [tokio::task::JoinHandle<()>; 2] {
    let forget_group: OnDelete = Arc::new(move |crd: &str| {
        // A CRD's name is `<plural>.<group>`.
        if let Some((_, group)) = crd.split_once('.') {
            resolver.forget_group(group);
        }
    });
    [
        tokio::spawn(wake_on(
            metadata_events(Api::<PartialObjectMeta<Namespace>>::all(spoke.clone())),
            "namespace",
            backoff.clone(),
            triggers.clone(),
            None,
        )),
        tokio::spawn(wake_on(
            metadata_events(Api::<PartialObjectMeta<CustomResourceDefinition>>::all(
                spoke,
            )),
            "customresourcedefinition",
            backoff,
            triggers,
            Some(forget_group),
        )),
    ]
}

/// Called with the name of an object the watch saw deleted.
type OnDelete = Arc<dyn Fn(&str) + Send + Sync>;

async fn wake_on<K>(
    mut events: BoxStream<'static, watcher::Result<Event<PartialObjectMeta<K>>>>,
    what: &'static str,
    backoff: Arc<Backoff>,
    triggers: Triggers,
    on_delete: Option<OnDelete>,
) {
    while let Some(event) = events.next().await {
        match event {
            // A new object, or a change (a CRD becoming Established is a change).
            Ok(Event::Apply(object)) => {
                let blocked = backoff.blocked_works();
                if !blocked.is_empty() {
                    tracing::debug!(kind = what, name = ?object.metadata.name, works = blocked.len(),
                        "retrying blocked works");
                }
                for work in blocked {
                    if !triggers.send(work) {
                        return;
                    }
                }
            }
            Ok(Event::Delete(object)) => {
                if let (Some(on_delete), Some(name)) = (&on_delete, &object.metadata.name) {
                    on_delete(name);
                }
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(kind = what, error = %e, "watch error"),
        }
    }
}
