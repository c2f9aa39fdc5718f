//! kapp-controller's health of core kinds: our well-known `Healthy` rule implements it for the
//! kinds it names (Pod, ReplicationController, ReplicaSet, Deployment, StatefulSet, DaemonSet,
//! APIService, CustomResourceDefinition); kapp counts every other kind as healthy, which needs
//! no rule.

use conditions::Evaluator;
use work_api::{ConditionRule, ConditionRuleType, ManifestConfigOption, condition_types};

use super::manifest_config;

/// The well-known `Healthy` rule.
pub fn healthy_rule() -> ConditionRule {
    ConditionRule {
        condition: condition_types::HEALTHY.to_string(),
        type_: ConditionRuleType::WellKnownConditions,
        ..Default::default()
    }
}

/// What kapp-style health gives for a set of manifests.
#[derive(Debug, Default)]
pub struct KappConversion {
    /// One entry per kind that has a well-known `Healthy` rule.
    pub configs: Vec<ManifestConfigOption>,
    /// Kinds kapp counts as healthy without a check (no rule needed).
    pub always_healthy: Vec<String>,
}

/// `manifestConfigs` with the well-known `Healthy` rule for every kind of `manifests` that
/// has one (asked of the evaluator itself, so the list cannot drift from it).
pub fn convert(manifests: &[serde_json::Value]) -> KappConversion {
    let rule = healthy_rule();
    let mut out = KappConversion::default();
    let mut seen: Vec<(String, String)> = Vec::new();
    for manifest in manifests {
        let (Some(api_version), Some(kind)) = (
            manifest.get("apiVersion").and_then(|v| v.as_str()),
            manifest.get("kind").and_then(|v| v.as_str()),
        ) else {
            continue;
        };
        let key = (api_version.to_string(), kind.to_string());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
        let covered = !Evaluator::shared()
            .evaluate_manifest(std::slice::from_ref(&rule), manifest)
            .is_empty();
        if covered {
            out.configs
                .push(manifest_config(api_version, kind, vec![rule.clone()]));
        } else {
            out.always_healthy.push(format!("{api_version} {kind}"));
        }
    }
    out
}
