//! Bytes per work of the agent's per-work structures, each filled with 10,000 single-ConfigMap
//! works shaped as the agent benchmark's (`make bench-scale`): the works' store, the
//! AppliedManifestWorks' store, the cached ConfigMaps, the object → work index and one per-work
//! map; and the resync sweep's names of one round.
//!
//! `cargo run --release -p agent --example store_bytes` (docs/performance.md, "Limits per
//! cluster"). "requested" counts what the structures ask the allocator for; "malloc'd" is
//! glibc's count of bytes in use (`mallinfo2`), with its chunk headers and rounding.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use agent::hub::stored_work::StoredWork;
use agent::packed::PackedJson;
use agent::spoke::live_object::LiveObject;
use agent::spoke::object_store::ObjectStore;
use agent::spoke::watches::{ObjectKey, ResourceIndex};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// The system allocator, counting live bytes and allocations.
struct Counting;

static BYTES: AtomicIsize = AtomicIsize::new(0);
static BLOCKS: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        BLOCKS.fetch_sub(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Works per structure.
const N: usize = 10_000;
/// A 64-character hub hash, as AppliedManifestWork names and specs carry it.
const HUB_HASH: &str = "5f1c2bd4ee6a0e0d8f1a6c6b7f3e2a9d4c8b1e0f7a6d5c4b3a29181716151413";
const SPOKE_NS: &str = "bench-fghij";
const TIME: &str = "2026-11-27T05:00:00Z";
const UID: &str = "0b6f1d2e-4a3c-4c1e-9a55-7f0e2d9c1b11";

/// Bytes glibc counts as in use.
fn malloc_in_use() -> isize {
    // SAFETY: mallinfo2 only reads the allocator's statistics.
    unsafe { libc::mallinfo2().uordblks as isize }
}

fn counters() -> [isize; 3] {
    [
        BYTES.load(Ordering::Relaxed),
        BLOCKS.load(Ordering::Relaxed),
        malloc_in_use(),
    ]
}

/// Runs `fill` and prints what it left allocated, per work.
fn measure(what: &str, fill: impl FnOnce()) {
    let before = counters();
    fill();
    let after = counters();
    let per_work = |i: usize| (after[i] - before[i]) as f64 / N as f64;
    println!(
        "{what:44} {:>6.0} B requested {:>5.1} allocations {:>6.0} B malloc'd",
        per_work(0),
        per_work(1),
        per_work(2)
    );
}

fn name(i: usize) -> String {
    format!("bench-abcde-{i:05}")
}

fn condition(kind: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
        "lastTransitionTime": TIME, "observedGeneration": 1})
}

/// A work as the hub's watch delivers it once applied (managedFields left out: the stores drop
/// them).
fn work(i: usize) -> Value {
    let name = name(i);
    let cm = format!("{name}-0");
    json!({
        "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
        "metadata": {"name": name, "namespace": "bench-klmno", "uid": UID,
            "resourceVersion": (100_000 + i).to_string(), "generation": 1, "creationTimestamp": TIME,
            "finalizers": ["cluster.open-cluster-management.io/manifest-work-cleanup"]},
        "spec": {
            "workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": cm, "namespace": SPOKE_NS},
                "data": {"work": name, "index": "0"}}]},
            "manifestConfigs": [{
                "resourceIdentifier": {"group": "", "resource": "configmaps", "name": cm, "namespace": SPOKE_NS},
                "feedbackRules": [{"type": "JSONPaths",
                    "jsonPaths": [{"name": "flag", "path": ".metadata.annotations.benchflag"}]}]}]},
        "status": {
            "conditions": [
                condition("Applied", "AppliedManifestWorkComplete", "Apply manifest work complete"),
                condition("Available", "ResourcesAvailable", "All resources are available")],
            "resourceStatus": {"manifests": [{
                "resourceMeta": {"ordinal": 0, "group": "", "version": "v1", "kind": "ConfigMap",
                    "resource": "configmaps", "name": cm, "namespace": SPOKE_NS},
                "conditions": [
                    condition("Applied", "AppliedManifestComplete", "Apply manifest complete"),
                    condition("Available", "ResourceAvailable", "Resource is available"),
                    condition("StatusFeedbackSynced", "StatusFeedbackSynced", "")],
                "statusFeedback": {}}]}}
    })
}

fn applied(i: usize) -> Value {
    let name = name(i);
    json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "AppliedManifestWork",
        "metadata": {"name": format!("{HUB_HASH}-{name}"), "uid": UID,
            "resourceVersion": (100_000 + i).to_string(), "creationTimestamp": TIME,
            "finalizers": ["cluster.open-cluster-management.io/applied-manifest-work-cleanup"]},
        "spec": {"hubHash": HUB_HASH, "agentID": UID, "manifestWorkName": name},
        "status": {"appliedResources": [{"group": "", "version": "v1", "resource": "configmaps",
            "namespace": SPOKE_NS, "name": format!("{name}-0"), "uid": UID}]}})
}

fn configmap(i: usize) -> Value {
    let name = name(i);
    json!({"metadata": {"name": format!("{name}-0"), "namespace": SPOKE_NS, "uid": UID,
            "resourceVersion": (100_000 + i).to_string(), "creationTimestamp": TIME,
            "labels": {"open-cluster-management.io/agent": &HUB_HASH[..16]},
            "ownerReferences": [{"apiVersion": "work.open-cluster-management.io/v1",
                "kind": "AppliedManifestWork", "name": format!("{HUB_HASH}-{name}"), "uid": UID}]},
        "data": {"work": name, "index": "0"}})
}

/// Fills a reflector store from the objects' JSON text, as a watch's initial list does.
fn fill<K>(writer: &mut Writer<K>, texts: &[String])
where
    K: kube::Resource + Clone + DeserializeOwned + 'static,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    writer.apply_watcher_event(&Event::Init);
    for text in texts {
        match serde_json::from_str::<K>(text) {
            Ok(object) => writer.apply_watcher_event(&Event::InitApply(object)),
            Err(e) => eprintln!("not stored: {e}"),
        }
    }
    writer.apply_watcher_event(&Event::InitDone);
}

/// Fills an object store from the objects' JSON text, as a watch's initial list does.
fn fill_objects(store: &ObjectStore, texts: &[String]) {
    store.apply(&Event::Init);
    for text in texts {
        match serde_json::from_str::<LiveObject>(text) {
            Ok(object) => store.apply(&Event::InitApply(object)),
            Err(e) => eprintln!("not stored: {e}"),
        }
    }
    store.apply(&Event::InitDone);
}

fn texts(make: fn(usize) -> Value) -> Vec<String> {
    (0..N).map(|i| make(i).to_string()).collect()
}

fn main() {
    let (works, amws, cms) = (texts(work), texts(applied), texts(configmap));
    println!(
        "JSON per object: work {} B, AppliedManifestWork {} B, ConfigMap {} B",
        works[0].len(),
        amws[0].len(),
        cms[0].len()
    );
    println!(
        "the same packed: work {} B, AppliedManifestWork {} B, ConfigMap {} B",
        PackedJson::pack(&works[0]).len(),
        PackedJson::pack(&amws[0]).len(),
        PackedJson::pack(&cms[0]).len()
    );
    let mut work_store = Writer::<StoredWork>::default();
    measure("ManifestWork store (StoredWork)", || {
        fill(&mut work_store, &works)
    });
    let applied_store = ObjectStore::default();
    measure("AppliedManifestWork store (ObjectStore)", || {
        fill_objects(&applied_store, &amws)
    });
    let live_store = ObjectStore::default();
    measure("ConfigMap store (ObjectStore)", || {
        fill_objects(&live_store, &cms)
    });
    let mut index = ResourceIndex::default();
    measure("object -> work index, one object a work", || {
        for i in 0..N {
            let key = ObjectKey {
                group: String::new(),
                resource: "configmaps".into(),
                namespace: SPOKE_NS.into(),
                name: format!("{}-0", name(i)),
            };
            index.set_work(&name(i), vec![key]);
        }
    });
    let mut states = std::collections::HashMap::new();
    measure("a map of work name -> state", || {
        for i in 0..N {
            states.insert(name(i), "applied");
        }
    });
    let mut names = Vec::new();
    measure("resync sweep, one round's names", || {
        names = work_store
            .as_reader()
            .state()
            .iter()
            .filter_map(|w| w.metadata.name.as_deref().map(Box::<str>::from))
            .collect::<Vec<_>>();
    });
    std::hint::black_box((
        &work_store,
        &applied_store,
        &live_store,
        &index,
        &states,
        &names,
    ));
}
