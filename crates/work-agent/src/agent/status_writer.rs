//! The one place that writes ManifestWork status on the hub: a status is built from the freshest
//! object, written only when it differs, with optimistic locking and conflicts retried.

use std::time::Duration;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use work_api::{ManifestWork, ManifestWorkStatus};

use super::error::Error;

const ATTEMPTS: usize = 5;

/// Writes ManifestWork status.
#[derive(Clone)]
pub struct StatusWriter {
    api: Api<ManifestWork>,
}

impl StatusWriter {
    /// A writer for the works of one namespace.
    pub fn new(api: Api<ManifestWork>) -> Self {
        Self { api }
    }

    /// Builds the status from `current` (then from a fresh read after each conflict) with `build`,
    /// which returns `None` when nothing needs writing. Returns the status written, if any.
    pub async fn write<F>(
        &self,
        current: &ManifestWork,
        build: F,
    ) -> Result<Option<ManifestWorkStatus>, Error>
    where
        F: Fn(&ManifestWork) -> Option<ManifestWorkStatus>,
    {
        let name = current.name_any();
        let mut fresh: Option<ManifestWork> = None;
        for attempt in 0..ATTEMPTS {
            let work = fresh.as_ref().unwrap_or(current);
            let Some(status) = build(work) else {
                return Ok(None);
            };
            let patch = json!({
                "metadata": { "resourceVersion": work.resource_version() },
                "status": status,
            });
            match self
                .api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(Some(status)),
                Err(kube::Error::Api(s)) if s.is_conflict() => {
                    tracing::debug!(work = %name, attempt, "status conflict, re-reading");
                    tokio::time::sleep(Duration::from_millis(20 * (attempt as u64 + 1))).await;
                    match self.api.get_opt(&name).await.map_err(Error::Hub)? {
                        Some(w) => fresh = Some(w),
                        None => return Ok(None),
                    }
                }
                Err(kube::Error::Api(s)) if s.is_not_found() => return Ok(None),
                Err(e) => return Err(Error::Hub(e)),
            }
        }
        Err(Error::StatusConflict(name))
    }
}
