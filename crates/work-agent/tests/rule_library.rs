//! Every rule-library entry against its fixtures, through the agent's evaluator; and the
//! explanation of every fixture gives the condition the agent computes.

use conditions::Evaluator;
use work_agent::rule_library::{self, REQUIRED_STATES};

#[test]
fn the_library_decodes_and_names_are_unique() {
    let rules = rule_library::load().expect("the library decodes");
    assert!(rules.len() >= 13, "{} entries", rules.len());
    let mut names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
    names.sort();
    let before = names.len();
    names.dedup();
    assert_eq!(names.len(), before, "duplicate names");
}

#[test]
fn every_entry_has_a_fixture_for_every_state() {
    for rule in rule_library::load().unwrap() {
        for state in REQUIRED_STATES {
            assert!(
                rule.fixtures.iter().any(|f| f.state == *state),
                "{}: no {state} fixture",
                rule.name
            );
        }
        for fixture in &rule.fixtures {
            assert!(
                REQUIRED_STATES.contains(&fixture.state.as_str()),
                "{}: unknown state {}",
                rule.name,
                fixture.state
            );
        }
    }
}

#[test]
fn every_fixture_gets_its_expected_condition() {
    let ev = Evaluator::shared();
    let mut failures = Vec::new();
    let mut checked = 0;
    for rule in rule_library::load().unwrap() {
        for fixture in &rule.fixtures {
            let kind = fixture.object["kind"].as_str().unwrap_or_default();
            let group = fixture.object["apiVersion"]
                .as_str()
                .and_then(|v| v.rsplit_once('/'))
                .map_or("", |(g, _)| g);
            if !rule.kinds.is_empty() {
                assert!(
                    rule.covers(group, kind),
                    "{} {}: fixture kind {group}/{kind} is not one of the entry's kinds",
                    rule.name,
                    fixture.state
                );
            }
            let conditions = ev.evaluate_manifest(&rule.condition_rules, &fixture.object);
            assert_eq!(
                conditions.len(),
                rule.condition_rules.len(),
                "{}",
                rule.name
            );
            let c = &conditions[0];
            let expected_reason = format!("ConditionRule{}", fixture.expect.reason);
            let ok = c.status.as_str() == fixture.expect.status
                && c.reason == expected_reason
                && fixture
                    .expect
                    .message
                    .as_ref()
                    .is_none_or(|m| *m == c.message);
            if !ok {
                failures.push(format!(
                    "{} {}: got {} {} {:?}, expected {} {} {:?}",
                    rule.name,
                    fixture.state,
                    c.status,
                    c.reason,
                    c.message,
                    fixture.expect.status,
                    expected_reason,
                    fixture.expect.message
                ));
            }
            let explained: Vec<_> = ev
                .explain_manifest(&rule.condition_rules, &fixture.object)
                .into_iter()
                .filter_map(|e| e.result)
                .collect();
            assert_eq!(
                explained, conditions,
                "{} {}: explain differs",
                rule.name, fixture.state
            );
            checked += 1;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 65, "only {checked} fixtures");
}

#[test]
fn show_yaml_is_a_list_of_manifest_configs_that_decodes() {
    for rule in rule_library::load().unwrap() {
        let yaml = work_agent::cmd_rules::show_yaml(&rule).unwrap();
        let configs: Vec<work_api::ManifestConfigOption> = serde_norway::from_str(&yaml).unwrap();
        assert_eq!(
            configs[0].condition_rules, rule.condition_rules,
            "{}",
            rule.name
        );
        for (config, kind) in configs.iter().zip(&rule.kinds) {
            assert_eq!(config.resource_identifier.group, kind.group());
        }
    }
}

#[test]
fn plurals_come_from_kube() {
    assert_eq!(
        rule_library::plural("cert-manager.io/v1", "Certificate"),
        "certificates"
    );
    assert_eq!(
        rule_library::plural("networking.k8s.io/v1", "Ingress"),
        "ingresses"
    );
    assert_eq!(
        rule_library::plural("keda.sh/v1alpha1", "ScaledObject"),
        "scaledobjects"
    );
    assert_eq!(rule_library::plural("v1", "Endpoints"), "endpoints");
}

#[test]
fn every_entry_lints_clean_when_pasted_for_its_kinds() {
    for rule in rule_library::load().unwrap() {
        let Some(fixture) = rule.fixtures.iter().find(|f| f.state == "healthy") else {
            continue;
        };
        let mut manifest = fixture.object.clone();
        if let Some(m) = manifest.as_object_mut() {
            m.remove("status");
        }
        let mut configs = serde_json::to_value(rule.manifest_configs()).unwrap();
        if rule.kinds.is_empty() {
            // Kind-agnostic entries: point the placeholder at the fixture's kind.
            let api_version = manifest["apiVersion"].as_str().unwrap().to_string();
            let kind = manifest["kind"].as_str().unwrap().to_string();
            configs[0]["resourceIdentifier"]["group"] =
                api_version.rsplit_once('/').map_or("", |(g, _)| g).into();
            configs[0]["resourceIdentifier"]["resource"] =
                rule_library::plural(&api_version, &kind).into();
        }
        let work = serde_json::json!({"apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {"name": "w", "namespace": "c"},
            "spec": {"workload": {"manifests": [manifest]}, "manifestConfigs": configs}});
        let findings: Vec<_> = work_agent::cmd_lint::lint_document(&work)
            .into_iter()
            .filter(|f| !f.path.ends_with("resourceIdentifier") || rule.kinds.len() < 2)
            .collect();
        assert!(findings.is_empty(), "{}: {findings:?}", rule.name);
    }
}
