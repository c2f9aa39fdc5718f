//! Every rule-library entry against its fixtures, through the agent's evaluator; and the
//! explanation of every fixture gives the condition the agent computes.

use authoring::rule_library::{self, OPTIONAL_STATES, REQUIRED_STATES};
use conditions::Evaluator;

#[test]
fn the_library_decodes_and_names_are_unique() {
    let rules = rule_library::load().expect("the library decodes");
    assert!(rules.len() >= 13, "{} entries", rules.len());
    for rule in &rules {
        assert!(!rule.project.is_empty(), "{}: no project", rule.name);
    }
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
                REQUIRED_STATES.contains(&fixture.state.as_str())
                    || OPTIONAL_STATES.contains(&fixture.state.as_str()),
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
            let mut expected = vec![(0, &fixture.expect)];
            if rule.gives_complete() {
                let Some(complete) = &fixture.complete else {
                    failures.push(format!(
                        "{} {}: the entry gives Complete but the fixture expects none",
                        rule.name, fixture.state
                    ));
                    continue;
                };
                let at = rule
                    .condition_rules
                    .iter()
                    .position(|r| r.condition_type() == "Complete")
                    .unwrap();
                expected.push((at, complete));
            } else {
                assert!(
                    fixture.complete.is_none(),
                    "{} {}: expects Complete from an entry without a Complete rule",
                    rule.name,
                    fixture.state
                );
            }
            for (at, expect) in expected {
                let c = &conditions[at];
                let expected_reason = format!("ConditionRule{}", expect.reason);
                let ok = c.status.as_str() == expect.status
                    && c.reason == expected_reason
                    && expect.message.as_ref().is_none_or(|m| *m == c.message);
                if !ok {
                    failures.push(format!(
                        "{} {} {}: got {} {} {:?}, expected {} {} {:?}",
                        rule.name,
                        fixture.state,
                        c.type_,
                        c.status,
                        c.reason,
                        c.message,
                        expect.status,
                        expected_reason,
                        expect.message
                    ));
                }
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
    assert!(checked >= 180, "only {checked} fixtures");
}

#[test]
fn cluster_api_entries_judge_the_v1beta2_api_and_v1beta2_conditions_in_every_state() {
    for name in [
        "cluster-api-cluster",
        "cluster-api-machine",
        "cluster-api-machinedeployment",
        "cluster-api-machineset",
        "cluster-api-kubeadmcontrolplane",
        "cluster-api-machinepool",
    ] {
        let rule = rule_library::find(name).unwrap().unwrap();
        let v1beta2: Vec<_> = rule
            .fixtures
            .iter()
            .filter(|f| {
                f.object["apiVersion"]
                    .as_str()
                    .is_some_and(|v| v.ends_with("/v1beta2"))
            })
            .collect();
        // Every Cluster API kind can be paused; none reports a state its entry does not know.
        for state in REQUIRED_STATES.iter().chain(&["suspended"]) {
            assert!(
                v1beta2.iter().any(|f| f.state == *state),
                "{name}: no v1beta2 {state} fixture"
            );
        }
        // Cluster API 1.9 and 1.10 carry the v1beta2 conditions inside the v1beta1 API.
        if name != "cluster-api-machineset" {
            assert!(
                rule.fixtures.iter().any(|f| {
                    f.object["apiVersion"]
                        .as_str()
                        .is_some_and(|v| v.ends_with("/v1beta1"))
                        && f.object["status"]["v1beta2"]["conditions"].is_array()
                }),
                "{name}: no v1beta1 fixture with status.v1beta2.conditions"
            );
        }
    }
}

#[test]
fn sixty_kinds_each_in_one_entry_and_a_suspended_fixture_reports_suspended() {
    let rules = rule_library::load().unwrap();
    let mut kinds: Vec<(String, String)> = rules
        .iter()
        .flat_map(|r| {
            r.kinds
                .iter()
                .map(|k| (k.group().to_string(), k.kind.clone()))
        })
        .collect();
    kinds.sort();
    let before = kinds.len();
    kinds.dedup();
    assert_eq!(kinds.len(), before, "a kind is in two entries");
    assert!(kinds.len() >= 60, "only {} kinds", kinds.len());
    for rule in &rules {
        for fixture in rule.fixtures.iter().filter(|f| f.state == "suspended") {
            assert_eq!(
                (
                    fixture.expect.status.as_str(),
                    fixture.expect.reason.as_str()
                ),
                ("Unknown", "Suspended"),
                "{}: a suspended object is reported as such",
                rule.name
            );
        }
        // Every entry with a Complete rule reports a failed run as Complete False Failed.
        if rule.gives_complete() {
            let failed = rule.fixtures.iter().find(|f| f.state == "failed").unwrap();
            let complete = failed.complete.as_ref().unwrap();
            assert_eq!(
                (complete.status.as_str(), complete.reason.as_str()),
                ("False", "Failed"),
                "{}",
                rule.name
            );
        }
    }
}

/// The library entry named `name`, evaluated on its fixtures of `state` for `kind` whose
/// `status.observedGeneration` is behind `metadata.generation`: (status, reason) of `Healthy`.
fn stale_verdicts(name: &str, kind: &str) -> Vec<(String, String)> {
    let rule = rule_library::find(name).unwrap().unwrap();
    rule.fixtures
        .iter()
        .filter(|f| f.state == "stale" && f.object["kind"] == kind)
        .filter(|f| {
            f.object["status"]["observedGeneration"].as_i64()
                < f.object["metadata"]["generation"].as_i64()
        })
        .map(|f| {
            let c = &Evaluator::shared().evaluate_manifest(&rule.condition_rules, &f.object)[0];
            (c.status.as_str().to_string(), c.reason.clone())
        })
        .collect()
}

/// A reported failure, shown as such.
const SHOWN_FAILURE: (&str, &str) = ("False", "ConditionRuleFailed");
/// A healthy-looking verdict the stale guard withheld.
const WITHHELD: (&str, &str) = ("Unknown", "ConditionRuleStaleStatus");

/// Asserts that one of `entry`'s stale fixtures of `kind` gives `verdict`.
fn assert_stale_gives(entry: &str, kind: &str, verdict: (&str, &str)) {
    let verdicts = stale_verdicts(entry, kind);
    assert!(
        verdicts
            .iter()
            .any(|(s, r)| (s.as_str(), r.as_str()) == verdict),
        "{entry} {kind}: no stale fixture gives {verdict:?}: {verdicts:?}"
    );
}

#[test]
fn rabbitmq_reports_a_refused_spec_on_a_stale_status() {
    assert_stale_gives("rabbitmq-cluster", "RabbitmqCluster", SHOWN_FAILURE);
    assert_stale_gives("rabbitmq-cluster", "RabbitmqCluster", WITHHELD);
    assert_stale_gives("rabbitmq-topology", "Policy", SHOWN_FAILURE);
    assert_stale_gives("rabbitmq-topology", "Queue", WITHHELD);
}

#[test]
fn percona_reports_an_error_state_on_a_stale_status() {
    assert_stale_gives("percona", "PerconaXtraDBCluster", SHOWN_FAILURE);
    assert_stale_gives("percona", "PerconaServerMongoDB", SHOWN_FAILURE);
}

#[test]
fn kubevirt_reports_a_failed_virtual_machine_on_a_stale_status() {
    assert_stale_gives("kubevirt-virtualmachine", "VirtualMachine", SHOWN_FAILURE);
    assert_stale_gives("kubevirt-virtualmachine", "VirtualMachine", WITHHELD);
}

/// `object` as it reads right after a spec change its controller has not reconciled yet:
/// `metadata.generation` one ahead, so every generation its status carries is behind.
fn spec_changed(object: &serde_json::Value) -> Option<serde_json::Value> {
    let generation = object["metadata"]["generation"].as_i64()?;
    let mut changed = object.clone();
    changed["metadata"]["generation"] = serde_json::json!(generation + 1);
    Some(changed)
}

/// Entries whose framework evaluates each generation afresh within seconds and records which
/// one it judged: a failure recorded for an older generation judged the old spec, so it reads
/// as progressing (still False, its verdict in the message), as Argo CD's checks read it.
const JUDGED_PER_GENERATION: &[&str] = &["ocm-policy"];

#[test]
fn after_a_spec_change_every_failed_fixture_still_fails_and_no_healthy_one_stays_healthy() {
    let ev = Evaluator::shared();
    let (mut failures, mut failed_checked, mut healthy_checked) = (Vec::new(), 0, 0);
    for rule in rule_library::load().unwrap() {
        for fixture in &rule.fixtures {
            let Some(changed) = spec_changed(&fixture.object) else {
                continue;
            };
            let c = &ev.evaluate_manifest(&rule.condition_rules, &changed)[0];
            let got = (c.status.as_str(), c.reason.as_str());
            if fixture.expect.status == "False" && fixture.expect.reason == "Failed" {
                // Whatever guard the generation trips, a failure the status reports is shown.
                failed_checked += 1;
                let shown = got == SHOWN_FAILURE
                    || (JUDGED_PER_GENERATION.contains(&rule.name.as_str()) && got.0 == "False");
                if !shown {
                    failures.push(format!(
                        "{} {}: failure hidden: {got:?}",
                        rule.name, fixture.state
                    ));
                }
            }
            if fixture.expect.status == "True"
                && fixture.object["status"]
                    .to_string()
                    .contains("observedGeneration")
            {
                // A status that carries the generation it describes never claims health for a
                // newer one.
                healthy_checked += 1;
                if got.0 == "True" {
                    failures.push(format!(
                        "{} {}: stale status claims health",
                        rule.name, fixture.state
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        failed_checked >= 100 && healthy_checked >= 50,
        "{failed_checked} failed, {healthy_checked} healthy fixtures"
    );
}

#[test]
fn a_stale_status_never_claims_health() {
    for rule in rule_library::load().unwrap() {
        let stale: Vec<_> = rule
            .fixtures
            .iter()
            .filter(|f| f.state == "stale")
            .collect();
        for fixture in &stale {
            // Only a kind whose status carries no generation at all (nothing to be behind) can
            // read as healthy after a spec change.
            let carries_generation = fixture.object["status"]
                .to_string()
                .contains("observedGeneration");
            assert!(
                fixture.expect.status != "True" || !carries_generation,
                "{}: a stale fixture expects True",
                rule.name
            );
        }
        if stale.iter().any(|f| {
            f.object["status"]
                .to_string()
                .contains("observedGeneration")
        }) {
            assert!(
                stale
                    .iter()
                    .any(|f| f.expect.status == "Unknown" && f.expect.reason == "StaleStatus"),
                "{}: no stale fixture that looks healthy expects Unknown StaleStatus",
                rule.name
            );
        }
    }
}

#[test]
fn run_once_kinds_give_complete() {
    let rules = rule_library::load().unwrap();
    for (group, kind) in [
        ("tekton.dev", "PipelineRun"),
        ("tekton.dev", "TaskRun"),
        ("argoproj.io", "Workflow"),
        ("sparkoperator.k8s.io", "SparkApplication"),
        ("velero.io", "Backup"),
        ("velero.io", "Restore"),
        ("kubeflow.org", "PyTorchJob"),
        ("kubeflow.org", "TFJob"),
    ] {
        let entries = rule_library::select(rules.clone(), group, kind);
        assert!(
            entries.iter().any(|r| r.gives_complete()),
            "{group}/{kind}: no entry gives Complete"
        );
    }
}

#[test]
fn the_library_covers_most_of_argo_cds_health_catalog() {
    let rules = rule_library::load().unwrap();
    let all: Vec<&str> = rule_library::argocd_health_kinds().collect();
    assert!(all.len() >= 241, "{} kinds in the catalog list", all.len());
    let covered = rule_library::argocd_kinds_covered(&rules);
    // Kinds with an entry of their own, a group fallback, and a suffix fallback.
    for kind in [
        "cert-manager.io/Certificate",
        "gateway.networking.k8s.io/HTTPRoute",
        "s3.aws.crossplane.io/Bucket",
        "_.services.k8s.aws/_",
        "_.cnrm.cloud.google.com/_",
    ] {
        assert!(covered.contains(&kind), "{kind} is not covered");
    }
    assert!(!covered.contains(&"spot.io/SpotDeployment"));
    assert!(covered.len() >= 176, "only {} covered", covered.len());
    let text = authoring::rules::argocd_coverage_text(&rules);
    assert!(
        text.starts_with(&format!("{} of the {} kinds", covered.len(), all.len())),
        "{text}"
    );
}

#[test]
fn docs_rules_md_is_current() {
    let rules = rule_library::load().unwrap();
    let generated = authoring::rules::docs_markdown(&rules);
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/rules.md");
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/rules.md is not current: run `cargo run -p work-agent -- rules docs > docs/rules.md`"
    );
}

#[test]
fn list_groups_by_project_and_marks_complete() {
    let rules = rule_library::load().unwrap();
    let text = authoring::rules::list_text(&rules);
    assert!(text.lines().any(|l| l == "Tekton"), "{text}");
    let tekton = text
        .lines()
        .find(|l| l.contains("tekton.dev/v1 PipelineRun"))
        .unwrap();
    assert!(tekton.contains("Healthy, Complete"), "{tekton}");
    let mut last = text.trim_end().lines().rev();
    let coverage = last.next().unwrap();
    assert!(
        coverage.contains("kinds Argo CD's health catalog checks have an entry"),
        "{coverage}"
    );
    assert!(last.next().unwrap().contains("give Complete"));
    // Fallbacks come last.
    let generic = text.find("Generic fallbacks").unwrap();
    assert!(text[generic..].contains("kstatus-ready"));
    assert!(!text[generic..].contains("tekton"));
}

#[test]
fn show_yaml_is_a_list_of_manifest_configs_that_decodes() {
    for rule in rule_library::load().unwrap() {
        let yaml = authoring::rules::show_yaml(&rule).unwrap();
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
        let findings: Vec<_> = authoring::lint::lint_document(&work)
            .into_iter()
            .filter(|f| !f.path.ends_with("resourceIdentifier") || rule.kinds.len() < 2)
            .collect();
        assert!(findings.is_empty(), "{}: {findings:?}", rule.name);
    }
}

const WORK: &str = "# The payments team's work.
apiVersion: work.open-cluster-management.io/v1
kind: ManifestWork
metadata:
  name: payments   # keep this comment
  namespace: cluster1
spec:
  workload:
    manifests:
      - apiVersion: cert-manager.io/v1
        kind: Certificate
        metadata: {name: api-tls, namespace: payments}
        spec: {secretName: api-tls, dnsNames: [api.example.com], issuerRef: {name: letsencrypt, kind: ClusterIssuer}}
      - apiVersion: tekton.dev/v1
        kind: PipelineRun
        metadata: {name: migrate, namespace: payments}
        spec: {pipelineRef: {name: migrate}}
      - apiVersion: s3.services.k8s.aws/v1alpha1
        kind: Bucket
        metadata: {name: receipts, namespace: payments}
        spec: {name: receipts-prod}
      - apiVersion: apps/v1
        kind: Deployment
        metadata: {name: api, namespace: payments}
        spec: {replicas: 2}
  manifestConfigs:
    - resourceIdentifier: {group: apps, resource: deployments, name: api, namespace: payments}
      updateStrategy: {type: ServerSideApply}

  # trailing comment of spec
status: {}
";

fn configs_of(text: &str) -> Vec<work_api::ManifestConfigOption> {
    let work: work_api::ManifestWork = serde_norway::from_str(text).unwrap();
    work.spec.manifest_configs
}

#[test]
fn rules_add_appends_a_config_per_known_kind_and_keeps_the_rest_of_the_file() {
    let rules = rule_library::load().unwrap();
    let (edited, notes) = authoring::rules::add_to_work(WORK, &rules).unwrap();
    // Every original line is still there, in order.
    let mut rest = edited.lines();
    for line in WORK.lines() {
        assert!(
            rest.any(|l| l == line),
            "line {line:?} lost or moved:\n{edited}"
        );
    }
    let configs = configs_of(&edited);
    assert_eq!(configs.len(), 4, "{edited}");
    let kinds: Vec<(&str, &str)> = configs[1..]
        .iter()
        .map(|c| {
            (
                c.resource_identifier.resource.as_str(),
                c.resource_identifier.name.as_str(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("certificates", "api-tls"),
            ("pipelineruns", "migrate"),
            ("buckets", "receipts")
        ]
    );
    assert_eq!(configs[2].resource_identifier.namespace, "payments");
    let pipeline: Vec<&str> = configs[2]
        .condition_rules
        .iter()
        .map(|r| r.condition_type())
        .collect();
    assert_eq!(pipeline, ["Healthy", "Complete"]);
    assert_eq!(notes.iter().filter(|n| n.added).count(), 3);
    // The edited work lints without errors and no longer asks for library rules.
    let doc: serde_json::Value = serde_norway::from_str(&edited).unwrap();
    let findings = authoring::lint::lint_document(&doc);
    assert!(
        !findings.iter().any(|f| f.message.contains("rule library")),
        "{findings:?}"
    );
    // A second run finds every rule in place and changes nothing.
    let (again, notes) = authoring::rules::add_to_work(&edited, &rules).unwrap();
    assert_eq!(again, edited);
    assert!(notes.iter().all(|n| !n.added), "{notes:?}");
}

#[test]
fn rules_add_creates_manifest_configs_and_respects_rules_already_given() {
    let rules = rule_library::load().unwrap();
    let without: String = WORK
        .lines()
        .filter(|l| {
            !l.contains("resourceIdentifier: {group: apps")
                && !l.contains("updateStrategy")
                && !l.contains("  manifestConfigs:")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let (edited, _) = authoring::rules::add_to_work(&without, &rules).unwrap();
    assert_eq!(configs_of(&edited).len(), 3, "{edited}");

    let empty = WORK.replace(
        "  manifestConfigs:\n    - resourceIdentifier: {group: apps, resource: deployments, name: api, namespace: payments}\n      updateStrategy: {type: ServerSideApply}\n",
        "  manifestConfigs: []\n",
    );
    assert_ne!(empty, WORK);
    let (edited, _) = authoring::rules::add_to_work(&empty, &rules).unwrap();
    assert_eq!(configs_of(&edited).len(), 3, "{edited}");

    // A glob config that already gives the certificate rules wins over anything appended.
    let own = WORK.replace(
        "      updateStrategy: {type: ServerSideApply}\n",
        "      updateStrategy: {type: ServerSideApply}\n    - resourceIdentifier: {group: cert-manager.io, resource: certificates, name: '*', namespace: '*'}\n      conditionRules: [{condition: Issued, type: CEL, celExpressions: ['true']}]\n",
    );
    let (edited, notes) = authoring::rules::add_to_work(&own, &rules).unwrap();
    let configs = configs_of(&edited);
    assert_eq!(configs.len(), 4, "{edited}");
    assert!(
        configs
            .iter()
            .all(|c| c.resource_identifier.name != "api-tls")
    );
    assert!(
        notes
            .iter()
            .any(|n| !n.added && n.message.contains("spec.manifestConfigs[1]")),
        "{notes:?}"
    );
}

#[test]
fn rules_add_refuses_what_it_cannot_edit_with_a_clear_error() {
    let rules = rule_library::load().unwrap();
    for (text, wanted) in [
        ("kind: ManifestWork\nspec: [unclosed\n", "YAML"),
        (
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n",
            "not a ManifestWork",
        ),
        (
            "apiVersion: work.open-cluster-management.io/v1\nkind: ManifestWork\nmetadata: {name: w, namespace: c}\nspec: {workload: {manifests: [{apiVersion: tekton.dev/v1, kind: TaskRun, metadata: {name: t, namespace: n}}]}}\n",
            "spec",
        ),
        ("a: 1\n---\nb: 2\n", "one ManifestWork"),
    ] {
        let err = authoring::rules::add_to_work(text, &rules).unwrap_err();
        assert!(err.contains(wanted), "{text:?}: {err}");
    }
}

#[test]
fn no_entry_is_true_when_what_it_looks_for_is_absent() {
    let rules = rule_library::load().unwrap();
    let mut found = Vec::new();
    for rule in &rules {
        for condition in &rule.condition_rules {
            let sources: Vec<&str> = condition
                .cel_expressions
                .iter()
                .map(|e| e.expression.as_str())
                .collect();
            for source in &sources {
                for f in authoring::lint_cel::vacuous(source, &sources) {
                    found.push(format!(
                        "{} {}: {}",
                        rule.name, condition.condition, f.message
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "{found:#?}");
}
