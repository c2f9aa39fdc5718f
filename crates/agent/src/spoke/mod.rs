//! The managed cluster's side, as the work logic uses it: the watches and caches of applied
//! resources and AppliedManifestWorks, their records, executor checks, status feedback, and the
//! triggers that wake works.

pub mod applied_work;
pub mod blockers;
pub mod cleanup_memory;
pub mod executor;
pub mod feedback;
pub mod live_object;
pub mod object_store;
pub mod triggers;
pub mod watches;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

/// The events of a metadata-only watch of every object of `K` that `api` sees, restarted with
/// kube's default backoff when it fails.
pub(crate) fn metadata_events<K>(
    api: Api<PartialObjectMeta<K>>,
) -> BoxStream<'static, watcher::Result<Event<PartialObjectMeta<K>>>>
where
    K: kube::Resource + Clone + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
    PartialObjectMeta<K>: kube::Resource<DynamicType = K::DynamicType>
        + serde::de::DeserializeOwned
        + Clone
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher::watcher(api, watcher::Config::default())
        .default_backoff()
        .boxed()
}
