//! Deletions kept on the spoke, so that a restarted agent still knows them.
//!
//! A late part of the source's answer to a spec resync request (made before a deletion, sent
//! after it) can reach the agent after a restart: without the deletion in memory, the work
//! would be applied again until a later answer deleted it. So when the source deletes a work
//! the agent holds, the deletion is written to a ConfigMap in the agent's namespace *before* any
//! cleanup begins, and read back at start. One write per batch of deletions the source sends at
//! once; nothing while no work is deleted.
//!
//! Only deletions of works with a creation time are kept (Maestro sends one for every work):
//! a deletion without one is forgotten with each spec resync request anyway
//! ([`super::tombstone`]).
//! A kept deletion is dropped an hour after it began (a late part comes within the time the
//! source takes to answer, seconds), and beyond [`KEPT_MOST`] deletions or [`KEPT_BYTES`] the
//! oldest go first.

use std::collections::{BTreeMap, HashMap};

use super::deletions::DELETED_REMEMBERED;
use super::tombstone::Tombstone;

/// How long after its deletion began a work's deletion is kept, in seconds.
pub const KEPT_FOR_SECONDS: i64 = 3600;

/// At most this many bytes of keys and values: well under a ConfigMap's 1 MiB.
pub const KEPT_BYTES: usize = 900 * 1024;

/// At most this many deletions: as many as memory holds.
pub const KEPT_MOST: usize = DELETED_REMEMBERED;

/// Changes to the ConfigMap's data: the value to set under a key, or `None` to remove it.
pub type DataPatch = BTreeMap<String, Option<String>>;

/// One kept deletion as stored under the work's UID: generation, creation time, when the
/// deletion began (seconds since the epoch), source, and name ("" when it is the UID, as
/// Maestro names works).
#[derive(serde::Serialize, serde::Deserialize)]
struct Entry(i64, i64, i64, String, String);

/// The value kept for the deletion of `uid` that began at `begun`; `None` without a creation
/// time.
pub fn encode(uid: &str, tombstone: &Tombstone, begun: i64) -> Option<String> {
    let created = tombstone.created?;
    let name = if tombstone.name == uid {
        String::new()
    } else {
        tombstone.name.clone()
    };
    serde_json::to_string(&Entry(
        tombstone.generation,
        created,
        begun,
        tombstone.source.clone(),
        name,
    ))
    .ok()
}

/// The deletion kept under `uid` and when it began; `None` when the value is not one.
pub fn decode(uid: &str, value: &str) -> Option<(Tombstone, i64)> {
    let Entry(generation, created, begun, source, name) = serde_json::from_str(value).ok()?;
    let name = if name.is_empty() {
        uid.to_string()
    } else {
        name
    };
    Some((
        Tombstone {
            name,
            generation,
            created: Some(created),
            source,
        },
        begun,
    ))
}

/// What the ConfigMap holds, as last read or written: per UID, when the deletion began and the
/// bytes its key and value take.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Kept {
    entries: HashMap<String, (i64, usize)>,
    /// Keys in the ConfigMap that are no deletion or expired: removed with the next write.
    stale: Vec<String>,
}

/// A write that brings the ConfigMap to a new kept set.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// The changes to write.
    pub patch: DataPatch,
    /// The kept set once they are written.
    pub after: Kept,
}

impl Kept {
    /// The kept set in `data` at `now`, and the deletions to remember from it (those not
    /// expired).
    pub fn read(data: &BTreeMap<String, String>, now: i64) -> (Self, Vec<(String, Tombstone)>) {
        let mut kept = Self::default();
        let mut remember = Vec::new();
        for (uid, value) in data {
            match decode(uid, value) {
                Some((tombstone, begun)) if now - begun < KEPT_FOR_SECONDS => {
                    kept.entries
                        .insert(uid.clone(), (begun, uid.len() + value.len()));
                    remember.push((uid.clone(), tombstone));
                }
                _ => kept.stale.push(uid.clone()),
            }
        }
        // Oldest first, as memory forgets.
        remember.sort_by_key(|(uid, _)| kept.entries.get(uid).map(|e| e.0));
        (kept, remember)
    }

    /// How many deletions are kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no deletion is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The write that adds the deletions `begun` at `now` and drops the expired ones, then the
    /// oldest while over [`KEPT_MOST`] or [`KEPT_BYTES`]; `None` when there is nothing to add.
    pub fn plan(&self, begun: &[(String, Tombstone)], now: i64) -> Option<Plan> {
        let mut patch = DataPatch::new();
        let mut after = self.clone();
        for uid in after.stale.drain(..) {
            patch.insert(uid, None);
        }
        let mut added = false;
        for (uid, tombstone) in begun {
            let Some(value) = encode(uid, tombstone, now) else {
                continue;
            };
            after
                .entries
                .insert(uid.clone(), (now, uid.len() + value.len()));
            patch.insert(uid.clone(), Some(value));
            added = true;
        }
        if !added {
            return None;
        }
        let mut by_age: Vec<(i64, String)> = after
            .entries
            .iter()
            .map(|(uid, (at, _))| (*at, uid.clone()))
            .collect();
        by_age.sort();
        let mut bytes: usize = after.entries.values().map(|e| e.1).sum();
        for (at, uid) in by_age {
            let over = after.entries.len() > KEPT_MOST || bytes > KEPT_BYTES;
            if !over && now - at < KEPT_FOR_SECONDS {
                break;
            }
            if let Some((_, size)) = after.entries.remove(&uid) {
                bytes -= size;
            }
            patch.insert(uid, None);
        }
        Some(Plan { patch, after })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tombstone(name: &str, created: Option<i64>) -> Tombstone {
        Tombstone {
            name: name.into(),
            generation: 3,
            created,
            source: "maestro".into(),
        }
    }

    #[test]
    fn a_kept_deletion_reads_back_as_it_was_written() {
        let uid = "0b6c2f3e-6a55-4a0e-9a43-1f0c7e6f1a10";
        for name in [uid, "named-otherwise"] {
            let t = tombstone(name, Some(1_764_370_000));
            let value = encode(uid, &t, 1_764_371_000).expect("versioned");
            assert_eq!(decode(uid, &value), Some((t, 1_764_371_000)));
        }
        assert_eq!(
            encode(uid, &tombstone(uid, None), 1),
            None,
            "no creation time"
        );
        assert_eq!(decode(uid, "not json"), None);
        assert_eq!(decode(uid, "[1,2]"), None);
    }

    #[test]
    fn a_plan_adds_the_begun_and_drops_what_expired() {
        let now = 10_000;
        let mut data = BTreeMap::new();
        data.insert(
            "old".into(),
            encode("old", &tombstone("old", Some(1)), now - KEPT_FOR_SECONDS).expect("value"),
        );
        data.insert(
            "young".into(),
            encode("young", &tombstone("young", Some(1)), now - 10).expect("value"),
        );
        data.insert("junk".into(), "?".into());
        let (kept, remember) = Kept::read(&data, now);
        assert_eq!(
            remember.iter().map(|(u, _)| u.as_str()).collect::<Vec<_>>(),
            ["young"]
        );
        assert_eq!(kept.plan(&[], now), None, "nothing to add: no write");
        let plan = kept
            .plan(&[("new".into(), tombstone("new", Some(2)))], now)
            .expect("a write");
        let keys: Vec<(&str, bool)> = plan
            .patch
            .iter()
            .map(|(k, v)| (k.as_str(), v.is_some()))
            .collect();
        assert_eq!(keys, [("junk", false), ("new", true), ("old", false)]);
        assert_eq!(plan.after.len(), 2);
        assert!(
            plan.after.plan(&[], now).is_none(),
            "the stale keys went with the write"
        );
    }

    #[test]
    fn over_the_bounds_the_oldest_go_first() {
        let mut kept = Kept::default();
        let big = "n".repeat(200);
        let mut now = 0;
        for batch in 0..100 {
            let begun: Vec<(String, Tombstone)> = (0..200)
                .map(|i| {
                    let uid = format!("{batch:03}-{i:03}");
                    (uid, tombstone(&big, Some(1)))
                })
                .collect();
            now += 1;
            kept = kept.plan(&begun, now).expect("a write").after;
        }
        let bytes: usize = kept.entries.values().map(|e| e.1).sum();
        assert!(bytes <= KEPT_BYTES, "{bytes}");
        assert!(kept.len() <= KEPT_MOST);
        assert!(kept.entries.contains_key("099-199"), "the newest stays");
        assert!(!kept.entries.contains_key("000-000"), "the oldest went");
    }
}
