//! The faults: API server restarts and outages, etcd compaction, objects deleted or edited behind
//! the agent's back, foreign finalizers that hold an object for a while, and behind a broker the
//! faults of that path (`broker.rs`). (`kill -9` of the agent is the supervisor's.)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::{Value, json};

use crate::broker::{BrokerFault, Transport};
use crate::hub::Hub;
use crate::kubeops::{DRIVER_MANAGER, api};
use crate::rng::Rng;
use crate::workload::{GEN_KEY, ObjRef, Phase};
use crate::world::Shared;

/// Finalizer the driver puts on applied objects to hold them.
pub const HOLD_FINALIZER: &str = "chaos.work-agent.io/hold";

/// A fault other than killing the agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Restart the spoke's kube-apiserver (etcd kept).
    RestartSpokeApiserver,
    /// Restart the hub's kube-apiserver (etcd kept).
    RestartHubApiserver,
    /// Stop the hub's kube-apiserver for the outage length, then start it.
    HubOutage,
    /// Compact the hub's etcd to its current revision (watches resuming from older ones get 410).
    CompactHub,
    /// Compact the spoke's etcd.
    CompactSpoke,
    /// Delete an applied object behind the agent's back.
    DeleteBehind,
    /// Edit an applied object behind the agent's back.
    EditBehind,
    /// Put a foreign finalizer on an applied object, removed 10-30 s later.
    StuckFinalizer,
    /// A fault of the broker path.
    Broker(BrokerFault, Transport),
}

impl Fault {
    /// Name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Fault::RestartSpokeApiserver => "spoke kube-apiserver restart",
            Fault::RestartHubApiserver => "hub kube-apiserver restart",
            Fault::HubOutage => "hub unreachable",
            Fault::CompactHub => "hub etcd compaction",
            Fault::CompactSpoke => "spoke etcd compaction",
            Fault::DeleteBehind => "object deleted behind the agent's back",
            Fault::EditBehind => "object edited behind the agent's back",
            Fault::StuckFinalizer => "foreign finalizer on an applied object",
            Fault::Broker(f, wire) => f.name(wire),
        }
    }

    /// One cycle of faults in a random order: every kind at least once, the cheap ones twice,
    /// so that even a short run injects each kind. Behind a broker (`wire`) the hub's API server
    /// faults give way to the broker's, and the spoke's faults come once each.
    pub fn cycle(rng: &mut Rng, wire: Option<Transport>) -> Vec<Fault> {
        let mut all = match wire {
            None => Self::kube_cycle(),
            Some(wire) => [
                Fault::RestartSpokeApiserver,
                Fault::CompactSpoke,
                Fault::DeleteBehind,
                Fault::EditBehind,
                Fault::StuckFinalizer,
            ]
            .into_iter()
            .chain(
                BrokerFault::all(wire)
                    .into_iter()
                    .map(|f| Fault::Broker(f, wire)),
            )
            .collect(),
        };
        // Fisher-Yates with the seeded generator.
        for i in (1..all.len()).rev() {
            let j = rng.range(0, i as u64 + 1) as usize;
            all.swap(i, j);
        }
        all
    }

    fn kube_cycle() -> Vec<Fault> {
        vec![
            Fault::RestartSpokeApiserver,
            Fault::RestartHubApiserver,
            Fault::HubOutage,
            Fault::CompactHub,
            Fault::CompactSpoke,
            Fault::DeleteBehind,
            Fault::DeleteBehind,
            Fault::EditBehind,
            Fault::EditBehind,
            Fault::StuckFinalizer,
            Fault::StuckFinalizer,
        ]
    }
}

/// Where the control planes live and how to drive them.
pub struct ControlPlanes {
    /// `e2e/scripts/controlplane.sh`.
    pub script: PathBuf,
    /// `$RUN_ROOT`.
    pub run_root: PathBuf,
}

impl ControlPlanes {
    async fn script(&self, cmd: &str, name: &str) -> Result<(), String> {
        let out = tokio::process::Command::new(&self.script)
            .args([cmd, name])
            .env("RUN_ROOT", &self.run_root)
            .output()
            .await
            .map_err(|e| format!("running {}: {e}", self.script.display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "controlplane.sh {cmd} {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// `etcd=` of `$RUN_ROOT/NAME/endpoints`.
    fn etcd_url(&self, name: &str) -> Result<String, String> {
        let path = self.run_root.join(name).join("endpoints");
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        text.lines()
            .find_map(|l| l.strip_prefix("etcd="))
            .map(str::to_string)
            .ok_or_else(|| format!("no etcd= line in {}", path.display()))
    }

    /// Compacts etcd of control plane `name` to its current revision, through the v3 HTTP gateway.
    pub async fn compact(&self, name: &str) -> Result<i64, String> {
        let url = self.etcd_url(name)?;
        let header = curl_json(&format!("{url}/v3/kv/range"), &json!({"key": "AA=="})).await?;
        let revision: i64 = header
            .pointer("/header/revision")
            .and_then(|r| {
                r.as_str()
                    .map(str::to_string)
                    .or_else(|| r.as_i64().map(|i| i.to_string()))
            })
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| format!("no revision in {header}"))?;
        curl_json(
            &format!("{url}/v3/kv/compaction"),
            &json!({"revision": revision.to_string(), "physical": true}),
        )
        .await?;
        Ok(revision)
    }
}

async fn curl_json(url: &str, body: &Value) -> Result<Value, String> {
    let out = tokio::process::Command::new("curl")
        .args([
            "-sS",
            "--max-time",
            "10",
            "-X",
            "POST",
            url,
            "-d",
            &body.to_string(),
        ])
        .output()
        .await
        .map_err(|e| format!("curl: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let value: Value = serde_json::from_str(&text).map_err(|e| format!("{url}: {e}: {text}"))?;
    if let Some(err) = value.get("error").or_else(|| value.get("message")) {
        return Err(format!("{url}: {err}"));
    }
    Ok(value)
}

/// Injects one fault; Ok says what it did.
pub async fn inject(
    fault: Fault,
    shared: &Shared,
    planes: &ControlPlanes,
    spoke: &Client,
    hub: &Hub,
    rng: &mut Rng,
    outage: Duration,
) -> Result<String, String> {
    match fault {
        Fault::Broker(f, _) => match hub {
            Hub::Broker(b) => b.inject(f, shared, rng).await,
            Hub::Kube { .. } => Err("a broker fault on a Kubernetes hub".into()),
        },
        Fault::RestartSpokeApiserver => planes
            .script("restart-apiserver", "spoke")
            .await
            .map(|_| "restarted".into()),
        Fault::RestartHubApiserver | Fault::HubOutage => {
            shared.lock().hub_down_since = Some(Instant::now());
            let result = if fault == Fault::HubOutage {
                let stopped = planes.script("stop-apiserver", "hub").await;
                tokio::time::sleep(outage).await;
                let started = planes.script("start-apiserver", "hub").await;
                stopped.and(started).map(|_| format!("down for {outage:?}"))
            } else {
                planes
                    .script("restart-apiserver", "hub")
                    .await
                    .map(|_| "restarted".into())
            };
            let mut w = shared.lock();
            w.hub_down_since = None;
            w.hub_up_at = Some(Instant::now());
            result
        }
        Fault::CompactHub => planes
            .compact("hub")
            .await
            .map(|r| format!("to revision {r}")),
        Fault::CompactSpoke => planes
            .compact("spoke")
            .await
            .map(|r| format!("to revision {r}")),
        Fault::DeleteBehind => {
            let Some(obj) = pick_object(shared, rng, true) else {
                return Ok("no object to delete".into());
            };
            let live = api(spoke, &obj)
                .get_opt(&obj.name)
                .await
                .map_err(|e| e.to_string())?;
            let Some(uid) = live.and_then(|o| o.metadata.uid) else {
                return Ok(format!("{} absent", obj.describe()));
            };
            shared.lock().deleted_by_driver.insert(uid.clone());
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::background()
            };
            api(spoke, &obj)
                .delete(&obj.name, &dp)
                .await
                .map(|_| obj.describe())
                .map_err(|e| format!("deleting {}: {e}", obj.describe()))
        }
        Fault::EditBehind => {
            let Some(obj) = pick_object(shared, rng, true) else {
                return Ok("no object to edit".into());
            };
            let patch = if obj.kind == "ConfigMap" {
                json!({"data": {GEN_KEY: "tampered"}})
            } else {
                json!({"metadata": {"labels": {GEN_KEY: "tampered"}}})
            };
            api(spoke, &obj)
                .patch(
                    &obj.name,
                    &PatchParams::apply(DRIVER_MANAGER).force(),
                    &Patch::Apply(apply_body(&obj, patch)),
                )
                .await
                .map(|_| obj.describe())
                .map_err(|e| format!("editing {}: {e}", obj.describe()))
        }
        Fault::StuckFinalizer => {
            let Some(obj) = pick_object(shared, rng, true) else {
                return Ok("no object to hold".into());
            };
            set_hold(spoke, &obj, true).await?;
            shared.lock().held.insert(obj.clone());
            let hold = Duration::from_secs(rng.range(10, 30));
            let (spoke, shared) = (spoke.clone(), shared.clone());
            let held = obj.clone();
            tokio::spawn(async move {
                tokio::time::sleep(hold).await;
                if set_hold(&spoke, &held, false).await.is_ok() {
                    shared.lock().held.remove(&held);
                }
            });
            Ok(format!("{} for {hold:?}", obj.describe()))
        }
    }
}

/// A server-side apply body for `obj` with `content` laid over its identity.
fn apply_body(obj: &ObjRef, content: Value) -> Value {
    let api_version = if obj.group.is_empty() {
        obj.version.clone()
    } else {
        format!("{}/{}", obj.group, obj.version)
    };
    let mut body = json!({
        "apiVersion": api_version,
        "kind": obj.kind,
        "metadata": {"name": obj.name, "namespace": obj.namespace},
    });
    if let (Some(b), Some(c)) = (body.as_object_mut(), content.as_object()) {
        for (k, v) in c {
            if k == "metadata" {
                if let (Some(m), Some(extra)) = (
                    b.get_mut("metadata").and_then(Value::as_object_mut),
                    v.as_object(),
                ) {
                    m.extend(extra.clone());
                }
            } else {
                b.insert(k.clone(), v.clone());
            }
        }
    }
    body
}

/// Adds or removes the driver's finalizer (others' finalizers are kept; retried on conflicts).
pub async fn set_hold(spoke: &Client, obj: &ObjRef, hold: bool) -> Result<(), String> {
    for _ in 0..10 {
        let live = match api(spoke, obj).get_opt(&obj.name).await {
            Ok(Some(o)) => o,
            Ok(None) => return Ok(()),
            Err(e) => {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if hold {
                    return Err(e.to_string());
                }
                continue;
            }
        };
        let mut finalizers = live.metadata.finalizers.clone().unwrap_or_default();
        finalizers.retain(|f| f != HOLD_FINALIZER);
        if hold {
            finalizers.push(HOLD_FINALIZER.to_string());
        }
        let patch = json!({"metadata": {"finalizers": finalizers,
                                        "resourceVersion": live.metadata.resource_version}});
        match api(spoke, obj)
            .patch(&obj.name, &driver_params(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    }
    Err(format!(
        "could not update the finalizers of {}",
        obj.describe()
    ))
}

/// Patch parameters naming the driver as the field manager, so that its writes are told apart
/// from the agent's (a merge patch without one is recorded under the manager "unknown").
fn driver_params() -> PatchParams {
    PatchParams {
        field_manager: Some(DRIVER_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

/// An object of a live work (of a not completed one when `live_only` and none completed matter).
fn pick_object(shared: &Shared, rng: &mut Rng, include_completed: bool) -> Option<ObjRef> {
    let w = shared.lock();
    let candidates: Vec<ObjRef> = w
        .works
        .values()
        .filter(|m| m.phase == Phase::Live)
        .filter(|m| include_completed || !w.completions.contains_key(&m.name))
        .flat_map(|m| m.objects())
        .filter(|o| !w.held.contains(o))
        .collect();
    rng.pick(&candidates).cloned()
}
