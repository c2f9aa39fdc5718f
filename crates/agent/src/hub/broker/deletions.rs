//! A deleted work's state in the broker hub: one record per UID, all of them behind one lock.
//!
//! A record holds what is remembered of the work once it is forgotten ([`Tombstone`]: a late
//! copy stays out, `Deleted` is said again), whether this agent deleted it itself (its TTL ran
//! out: the source must then show it heard the deletion), and where its `Deleted` stands with the
//! source ([`told`]: in the transport, taken, asked about, unconfirmed). The three change
//! together as a deletion is told, heard and asked about; one record keeps them from disagreeing.
//! A record goes once it holds none of them.
//!
//! [`told`]: super::told

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::time::Instant;

use cloudevents::codec::{ResourceVersion, SpecUpdate};
use work_api::ManifestWork;

use super::told::{Moved, Rounds, Told};
use super::tombstone::Tombstone;

/// How many tombstones are remembered: the latest, the oldest forgotten first.
pub const DELETED_REMEMBERED: usize = 10_000;

/// One deleted work's state.
#[derive(Debug, Default)]
struct Deletion {
    /// What is remembered of it once forgotten.
    tombstone: Option<Tombstone>,
    /// The agent deleted it itself, and its `Deleted` is not told yet.
    deleted_here: bool,
    /// Its `Deleted`, told and not heard yet.
    told: Option<Told>,
}

impl Deletion {
    /// Whether it holds nothing any more (the record then goes).
    fn is_empty(&self) -> bool {
        self.tombstone.is_none() && !self.deleted_here && self.told.is_none()
    }
}

/// The deleted works' records, by UID.
#[derive(Debug, Default)]
pub struct Deletions {
    /// One record per UID.
    records: HashMap<String, Deletion>,
    /// The UIDs with a tombstone, oldest first.
    remembered: VecDeque<String>,
    /// The works whose `Deleted` is told and not heard, by name, to their record's UID: one per
    /// name (a work created again under it and deleted again replaces the earlier one), in the
    /// order requests list them.
    telling: BTreeMap<String, String>,
    /// The works heard since the last [`Deletions::take_heard`].
    heard: Vec<String>,
    /// The pacing of the requests to confirm.
    rounds: Rounds,
}

impl Deletions {
    /// The record of `uid`, made when there is none.
    fn record(&mut self, uid: &str) -> &mut Deletion {
        self.records.entry(uid.to_string()).or_default()
    }

    /// Drops the record of `uid` once it holds nothing.
    fn drop_if_empty(&mut self, uid: &str) {
        if self.records.get(uid).is_some_and(Deletion::is_empty) {
            self.records.remove(uid);
        }
    }

    /// Remembers the deletion of `uid`, forgetting the oldest past [`DELETED_REMEMBERED`].
    pub fn remember(&mut self, uid: &str, tombstone: Tombstone) {
        if self.record(uid).tombstone.replace(tombstone).is_none() {
            self.remembered.push_back(uid.to_string());
        }
        while self.remembered.len() > DELETED_REMEMBERED {
            if let Some(old) = self.remembered.pop_front() {
                if let Some(record) = self.records.get_mut(&old) {
                    record.tombstone = None;
                }
                self.drop_if_empty(&old);
            }
        }
    }

    /// Forgets the deletion of `uid` (the source sent the work again, and it was taken).
    pub fn forget(&mut self, uid: &str) {
        let Some(record) = self.records.get_mut(uid) else {
            return;
        };
        if record.tombstone.take().is_some() {
            self.remembered.retain(|u| u != uid);
            self.drop_if_empty(uid);
        }
    }

    /// Forgets the deletions of works without a creation time (a spec resync request is on its
    /// way: its answer is the source's state after them; see [`super::tombstone`]).
    pub fn clear_unversioned(&mut self) {
        let records = &mut self.records;
        self.remembered.retain(|uid| {
            let Some(record) = records.get_mut(uid) else {
                return false;
            };
            if record
                .tombstone
                .as_ref()
                .is_some_and(|t| t.created.is_some())
            {
                return true;
            }
            record.tombstone = None;
            if record.is_empty() {
                records.remove(uid);
            }
            false
        });
    }

    /// The deleted works among `uids`, as their `Deleted` status events describe them.
    pub fn deleted_works<'a>(
        &self,
        uids: impl Iterator<Item = &'a str>,
        cluster: &str,
    ) -> Vec<ManifestWork> {
        uids.filter_map(|uid| {
            let tombstone = self.records.get(uid)?.tombstone.as_ref()?;
            Some(tombstone.deleted_work(uid, cluster))
        })
        .collect()
    }

    /// Whether `update` is a late event of a work deleted here.
    pub fn is_late(&self, update: &SpecUpdate) -> bool {
        self.records
            .get(&update.uid)
            .and_then(|r| r.tombstone.as_ref())
            .is_some_and(|t| t.is_late(update))
    }

    /// The agent deletes work `uid` itself (its TTL ran out): the source must show it heard the
    /// `Deleted` told once its cleanup is done.
    pub fn deleting_here(&mut self, uid: &str) {
        self.record(uid).deleted_here = true;
    }

    /// Whether the agent deleted work `uid` itself; asked once, as its `Deleted` is told.
    pub fn take_deleted_here(&mut self, uid: &str) -> bool {
        let Some(record) = self.records.get_mut(uid) else {
            return false;
        };
        let here = std::mem::take(&mut record.deleted_here);
        self.drop_if_empty(uid);
        here
    }

    /// `Deleted` of work `name` (`uid`) was handed to the transport under `key`; with `confirm`,
    /// it is heard only once the source shows it no longer has the work. It replaces one told
    /// earlier under the name.
    pub fn told(&mut self, name: &str, uid: &str, key: String, confirm: bool) {
        if let Some(earlier) = self.telling.insert(name.to_string(), uid.to_string())
            && earlier != uid
        {
            if let Some(record) = self.records.get_mut(&earlier) {
                record.told = None;
            }
            self.drop_if_empty(&earlier);
        }
        let before = self.record(uid).told.replace(Told::new(name, key, confirm));
        // A UID keeps its name; were it told under another one, that one gives way.
        if let Some(before) = before
            && before.name != name
        {
            self.telling.remove(&before.name);
        }
    }

    /// Whether a deletion of work `name` is being told.
    pub fn is_telling(&self, name: &str) -> bool {
        self.telling.contains_key(name)
    }

    /// How many deletions are told and not heard.
    pub fn unheard(&self) -> usize {
        self.telling.len()
    }

    /// Moves on what the transport took by `now`: heard when no confirmation is needed, else
    /// taken; and drops the unconfirmed ones once the next round may start.
    pub fn refresh(&mut self, is_pending: impl Fn(&str) -> bool, now: Instant) {
        let next_round = self.rounds.next_round(now);
        let mut done = Vec::new();
        for (name, uid) in &self.telling {
            let Some(told) = self.records.get_mut(uid).and_then(|r| r.told.as_mut()) else {
                continue;
            };
            match told.refresh(&is_pending, next_round, now) {
                Moved::Kept => continue,
                Moved::Heard => self.heard.push(name.clone()),
                Moved::Dropped => {}
            }
            done.push((name.clone(), uid.clone()));
        }
        for (name, uid) in done {
            self.stop_telling(&name, &uid);
        }
    }

    /// Forgets the told deletion of work `name` (`uid`).
    fn stop_telling(&mut self, name: &str, uid: &str) {
        self.telling.remove(name);
        if let Some(record) = self.records.get_mut(uid) {
            record.told = None;
        }
        self.drop_if_empty(uid);
    }

    /// The source answered a deletion without data for `uid`: it does not hold the work. Returns
    /// whether that confirmed a told deletion.
    pub fn confirm(&mut self, uid: &str) -> bool {
        let Some(told) = self
            .records
            .get_mut(uid)
            .and_then(|r| r.told.take_if(|t| t.confirm))
        else {
            return false;
        };
        self.stop_telling(&told.name, uid);
        self.heard.push(told.name);
        self.rounds.confirmed();
        true
    }

    /// The answer to the request that asked is in: what it did not confirm is unconfirmed
    /// (told again in the next round), and the next round waits the pacing, which grows unless
    /// something was confirmed.
    pub fn answer_in(&mut self, now: Instant) {
        if !self.rounds.is_asking() {
            return;
        }
        let mut unconfirmed = 0;
        for uid in self.telling.values() {
            if let Some(told) = self.records.get_mut(uid).and_then(|r| r.told.as_mut())
                && told.answer_in()
            {
                unconfirmed += 1;
            }
        }
        if unconfirmed > 0 {
            tracing::info!(
                unconfirmed,
                "the source's answer did not show it heard these deletions; told again in the next round"
            );
        }
        self.rounds.answered(now);
    }

    /// Whether to send a request to confirm at `now`: some deletion was taken a while ago, none
    /// is awaiting an answer, and the pacing allows.
    pub fn should_ask(&self, now: Instant) -> bool {
        let due = self.telling.values().any(|uid| {
            self.records
                .get(uid)
                .and_then(|r| r.told.as_ref())
                .is_some_and(|t| t.is_due(now))
        });
        due && self.rounds.may_ask(now)
    }

    /// The ids to list (at version 0) in a spec resync request, each then awaiting its answer:
    /// every deletion to confirm that the transport took.
    pub fn ask(&mut self) -> Vec<ResourceVersion> {
        let mut listed = Vec::new();
        for uid in self.telling.values() {
            if let Some(told) = self.records.get_mut(uid).and_then(|r| r.told.as_mut())
                && told.ask()
            {
                listed.push(ResourceVersion {
                    resource_id: uid.clone(),
                    resource_version: 0,
                });
            }
        }
        self.rounds.asked(!listed.is_empty());
        listed
    }

    /// The works whose deletion was heard since the last call.
    pub fn take_heard(&mut self) -> Vec<String> {
        std::mem::take(&mut self.heard)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use cloudevents::EventType;

    use super::*;
    use crate::hub::broker::tests::create;
    use crate::hub::broker::told::{
        CONFIRM_AFTER_TAKEN, CONFIRM_PERIOD_FIRST, CONFIRM_PERIOD_LAST,
    };

    const S: Duration = Duration::from_secs(1);

    fn ids(listed: &[ResourceVersion]) -> Vec<(&str, i64)> {
        listed
            .iter()
            .map(|v| (v.resource_id.as_str(), v.resource_version))
            .collect()
    }

    fn tombstone(name: &str, generation: i64, created: Option<i64>) -> Tombstone {
        Tombstone {
            name: name.into(),
            generation,
            created,
            source: "maestro".into(),
        }
    }

    /// An update of `uid` at `generation`, as part of a resync answer.
    fn update(uid: &str, generation: i64, created: Option<i64>) -> SpecUpdate {
        let mut update = create(uid, generation);
        update.event_type = EventType::SpecResyncResponse;
        update.creation_timestamp =
            created.map(|s| chrono::DateTime::from_timestamp(s, 0).expect("a time"));
        update
    }

    #[test]
    fn a_deletion_from_the_source_is_heard_once_the_transport_took_it() {
        let now = Instant::now();
        let mut told = Deletions::default();
        told.told("w1", "u1", "k1".into(), false);
        told.refresh(|_| true, now);
        assert!(told.take_heard().is_empty());
        assert!(told.is_telling("w1"));
        told.refresh(|_| false, now);
        assert_eq!(told.take_heard(), ["w1"]);
        assert_eq!(told.unheard(), 0);
        assert!(!told.should_ask(now + 10 * S), "nothing to confirm");
    }

    #[test]
    fn a_deletion_made_here_is_heard_only_when_an_answer_deletes_it() {
        let start = Instant::now();
        let mut told = Deletions::default();
        // Confirmed while still in the transport: the source does not have the work either way.
        told.told("w1", "u1", "k1".into(), true);
        assert!(told.confirm("u1"));
        assert_eq!(told.take_heard(), ["w1"]);
        told.told("w2", "u2", "k2".into(), true);
        told.refresh(|_| false, start);
        assert!(told.take_heard().is_empty(), "taken is not heard");
        assert!(
            !told.should_ask(start),
            "the source gets a moment to handle it"
        );
        assert!(told.should_ask(start + CONFIRM_AFTER_TAKEN));
        let listed = told.ask();
        assert_eq!(ids(&listed), [("u2", 0)]);
        assert!(!told.should_ask(start + 100 * S), "one request at a time");
        assert!(!told.confirm("u-other"));
        assert!(told.confirm("u2"));
        assert_eq!(told.take_heard(), ["w2"]);
        assert_eq!(told.unheard(), 0);
    }

    #[test]
    fn an_answer_without_the_deletion_leaves_it_unheard_for_the_next_round_which_comes_later() {
        let start = Instant::now();
        let mut told = Deletions::default();
        told.told("w1", "u1", "k1".into(), true);
        told.refresh(|_| false, start);
        let at = start + CONFIRM_AFTER_TAKEN;
        assert_eq!(told.ask().len(), 1);
        told.answer_in(at);
        assert!(told.take_heard().is_empty(), "not heard");
        // Kept (so not told again) until the next round may start, then dropped: the eviction
        // scan tells it again.
        told.refresh(|_| false, at + CONFIRM_PERIOD_FIRST - S);
        assert!(told.is_telling("w1"));
        let second = at + CONFIRM_PERIOD_FIRST;
        told.refresh(|_| false, second);
        assert!(!told.is_telling("w1"), "dropped");
        assert!(told.take_heard().is_empty(), "not heard");
        told.told("w1", "u1", "k2".into(), true);
        told.refresh(|_| false, second);
        assert!(told.should_ask(second + CONFIRM_AFTER_TAKEN));
        assert_eq!(told.ask().len(), 1);
        told.answer_in(second);
        // The pacing doubled.
        told.refresh(|_| false, second + 2 * CONFIRM_PERIOD_FIRST - S);
        assert!(told.is_telling("w1"));
        told.refresh(|_| false, second + 2 * CONFIRM_PERIOD_FIRST);
        assert!(!told.is_telling("w1"));
    }

    #[test]
    fn the_pacing_never_exceeds_its_ceiling_and_a_confirmation_resets_it() {
        let mut now = Instant::now();
        let mut told = Deletions::default();
        for _ in 0..20 {
            told.told("w1", "u1", "k".into(), true);
            told.refresh(|_| false, now);
            now += CONFIRM_PERIOD_LAST;
            assert!(told.should_ask(now));
            told.ask();
            told.answer_in(now);
        }
        assert_eq!(told.rounds.period, CONFIRM_PERIOD_LAST);
        told.told("w1", "u1", "k".into(), true);
        told.told("w2", "u2", "k".into(), true);
        told.refresh(|_| false, now);
        now += CONFIRM_PERIOD_LAST;
        assert_eq!(told.ask().len(), 2);
        assert!(told.confirm("u1"));
        told.answer_in(now);
        assert_eq!(told.rounds.period, CONFIRM_PERIOD_FIRST);
        assert_eq!(told.take_heard(), ["w1"]);
    }

    #[test]
    fn an_event_still_in_the_transport_is_not_listed() {
        let now = Instant::now();
        let mut told = Deletions::default();
        told.told("w1", "u1", "k1".into(), true);
        told.refresh(|_| true, now);
        assert!(!told.should_ask(now + 10 * S));
        assert!(told.ask().is_empty());
    }

    #[test]
    fn a_work_deleted_again_under_its_name_replaces_its_earlier_telling() {
        let mut told = Deletions::default();
        told.told("w1", "u1", "k1".into(), true);
        told.told("w1", "u2", "k2".into(), true);
        assert_eq!(told.unheard(), 1);
        assert!(!told.confirm("u1"), "the earlier one is no longer told");
        assert!(told.confirm("u2"));
        assert_eq!(told.take_heard(), ["w1"]);
        assert!(told.records.is_empty(), "{:?}", told.records);
    }

    #[test]
    fn a_deletion_made_here_is_said_once() {
        let mut deletions = Deletions::default();
        assert!(!deletions.take_deleted_here("u1"));
        deletions.deleting_here("u1");
        assert!(deletions.take_deleted_here("u1"));
        assert!(!deletions.take_deleted_here("u1"), "taken");
        assert!(deletions.records.is_empty(), "{:?}", deletions.records);
    }

    #[test]
    fn a_tombstone_tells_a_late_copy_from_news() {
        let mut deleted = Deletions::default();
        deleted.remember("u1", tombstone("w1", 2, Some(100)));
        assert!(deleted.is_late(&update("u1", 2, Some(100))));
        assert!(
            deleted.is_late(&update("u1", 1, None)),
            "no time: the same work"
        );
        assert!(!deleted.is_late(&update("u1", 3, Some(100))), "newer");
        assert!(
            !deleted.is_late(&update("u1", 1, Some(200))),
            "created again"
        );
        let mut create = update("u1", 1, Some(100));
        create.event_type = EventType::SpecCreate;
        assert!(
            !deleted.is_late(&create),
            "a create_request is always taken"
        );
        let mut deleting = update("u1", 2, Some(100));
        deleting.deletion_timestamp = Some(chrono::Utc::now());
        assert!(
            !deleted.is_late(&deleting),
            "a deletion again is cleaned up"
        );
        assert!(
            !deleted.is_late(&update("u2", 1, None)),
            "never deleted here"
        );
        let said = deleted.deleted_works(["u1", "u2"].into_iter(), "cluster1");
        assert_eq!(said.len(), 1);
        assert_eq!(said[0].metadata.uid.as_deref(), Some("u1"));
        deleted.forget("u1");
        assert!(!deleted.is_late(&update("u1", 2, Some(100))), "forgotten");
        assert!(deleted.records.is_empty() && deleted.remembered.is_empty());
    }

    #[test]
    fn a_resync_request_forgets_the_tombstones_without_a_creation_time() {
        let mut deleted = Deletions::default();
        deleted.remember("u1", tombstone("w1", 1, None));
        deleted.remember("u2", tombstone("w2", 1, Some(100)));
        deleted.told("w1", "u1", "k1".into(), true);
        deleted.clear_unversioned();
        assert!(!deleted.is_late(&update("u1", 1, None)));
        assert!(deleted.is_late(&update("u2", 1, None)));
        assert_eq!(deleted.remembered, ["u2"]);
        assert!(deleted.is_telling("w1"), "its telling stays");
    }

    #[test]
    fn the_oldest_tombstones_go_past_the_limit_and_the_rest_of_their_record_stays() {
        let mut deleted = Deletions::default();
        deleted.told("w0", "u0", "k0".into(), true);
        for i in 0..=DELETED_REMEMBERED {
            deleted.remember(&format!("u{i}"), tombstone(&format!("w{i}"), 1, None));
        }
        assert_eq!(deleted.remembered.len(), DELETED_REMEMBERED);
        assert!(
            !deleted.is_late(&update("u0", 1, None)),
            "the oldest forgotten"
        );
        assert!(deleted.is_late(&update("u1", 1, None)));
        assert!(deleted.is_telling("w0"));
        assert!(deleted.confirm("u0"));
        assert_eq!(deleted.records.len(), DELETED_REMEMBERED);
    }
}
