//! The works this agent deleted and forgot: enough of each to tell a late copy of it from news,
//! and to say `Deleted` again.

use cloudevents::EventType;
use cloudevents::codec::SpecUpdate;
use work_api::ManifestWork;

use super::status;
use crate::hub::hearing::GoneWork;

/// How many works deleted here are remembered (see [`Deleted`]).
pub const DELETED_REMEMBERED: usize = 10_000;

/// The works this agent cleaned up and forgot (UID → generation and creation time at deletion),
/// the latest [`DELETED_REMEMBERED`]: an update or resync answer for one of them that is neither
/// newer nor a deletion is a late one (part of a resync answer made before the deletion, a
/// redelivery) and must not bring the work back, since the source, once it has the `Deleted`,
/// keeps no copy that would delete it again. A `create_request` is always taken: Maestro derives
/// resource IDs from names, so a work deleted and created again comes back under the same UID at
/// generation 1.
///
/// Maestro's spec events carry the resource's creation time (`metadata.creationTimestamp`): a work
/// created again has a new one, so a deletion remembered with it tells a late copy from a new
/// work by that alone, and is kept across spec resync requests (a late part of an answer to an
/// earlier request may come after the next request). A deletion remembered without it is
/// forgotten with each spec resync request: the answer to that is the source's state after the
/// deletion, and a work created again while the agent was away comes that way. The deletions with
/// a creation time are also kept on the spoke ([`super::kept`]), so that a restarted agent knows
/// them.
#[derive(Default)]
pub struct Deleted {
    works: std::collections::HashMap<String, Tombstone>,
    order: std::collections::VecDeque<String>,
}

/// What is remembered of one deleted work: enough to tell a late copy of it and to say
/// `Deleted` again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tombstone {
    /// The work's name.
    pub name: String,
    /// Its generation when its deletion began.
    pub generation: i64,
    /// Its creation time, in seconds since the epoch, when the source sent one.
    pub created: Option<i64>,
    /// The source that sent it (its status events' `originalsource`).
    pub source: String,
}

impl Tombstone {
    /// What is remembered of `work`.
    pub fn of(work: &ManifestWork) -> Self {
        Self {
            name: work.metadata.name.clone().unwrap_or_default(),
            generation: work.metadata.generation.unwrap_or(0),
            created: work
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.as_second()),
            source: status::original_source(work),
        }
    }

    /// The work as its `Deleted` status event describes it.
    pub fn deleted_work(&self, uid: &str, cluster: &str) -> ManifestWork {
        status::with_deleted_condition(status::gone_work(
            GoneWork {
                name: &self.name,
                uid,
                source: &self.source,
                generation: self.generation,
            },
            cluster,
        ))
    }
}

impl Deleted {
    /// Remembers the deletion of `uid`, forgetting the oldest past [`DELETED_REMEMBERED`].
    pub fn remember(&mut self, uid: &str, tombstone: Tombstone) {
        if self.works.insert(uid.to_string(), tombstone).is_none() {
            self.order.push_back(uid.to_string());
        }
        while self.order.len() > DELETED_REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.works.remove(&old);
            }
        }
    }

    /// Forgets the deletion of `uid` (the source sent the work again, and it was taken).
    pub fn forget(&mut self, uid: &str) {
        if self.works.remove(uid).is_some() {
            self.order.retain(|u| u != uid);
        }
    }

    /// Forgets the deletions of works without a creation time (a spec resync request is on its
    /// way).
    pub fn clear_unversioned(&mut self) {
        self.works.retain(|_, t| t.created.is_some());
        let works = &self.works;
        self.order.retain(|uid| works.contains_key(uid));
    }

    /// The deleted works among `uids`, as their `Deleted` status events describe them.
    pub fn deleted_works<'a>(
        &self,
        uids: impl Iterator<Item = &'a str>,
        cluster: &str,
    ) -> Vec<ManifestWork> {
        uids.filter_map(|uid| Some(self.works.get(uid)?.deleted_work(uid, cluster)))
            .collect()
    }

    /// Whether `update` is a late event of a work deleted here.
    pub fn is_late(&self, update: &SpecUpdate) -> bool {
        let Some(deleted) = self.works.get(&update.uid) else {
            return false;
        };
        let created = update.creation_timestamp.map(|t| t.timestamp());
        let same_work = match (deleted.created, created) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        update.deletion_timestamp.is_none()
            && update.event_type != EventType::SpecCreate
            && same_work
            && update.generation <= deleted.generation
    }
}
