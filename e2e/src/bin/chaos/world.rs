//! What the driver knows: the works it runs, the objects it seeded, what its watches saw, and the
//! invariant counts. Shared by the workload, the faults, the watches and the checks.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crate::kubeops::AgentFields;
use crate::workload::{ObjRef, WorkModel};

/// A work seen `Complete` on the hub.
#[derive(Clone, Debug)]
pub struct Completion {
    /// `lastTransitionTime` of the work's `Complete`, in Unix seconds.
    pub since_unix: i64,
    /// Fingerprints of the agent's writes to each of its objects at that time.
    pub fingerprints: BTreeMap<ObjRef, AgentFields>,
}

/// The invariant counts (all must be 0) and the figures reported beside them.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    /// Manifests of live, not completed works missing longer than the recovery window.
    pub resources_lost: u64,
    /// Objects of live, not completed works edited behind the agent's back and not restored
    /// within the recovery window.
    pub resources_not_restored: u64,
    /// Duplicate entries (appliedResources, resource status ordinals, AppliedManifestWorks).
    pub duplicates: u64,
    /// Deletions of objects the agent does not own (foreign or orphaned).
    pub foreign_deletions: u64,
    /// Writes by the agent to an object after its work was Complete.
    pub writes_after_complete: u64,
    /// TTL deletions before the deadline.
    pub early_ttl_deletions: u64,
    /// Works not converged within the bound after the last fault.
    pub works_stuck: u64,
    /// "panicked" lines in the agent logs.
    pub agent_panics: u64,
}

impl Counts {
    /// (name, count) for the report, in a fixed order.
    pub fn rows(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("resources lost", self.resources_lost),
            (
                "resources not restored after a foreign edit",
                self.resources_not_restored,
            ),
            ("duplicates", self.duplicates),
            (
                "deletions of objects the agent does not own",
                self.foreign_deletions,
            ),
            (
                "writes to a manifest after Complete",
                self.writes_after_complete,
            ),
            (
                "TTL deletions before the deadline",
                self.early_ttl_deletions,
            ),
            ("works stuck after the last fault", self.works_stuck),
            ("agent panics", self.agent_panics),
        ]
    }

    /// Whether every invariant held.
    pub fn all_zero(&self) -> bool {
        self.rows().iter().all(|(_, n)| *n == 0)
    }
}

/// Figures that are not invariants.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    /// Faults injected, by name.
    pub faults: BTreeMap<&'static str, u64>,
    /// Works created, edited, deleted by the driver.
    pub created: u64,
    /// Edits.
    pub edited: u64,
    /// Deletions by the driver.
    pub deleted: u64,
    /// Works seen Complete.
    pub completed: u64,
    /// Works deleted by the agent's TTL collection.
    pub ttl_deleted: u64,
    /// Agent exits the driver did not cause.
    pub agent_unexpected_exits: u64,
    /// Works collected by TTL whose completion the driver's watch missed.
    pub ttl_unverified: u64,
    /// Driver operations that failed (e.g. while the hub was down), retried later.
    pub op_errors: u64,
    /// Behind a broker: what the wire faults did, as the source counted it.
    pub wire: Vec<(&'static str, u64)>,
}

/// Everything shared.
#[derive(Default)]
pub struct World {
    /// Works by name.
    pub works: BTreeMap<String, WorkModel>,
    /// Which work (or works, when shared) applies each object.
    pub owners: BTreeMap<ObjRef, BTreeSet<String>>,
    /// Foreign objects seeded beside the managed ones: uid → object.
    pub foreign: BTreeMap<String, ObjRef>,
    /// Objects left behind by Orphan deletions: uid → object.
    pub orphaned: BTreeMap<String, ObjRef>,
    /// Objects the driver holds with its finalizer.
    pub held: BTreeSet<ObjRef>,
    /// Objects the driver itself deleted (uids).
    pub deleted_by_driver: BTreeSet<String>,
    /// Works whose deletion by someone else than the driver (the TTL collection) was seen.
    pub ttl_seen: BTreeSet<String>,
    /// Completions seen, by work name.
    pub completions: BTreeMap<String, Completion>,
    /// The hub API server is down (stopped or restarting) since this instant.
    pub hub_down_since: Option<Instant>,
    /// When the hub last came back.
    pub hub_up_at: Option<Instant>,
    /// When the last fault ended.
    pub last_fault_at: Option<Instant>,
    /// Invariant counts.
    pub counts: Counts,
    /// Other figures.
    pub tally: Tally,
    /// One line per invariant violation, for the report.
    pub violations: Vec<String>,
}

/// A handle to the shared world.
#[derive(Clone, Default)]
pub struct Shared(Arc<Mutex<World>>);

impl Shared {
    /// Locks the world (a poisoned lock still yields it: the driver reports, never panics twice).
    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl World {
    /// Records a violation line.
    pub fn violation(&mut self, line: String) {
        eprintln!("[chaos] VIOLATION: {line}");
        self.violations.push(line);
    }

    /// Counts a fault.
    pub fn fault(&mut self, name: &'static str) {
        *self.tally.faults.entry(name).or_default() += 1;
        self.last_fault_at = Some(Instant::now());
    }

    /// Whether the hub is reachable as far as the driver knows.
    pub fn hub_up(&self) -> bool {
        self.hub_down_since.is_none()
    }

    /// Registers a work and its objects.
    pub fn add_work(&mut self, work: WorkModel) {
        for obj in work.objects() {
            self.owners
                .entry(obj)
                .or_default()
                .insert(work.name.clone());
        }
        self.works.insert(work.name.clone(), work);
    }

    /// The work that applies `obj` (any of them when shared).
    pub fn works_of(&self, obj: &ObjRef) -> Vec<&WorkModel> {
        self.owners
            .get(obj)
            .into_iter()
            .flatten()
            .filter_map(|n| self.works.get(n))
            .collect()
    }
}
