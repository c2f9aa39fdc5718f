//! Agreement of the rule library with Argo CD's health checks on Argo CD's own test objects: a
//! fixture set this project does not write. Not run in CI (it needs a checkout of Argo CD);
//! run it locally with
//!
//! ```text
//! git clone --depth 1 https://github.com/argoproj/argo-cd /tmp/argo-cd
//! ARGOCD_DIR=/tmp/argo-cd cargo test -p authoring --test library -- --ignored --nocapture rule_library_argocd::
//! ```
//!
//! For every `resource_customizations/<group>/<kind>/health_test.yaml` case whose object has a
//! library entry (written for its kind, or a group fallback), the entry's `Healthy` verdict is
//! compared with the `healthStatus.status` Argo CD expects: Healthy = True `Ready`; Degraded =
//! False `Failed`; Progressing = False `Progressing` or Unknown `NoStatus`/`StaleStatus` (Argo
//! has no "not reported yet" and calls that Progressing); Missing = any Unknown or `Progressing`;
//! Unknown (a state the check does not know) = Unknown but `Suspended`; Suspended = Unknown
//! `Suspended`. Objects whose `status.observedGeneration` is
//! behind `metadata.generation` and which the rule would call healthy are Unknown `StaleStatus`
//! by design (the agent does not trust a status written for an older spec to claim health; Argo
//! CD does): they are counted apart and left out of the figure, which is printed with and
//! without them. A failure on such an object is judged like any other.

use std::path::{Path, PathBuf};

use authoring::rule_library;
use conditions::Evaluator;
use serde_json::Value;

fn agrees(argo: &str, status: &str, reason: &str) -> bool {
    match argo {
        "Healthy" => status == "True" && reason == "Ready",
        "Degraded" => status == "False" && reason == "Failed",
        "Progressing" => {
            (status == "False" && reason == "Progressing")
                || (status == "Unknown" && (reason == "NoStatus" || reason == "StaleStatus"))
        }
        // Argo CD's Missing is its word for "not there yet" on a remote system (Humio's
        // NotFound, while the operator creates the entity): on the way, as Progressing is.
        "Missing" => (status == "Unknown" && reason != "Suspended") || reason == "Progressing",
        // Unknown is a state the check does not know: never a verdict.
        "Unknown" => status == "Unknown" && reason != "Suspended",
        "Suspended" => status == "Unknown" && reason == "Suspended",
        _ => false,
    }
}

fn read_yaml(path: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_norway::from_str(&text).ok()
}

#[test]
#[ignore = "needs a checkout of argoproj/argo-cd in ARGOCD_DIR"]
fn the_library_agrees_with_argo_cd_on_its_test_objects() {
    let Some(dir) = std::env::var_os("ARGOCD_DIR") else {
        panic!("set ARGOCD_DIR to a checkout of https://github.com/argoproj/argo-cd");
    };
    let root = PathBuf::from(dir).join("resource_customizations");
    let rules = rule_library::load().expect("the library decodes");
    let ev = Evaluator::shared();
    let mut tests: Vec<PathBuf> = Vec::new();
    for group in std::fs::read_dir(&root)
        .expect("resource_customizations")
        .flatten()
    {
        for kind in std::fs::read_dir(group.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let t = kind.path().join("health_test.yaml");
            if t.exists() {
                tests.push(t);
            }
        }
    }
    tests.sort();
    // The catalog list `rules list` counts against is this checkout's.
    let mut catalog: Vec<String> = tests
        .iter()
        .filter(|t| t.with_file_name("health.lua").exists())
        .filter_map(|t| {
            let kind = t.parent()?;
            let group = kind.parent()?;
            Some(format!(
                "{}/{}",
                group.file_name()?.to_string_lossy(),
                kind.file_name()?.to_string_lossy()
            ))
        })
        .collect();
    catalog.sort();
    let mut listed: Vec<String> = rule_library::argocd_health_kinds()
        .map(str::to_string)
        .collect();
    listed.sort();
    assert_eq!(
        listed, catalog,
        "crates/authoring/argocd-health-kinds.txt differs from this checkout's catalog"
    );
    let (mut total, mut agreed, mut stale) = (0, 0, 0);
    let mut kinds = std::collections::BTreeSet::new();
    for test in tests {
        let Some(spec) = read_yaml(&test) else {
            continue;
        };
        let base = test.parent().unwrap_or(&root);
        for case in spec["tests"].as_array().into_iter().flatten() {
            let Some(argo) = case["healthStatus"]["status"].as_str() else {
                continue;
            };
            let Some(input) = case["inputPath"].as_str() else {
                continue;
            };
            let Some(object) = read_yaml(&base.join(input)) else {
                continue;
            };
            let api_version = object["apiVersion"].as_str().unwrap_or_default();
            let kind = object["kind"].as_str().unwrap_or_default();
            let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
            let Some(rule) = rule_library::select(rules.clone(), group, kind)
                .into_iter()
                .next()
            else {
                continue;
            };
            let conditions = ev.evaluate_manifest(&rule.condition_rules, &object);
            let Some(c) = conditions.first() else {
                continue;
            };
            let reason = c.reason.strip_prefix("ConditionRule").unwrap_or(&c.reason);
            let behind = object["status"]["observedGeneration"]
                .as_i64()
                .zip(object["metadata"]["generation"].as_i64())
                .is_some_and(|(seen, generation)| seen < generation);
            if behind && reason == "StaleStatus" && argo != "Progressing" {
                stale += 1;
                println!(
                    "stale    {group}/{kind} {input}: Argo CD {argo}; status.observedGeneration is behind, {} says StaleStatus",
                    rule.name
                );
                continue;
            }
            total += 1;
            kinds.insert(format!("{group}/{kind}"));
            let ok = agrees(argo, c.status.as_str(), reason);
            if ok {
                agreed += 1;
            }
            println!(
                "{} {}/{} {}: Argo CD {argo}, {} {} {reason} {:?}",
                if ok { "agree   " } else { "DISAGREE" },
                group,
                kind,
                input,
                rule.name,
                c.status.as_str(),
                c.message
            );
        }
    }
    let share = if total == 0 {
        0.0
    } else {
        agreed as f64 * 100.0 / total as f64
    };
    println!(
        "{} kinds, {agreed} of {total} Argo CD test objects agree ({share:.1} %); {stale} more have a stale status (Unknown StaleStatus by design; {agreed} of {} with them)",
        kinds.len(),
        total + stale
    );
    println!("{}", authoring::rules::argocd_coverage_text(&rules));
    assert!(total > 0, "no Argo CD test object has a library entry");
    assert!(share >= 99.0, "agreement {share:.1} % is below 99 %");
}
