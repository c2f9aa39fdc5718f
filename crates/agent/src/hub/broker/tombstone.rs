//! What is remembered of a work this agent deleted and forgot: enough to tell a late copy of it
//! from news, and to say `Deleted` again.
//!
//! An update or resync answer for such a work that is neither newer nor a deletion is a late one
//! (part of a resync answer made before the deletion, a redelivery) and must not bring the work
//! back, since the source, once it has the `Deleted`, keeps no copy that would delete it again. A
//! `create_request` is always taken: Maestro derives resource IDs from names, so a work deleted
//! and created again comes back under the same UID at generation 1.
//!
//! Maestro's spec events carry the resource's creation time (`metadata.creationTimestamp`): a
//! work created again has a new one, so a tombstone with it tells a late copy from a new work by
//! that alone, and is kept across spec resync requests (a late part of an answer to an earlier
//! request may come after the next request). A tombstone without it is forgotten with each spec
//! resync request: the answer to that is the source's state after the deletion, and a work
//! created again while the agent was away comes that way
//! ([`super::deletions::Deletions::clear_unversioned`]). The tombstones with a creation time are
//! also kept on the spoke ([`super::kept`]), so that a restarted agent knows them.

use cloudevents::EventType;
use cloudevents::codec::SpecUpdate;
use work_api::ManifestWork;

use super::status;
use crate::hub::hearing::GoneWork;

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

    /// Whether `update`, an event of the work's UID, is a late one: not a deletion, not a
    /// `create_request`, of the same work (by creation time, when both have one) and no newer.
    pub fn is_late(&self, update: &SpecUpdate) -> bool {
        let created = update.creation_timestamp.map(|t| t.timestamp());
        let same_work = match (self.created, created) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        update.deletion_timestamp.is_none()
            && update.event_type != EventType::SpecCreate
            && same_work
            && update.generation <= self.generation
    }
}
