//! The workload: works created, edited and deleted while faults run, plus the foreign objects
//! seeded beside them and, in soak mode, custom resource kinds installed and removed.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;

use crate::hub::{Hub, HubError};
use crate::kubeops::api;
use crate::rng::Rng;
use crate::workload::{Deletion, Mix, ObjRef, Phase, RUN_LABEL, WorkModel};
use crate::world::Shared;

/// The clients and names the operations need.
pub struct Target {
    /// Where the works go.
    pub hub: Hub,
    /// Spoke admin client.
    pub spoke: Client,
    /// Spoke namespaces objects go to.
    pub namespaces: Vec<String>,
    /// Run id (label value).
    pub run: String,
}

/// Seeds foreign objects (same labels and kinds, not in any work) in every namespace.
pub async fn seed_foreign(shared: &Shared, t: &Target) -> Result<usize, kube::Error> {
    let mut n = 0;
    for ns in &t.namespaces {
        for (i, kind) in ["ConfigMap", "ConfigMap", "Job", "Deployment"]
            .iter()
            .enumerate()
        {
            let name = format!("foreign-{i}");
            let mut model =
                WorkModel::new(name.clone(), mix_of(kind), ns.clone(), &mut Rng::new(0));
            model.ttl = None;
            let spec = model.spec(&t.run);
            let manifest = spec["workload"]["manifests"][0].clone();
            let obj = model.objects()[0].clone();
            let mut manifest = manifest;
            manifest["metadata"]["name"] = json!(name);
            let obj = ObjRef {
                name: name.clone(),
                ..obj
            };
            let body: kube::api::DynamicObject =
                serde_json::from_value(manifest).map_err(kube::Error::SerdeError)?;
            let created = api(&t.spoke, &obj)
                .create(&PostParams::default(), &body)
                .await?;
            if let Some(uid) = created.metadata.uid {
                shared.lock().foreign.insert(uid, obj);
                n += 1;
            }
        }
    }
    Ok(n)
}

fn mix_of(kind: &str) -> Mix {
    match kind {
        "Job" => Mix::JobWithTtl,
        "Deployment" => Mix::Deployment,
        _ => Mix::ConfigMapsSsa,
    }
}

/// One random operation: create while under `target_live` live works, else edit or delete.
pub async fn step(
    shared: &Shared,
    t: &Target,
    rng: &mut Rng,
    target_live: usize,
    serial: &mut u64,
    soak: bool,
) {
    if !shared.lock().hub_up() {
        return;
    }
    let live: Vec<String> = {
        let w = shared.lock();
        w.works
            .values()
            .filter(|m| m.phase == Phase::Live)
            .map(|m| m.name.clone())
            .collect()
    };
    let result = if live.len() < target_live || rng.chance(15) {
        create(shared, t, rng, serial, soak).await
    } else if rng.chance(50) {
        match rng.pick(&live) {
            Some(name) => edit(shared, t, name).await,
            None => Ok(()),
        }
    } else {
        match rng.pick(&live) {
            Some(name) => delete(shared, t, name).await,
            None => Ok(()),
        }
    };
    if let Err(e) = result {
        eprintln!("[chaos] operation failed (retried by later steps): {e}");
        shared.lock().tally.op_errors += 1;
    }
}

async fn create(
    shared: &Shared,
    t: &Target,
    rng: &mut Rng,
    serial: &mut u64,
    soak: bool,
) -> Result<(), String> {
    *serial += 1;
    let ns = rng.pick(&t.namespaces).cloned().unwrap_or_default();
    let weights: &[u64] = if soak {
        &[20, 15, 10, 20, 15, 20]
    } else {
        &[20, 15, 15, 25, 25, 0]
    };
    let mix = [
        Mix::ConfigMapsSsa,
        Mix::ConfigMapsUpdate,
        Mix::Deployment,
        Mix::JobWithTtl,
        Mix::Shared,
        Mix::CustomResource,
    ][rng.weighted(weights)];
    let name = format!("w{serial}");
    let mut work = WorkModel::new(name.clone(), mix, ns.clone(), rng);
    let mut twin = None;
    match mix {
        Mix::Shared => {
            let shared_name = format!("shared{serial}");
            work.shared = Some(shared_name.clone());
            let mut b = WorkModel::new(format!("w{serial}t"), Mix::Shared, ns, rng);
            b.shared = Some(shared_name);
            twin = Some(b);
        }
        Mix::CustomResource => {
            let (group, kind, plural) = install_kind(t, *serial).await?;
            work.custom = Some((group, kind, plural));
        }
        _ => {}
    }
    for w in std::iter::once(work).chain(twin) {
        // Registered first: the watches must know the work before its events arrive.
        shared.lock().add_work(w.clone());
        if let Err(e) = t.hub.create(&w.name, &w.spec(&t.run)).await {
            // The create may have happened (a timeout): only a clear refusal unregisters it.
            if matches!(e, HubError::Refused(_)) {
                shared.lock().works.remove(&w.name);
            }
            return Err(format!("creating work {}: {e}", w.name));
        }
        shared.lock().tally.created += 1;
    }
    Ok(())
}

async fn edit(shared: &Shared, t: &Target, name: &str) -> Result<(), String> {
    let spec = {
        let mut w = shared.lock();
        let Some(m) = w.works.get_mut(name) else {
            return Ok(());
        };
        m.generation += 1;
        m.changed_at = Instant::now();
        m.spec(&t.run)
    };
    let result = t.hub.edit(name, &spec).await;
    if let Err(HubError::NotFound) = &result {
        // Collected by its TTL while the driver's watch was in a gap.
        if let Some(m) = shared.lock().works.get_mut(name) {
            m.phase = Phase::Gone;
        }
        return Ok(());
    }
    result.map_err(|e| format!("editing work {name}: {e}"))?;
    shared.lock().tally.edited += 1;
    Ok(())
}

async fn delete(shared: &Shared, t: &Target, name: &str) -> Result<(), String> {
    let model = {
        let mut w = shared.lock();
        let Some(m) = w.works.get_mut(name) else {
            return Ok(());
        };
        m.phase = Phase::DeletedByDriver(Instant::now());
        m.clone()
    };
    if model.deletion == Deletion::Orphan {
        // Its objects are left behind and nobody may delete them (a shared one stays the twin's).
        for obj in model.objects() {
            if model.shared.as_deref() == Some(obj.name.as_str()) {
                continue;
            }
            if let Ok(Some(o)) = api(&t.spoke, &obj).get_opt(&obj.name).await
                && let Some(uid) = o.metadata.uid
            {
                shared.lock().orphaned.insert(uid, obj);
            }
        }
    }
    match t.hub.delete(name).await {
        Ok(()) => {
            shared.lock().tally.deleted += 1;
            Ok(())
        }
        Err(HubError::NotFound) => Ok(()),
        Err(e) => {
            if let Some(m) = shared.lock().works.get_mut(name) {
                m.phase = Phase::Live;
            }
            Err(format!("deleting work {name}: {e}"))
        }
    }
}

/// Installs a new CRD (a new group and kind each time) on the spoke; returns (group, kind, plural).
async fn install_kind(t: &Target, serial: u64) -> Result<(String, String, String), String> {
    let group = format!("k{serial}.chaos.work-agent.io");
    let kind = format!("Chaos{serial}");
    let plural = format!("chaos{serial}s");
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}"), "labels": {RUN_LABEL: t.run}},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": format!("chaos{serial}")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]
        }
    }))
    .map_err(|e| e.to_string())?;
    let crds: Api<CustomResourceDefinition> = Api::all(t.spoke.clone());
    crds.create(&PostParams::default(), &crd)
        .await
        .map_err(|e| format!("creating CRD {plural}.{group}: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if let Ok(c) = crds.get(&format!("{plural}.{group}")).await
            && c.status
                .iter()
                .flat_map(|s| s.conditions.iter().flatten())
                .any(|c| c.type_ == "Established" && c.status == "True")
        {
            return Ok((group, kind, plural));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Err(format!("CRD {plural}.{group} not Established within 30 s"))
}

/// Removes the CRDs of custom-resource works that are gone from the hub (soak churn).
pub async fn remove_unused_kinds(shared: &Shared, t: &Target) {
    let gone: Vec<(String, String)> = {
        let w = shared.lock();
        w.works
            .values()
            .filter(|m| m.phase == Phase::Gone)
            .filter_map(|m| {
                m.custom
                    .as_ref()
                    .map(|(g, _, p)| (m.name.clone(), format!("{p}.{g}")))
            })
            .collect()
    };
    let crds: Api<CustomResourceDefinition> = Api::all(t.spoke.clone());
    for (work, crd) in gone {
        let _ = crds.delete(&crd, &DeleteParams::default()).await;
        let mut w = shared.lock();
        if let Some(m) = w.works.get_mut(&work) {
            m.custom = None;
        }
        // Removing a CRD removes its objects, the orphaned ones too: the driver deleted them.
        let of_kind: Vec<String> = w
            .orphaned
            .iter()
            .filter(|(_, o)| format!("{}.{}", o.plural, o.group) == crd)
            .map(|(uid, _)| uid.clone())
            .collect();
        w.deleted_by_driver.extend(of_kind);
    }
}

/// Deletes every work of the run and waits (bounded) until they are gone: the end of a run.
pub async fn delete_all(shared: &Shared, t: &Target, bound: Duration) {
    let names: Vec<String> = {
        let mut w = shared.lock();
        for m in w.works.values_mut().filter(|m| m.phase == Phase::Live) {
            m.phase = Phase::DeletedByDriver(Instant::now());
        }
        w.works.keys().cloned().collect()
    };
    for name in &names {
        let _ = t.hub.delete(name).await;
    }
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        match t.hub.list().await {
            Ok(l) if l.is_empty() => return,
            _ => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
}
