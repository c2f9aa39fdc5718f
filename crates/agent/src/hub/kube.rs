//! The Kubernetes hub: ManifestWorks of the cluster namespace, watched, and written with merge
//! and JSON patches under optimistic locking.

use futures::StreamExt;
use futures::future::BoxFuture;
use kube::api::{ListParams, Patch};
use kube::runtime::events::{Event, Recorder};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde_json::json;
use work_api::{ManifestWork, ManifestWorkStatus};

use super::auth::{HubAuth, ProbeAnswer};
use super::seam::{Hub, HubResult, WorkEvents};
use crate::finalizer_patch;
use crate::hub::stored_work::StoredWork;
use crate::params;

/// A hub API server, reached with one client, serving one cluster namespace.
pub struct KubeHub {
    client: kube::Client,
    works: Api<ManifestWork>,
    namespace: String,
    recorder: Recorder,
    auth: HubAuth,
}

impl KubeHub {
    /// The hub at `client`, for the works of `namespace`; Events name `reporter`.
    pub fn new(
        client: kube::Client,
        namespace: &str,
        reporter: kube::runtime::events::Reporter,
    ) -> Self {
        Self {
            works: Api::namespaced(client.clone(), namespace),
            recorder: Recorder::new(client.clone(), reporter),
            namespace: namespace.to_owned(),
            auth: HubAuth::new(),
            client,
        }
    }
}

impl Hub for KubeHub {
    fn watch_works(&self) -> WorkEvents {
        let auth = self.auth.clone();
        auth.watch_started();
        let api: Api<StoredWork> = Api::namespaced(self.client.clone(), &self.namespace);
        watcher(api, watcher::Config::default())
            .default_backoff()
            .inspect(move |e| auth.observe(e))
            .boxed()
    }

    fn get_work<'a>(&'a self, name: &'a str) -> HubResult<'a, Option<ManifestWork>> {
        Box::pin(self.works.get_opt(name))
    }

    fn write_status<'a>(
        &'a self,
        name: &'a str,
        resource_version: Option<&'a str>,
        status: &'a ManifestWorkStatus,
    ) -> HubResult<'a, ManifestWork> {
        Box::pin(async move {
            let patch = json!({
                "metadata": { "resourceVersion": resource_version },
                "status": status,
            });
            self.works
                .patch_status(name, &params::patch(), &Patch::Merge(&patch))
                .await
        })
    }

    fn set_finalizers<'a>(
        &'a self,
        work: &'a ManifestWork,
        finalizers: Vec<String>,
    ) -> HubResult<'a, ManifestWork> {
        Box::pin(finalizer_patch::set_finalizers(
            &self.works,
            work,
            finalizers,
        ))
    }

    fn delete_work<'a>(&'a self, name: &'a str, uid: &'a str) -> HubResult<'a, ()> {
        Box::pin(async move {
            let params = params::delete_of(Some(uid.to_owned()));
            self.works.delete(name, &params).await.map(|_| ())
        })
    }

    fn record_event<'a>(&'a self, work: &'a ManifestWork, event: Event) -> HubResult<'a, ()> {
        Box::pin(async move { self.recorder.publish(&event, &work.object_ref(&())).await })
    }

    fn reachable(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move { self.client.apiserver_version().await.is_ok() })
    }

    fn credentials_refused(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            // The watch's answer costs no request; only while it cannot tell, list one work.
            if let Some(refused) = self.auth.verdict() {
                tracing::debug!(refused, "liveness probe round from the ManifestWork watch");
                return refused;
            }
            let answer = ProbeAnswer::of(
                &self
                    .works
                    .list_metadata(&ListParams::default().limit(1))
                    .await,
            );
            if answer == ProbeAnswer::Refused {
                tracing::warn!("the hub refuses the agent's credentials (401 Unauthorized)");
            }
            self.auth.confirm(answer);
            tracing::debug!(?answer, "liveness probe round from a request to the hub");
            answer == ProbeAnswer::Refused
        })
    }

    fn watch_is_healthy(&self) -> bool {
        self.auth.watch_is_healthy()
    }
}
