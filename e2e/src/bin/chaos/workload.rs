//! The works the driver runs: their kinds, specs and the spoke objects each must produce.

use std::time::Instant;

use serde_json::{Value, json};

use crate::rng::Rng;

/// Label on every object the driver makes (managed and foreign), with the run id as value.
pub const RUN_LABEL: &str = "chaos.work-agent.io/run";
/// Data key (ConfigMaps) or label (others) carrying the generation of a work's spec.
pub const GEN_KEY: &str = "gen";

/// What a work applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mix {
    /// Two ConfigMaps, ServerSideApply.
    ConfigMapsSsa,
    /// Two ConfigMaps, Update.
    ConfigMapsUpdate,
    /// A one-replica Deployment (kwok runs its pod), ServerSideApply.
    Deployment,
    /// A Job with a `Complete` rule and a TTL, plus a side ConfigMap.
    JobWithTtl,
    /// A ConfigMap of its own plus one shared with its twin work (same object, same content).
    Shared,
    /// A custom resource of a kind installed for this work (soak only).
    CustomResource,
}

/// How the work is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Default (Foreground) propagation.
    Default,
    /// `deleteOption.propagationPolicy: Foreground`.
    Foreground,
    /// `deleteOption.propagationPolicy: Orphan`: the resources stay.
    Orphan,
}

/// A spoke object a manifest names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjRef {
    /// API group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural resource.
    pub plural: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjRef {
    fn new(group: &str, version: &str, kind: &str, plural: &str, ns: &str, name: &str) -> Self {
        Self {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    /// `kind ns/name`, for reports.
    pub fn describe(&self) -> String {
        format!("{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Where a work is in its life, as the driver knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Created, not deleted.
    Live,
    /// The driver deleted it (at that instant).
    DeletedByDriver(Instant),
    /// Gone from the hub (after the driver's or the TTL's deletion).
    Gone,
}

/// One work the driver created.
#[derive(Clone, Debug)]
pub struct WorkModel {
    /// ManifestWork name.
    pub name: String,
    /// What it applies.
    pub mix: Mix,
    /// How it is deleted.
    pub deletion: Deletion,
    /// Generation of the spec content (bumped by edits).
    pub generation: u64,
    /// Spoke namespace of its objects.
    pub namespace: String,
    /// The shared ConfigMap's name (Shared only).
    pub shared: Option<String>,
    /// Custom resource kind (CustomResource only): (group, kind, plural).
    pub custom: Option<(String, String, String)>,
    /// Life phase.
    pub phase: Phase,
    /// When the driver last changed it (create or edit).
    pub changed_at: Instant,
    /// TTL seconds after Complete, if any.
    pub ttl: Option<i64>,
}

impl WorkModel {
    /// A new work of `mix` in `namespace`.
    pub fn new(name: String, mix: Mix, namespace: String, rng: &mut Rng) -> Self {
        let deletion = match rng.weighted(&[40, 40, 20]) {
            0 => Deletion::Default,
            1 => Deletion::Foreground,
            _ => Deletion::Orphan,
        };
        let ttl = (mix == Mix::JobWithTtl).then(|| rng.range(5, 40) as i64);
        Self {
            name,
            mix,
            deletion,
            generation: 1,
            namespace,
            shared: None,
            custom: None,
            phase: Phase::Live,
            changed_at: Instant::now(),
            ttl,
        }
    }

    /// Whether it has a `Complete` rule (and so may complete).
    pub fn completes(&self) -> bool {
        self.mix == Mix::JobWithTtl
    }

    /// The spoke objects its manifests name.
    pub fn objects(&self) -> Vec<ObjRef> {
        let ns = &self.namespace;
        let n = &self.name;
        let cm = |name: &str| ObjRef::new("", "v1", "ConfigMap", "configmaps", ns, name);
        match self.mix {
            Mix::ConfigMapsSsa | Mix::ConfigMapsUpdate => {
                vec![cm(&format!("{n}-a")), cm(&format!("{n}-b"))]
            }
            Mix::Deployment => vec![ObjRef::new(
                "apps",
                "v1",
                "Deployment",
                "deployments",
                ns,
                n,
            )],
            Mix::JobWithTtl => vec![
                ObjRef::new("batch", "v1", "Job", "jobs", ns, n),
                cm(&format!("{n}-side")),
            ],
            Mix::Shared => {
                let mut v = vec![cm(&format!("{n}-own"))];
                if let Some(s) = &self.shared {
                    v.push(cm(s));
                }
                v
            }
            Mix::CustomResource => match &self.custom {
                Some((group, kind, plural)) => vec![ObjRef::new(group, "v1", kind, plural, ns, n)],
                None => vec![],
            },
        }
    }

    /// The ManifestWork spec.
    pub fn spec(&self, run: &str) -> Value {
        let labels = json!({ RUN_LABEL: run });
        let generation = self.generation.to_string();
        let mut manifests = Vec::new();
        let mut configs = Vec::new();
        for obj in self.objects() {
            let shared = self.shared.as_deref() == Some(obj.name.as_str());
            manifests.push(manifest(
                &obj,
                &labels,
                if shared { "shared" } else { &generation },
            ));
            let strategy = match self.mix {
                Mix::ConfigMapsUpdate | Mix::Shared => json!({"type": "Update"}),
                _ => json!({"type": "ServerSideApply", "serverSideApply": {"force": true}}),
            };
            let mut config = json!({
                "resourceIdentifier": {"group": obj.group, "resource": obj.plural,
                                       "name": obj.name, "namespace": obj.namespace},
                "updateStrategy": strategy,
            });
            if obj.kind == "Job" {
                config["conditionRules"] = json!([{"type": "WellKnownCompletions"}]);
            }
            configs.push(config);
        }
        let policy = match self.deletion {
            Deletion::Default => None,
            Deletion::Foreground => Some("Foreground"),
            Deletion::Orphan => Some("Orphan"),
        };
        let mut delete_option = serde_json::Map::new();
        if let Some(p) = policy {
            delete_option.insert("propagationPolicy".into(), json!(p));
        }
        if let Some(ttl) = self.ttl {
            delete_option.insert("ttlSecondsAfterFinished".into(), json!(ttl));
        }
        let mut spec = json!({"workload": {"manifests": manifests}, "manifestConfigs": configs});
        if !delete_option.is_empty() {
            spec["deleteOption"] = Value::Object(delete_option);
        }
        spec
    }

    /// The generation value a spoke object of this work must carry (None: not checked).
    pub fn expected_generation(&self, obj: &ObjRef) -> Option<String> {
        if self.shared.as_deref() == Some(obj.name.as_str()) {
            return Some("shared".into());
        }
        Some(self.generation.to_string())
    }
}

/// The manifest of one object, carrying `generation` (ConfigMap data, a label otherwise).
fn manifest(obj: &ObjRef, labels: &Value, generation: &str) -> Value {
    let api_version = if obj.group.is_empty() {
        obj.version.clone()
    } else {
        format!("{}/{}", obj.group, obj.version)
    };
    let mut m = json!({
        "apiVersion": api_version,
        "kind": obj.kind,
        "metadata": {"name": obj.name, "namespace": obj.namespace, "labels": labels},
    });
    match obj.kind.as_str() {
        "ConfigMap" => m["data"] = json!({ GEN_KEY: generation }),
        "Deployment" => {
            m["metadata"]["labels"][GEN_KEY] = json!(generation);
            m["spec"] = json!({
                "replicas": 1,
                "selector": {"matchLabels": {"app": obj.name}},
                "template": {"metadata": {"labels": {"app": obj.name}},
                             "spec": {"containers": [{"name": "main", "image": "registry.invalid/noop:1"}]}}
            });
        }
        "Job" => {
            m["metadata"]["labels"][GEN_KEY] = json!(generation);
            m["spec"] = json!({
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "registry.invalid/noop:1", "command": ["true"]}]}}
            });
        }
        _ => {
            m["metadata"]["labels"][GEN_KEY] = json!(generation);
            m["spec"] = json!({"value": generation});
        }
    }
    m
}

/// The generation an object carries (see [`manifest`]).
pub fn object_gen(obj: &Value) -> Option<String> {
    obj.pointer(&format!("/data/{GEN_KEY}"))
        .or_else(|| obj.pointer(&format!("/metadata/labels/{GEN_KEY}")))
        .and_then(Value::as_str)
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_name_every_object_and_carry_the_generation() {
        let mut rng = Rng::new(3);
        for mix in [
            Mix::ConfigMapsSsa,
            Mix::ConfigMapsUpdate,
            Mix::Deployment,
            Mix::JobWithTtl,
        ] {
            let mut w = WorkModel::new("w".into(), mix, "ns".into(), &mut rng);
            w.generation = 7;
            let spec = w.spec("run");
            let manifests = spec["workload"]["manifests"].as_array().unwrap();
            assert_eq!(manifests.len(), w.objects().len());
            for m in manifests {
                assert_eq!(object_gen(m).as_deref(), Some("7"));
                assert_eq!(m["metadata"]["labels"][RUN_LABEL], "run");
            }
            assert_eq!(w.completes(), mix == Mix::JobWithTtl);
        }
    }

    #[test]
    fn a_shared_object_keeps_one_content_across_twins() {
        let mut rng = Rng::new(4);
        let mut a = WorkModel::new("a".into(), Mix::Shared, "ns".into(), &mut rng);
        let mut b = WorkModel::new("b".into(), Mix::Shared, "ns".into(), &mut rng);
        a.shared = Some("s".into());
        b.shared = Some("s".into());
        b.generation = 9;
        let pick = |w: &WorkModel| {
            w.spec("r")["workload"]["manifests"]
                .as_array()
                .unwrap()
                .iter()
                .find(|m| m["metadata"]["name"] == "s")
                .cloned()
                .unwrap()
        };
        assert_eq!(pick(&a), pick(&b));
    }
}
