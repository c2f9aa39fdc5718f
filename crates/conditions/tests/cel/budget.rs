//! The per-manifest cost budget, the stack guard on every entry point, and the conversion cache.

use conditions::{ConditionUpdate, Evaluator, Limits, PreparedObject, Status};
use serde_json::{Value, json};
use work_api::{ConditionRule, ConditionRuleType};

fn cel_rule(condition: &str, exprs: &[&str]) -> ConditionRule {
    ConditionRule::cel(condition, exprs.iter().copied())
}

fn items(n: usize) -> Value {
    json!({
        "metadata": {"uid": "u-1", "resourceVersion": "7", "name": "x"},
        "items": (0..n).collect::<Vec<_>>(),
    })
}

/// A rule that costs about `n * n * 10` units on `items(n)`.
fn heavy(condition: &str) -> ConditionRule {
    cel_rule(
        condition,
        &["object.items.all(x, object.items.all(y, x + y >= 0))"],
    )
}

fn limits(budget: u64) -> Limits {
    Limits {
        manifest_cost_budget: budget,
        ..Limits::default()
    }
}

fn summary(updates: &[ConditionUpdate]) -> Vec<(String, Status, String)> {
    updates
        .iter()
        .map(|c| (c.type_.clone(), c.status, c.reason.clone()))
        .collect()
}

#[test]
fn rules_past_the_manifest_budget_give_expression_errors() {
    // Each heavy rule costs about 100 * 100 * 10 = 100,000 units: the third runs out.
    let ev = Evaluator::new(limits(250_000));
    let rules = [
        heavy("A"),
        heavy("B"),
        heavy("C"),
        heavy("D"),
        cel_rule("Cheap", &["true"]),
    ];
    let out = ev.evaluate_manifest(&rules, &items(100));
    assert_eq!(out.len(), 5);
    assert_eq!(
        summary(&out[..2]),
        vec![
            ("A".into(), Status::True, "ConditionRuleEvaluated".into()),
            ("B".into(), Status::True, "ConditionRuleEvaluated".into()),
        ]
    );
    for c in &out[2..] {
        assert_eq!(
            (c.status, c.reason.as_str()),
            (Status::False, "ConditionRuleExpressionError"),
            "{c:?}"
        );
        assert!(
            c.message
                .contains("the manifest's CEL cost budget of 250000 units is exhausted"),
            "{}",
            c.message
        );
    }
    assert!(
        out[2].message.starts_with("celExpressions[0]: "),
        "{}",
        out[2].message
    );
    for c in &out[3..] {
        assert!(
            c.message.starts_with("not evaluated: ")
                && c.message
                    .contains("exhausted by rule \"C\" celExpressions[0]"),
            "{}",
            c.message
        );
    }
    // The budget is per manifest: the next evaluation starts with a full one.
    let again = ev.evaluate_manifest(&rules[..2], &items(100));
    assert!(again.iter().all(|c| c.status == Status::True), "{again:?}");
}

#[test]
fn the_default_budget_stops_an_expensive_manifest() {
    // Each iteration pays for a 5,000-byte literal (500 units) that costs little time to
    // check, so 10,000,000 units go by quickly even in a debug build: about 510 units an
    // iteration, 1,000 iterations a rule, so the budget runs out in the twentieth rule.
    let ev = Evaluator::default();
    let body = format!(
        "object.items.all(x, !'{}'.startsWith('b'))",
        "a".repeat(5_000)
    );
    let rules: Vec<ConditionRule> = (0..25)
        .map(|i| cel_rule(&format!("R{i}"), &[body.as_str()]))
        .collect();
    let out = ev.evaluate_manifest(&rules, &items(1_000));
    let failed: Vec<usize> = out
        .iter()
        .enumerate()
        .filter(|(_, c)| c.reason == "ConditionRuleExpressionError")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(failed, (19..25).collect::<Vec<_>>(), "{:#?}", summary(&out));
    assert!(
        out[19].message.contains("10000000 units"),
        "{}",
        out[19].message
    );
    assert!(out[..19].iter().all(|c| c.status == Status::True));
}

#[test]
fn a_cheap_rule_set_is_unaffected() {
    let ev = Evaluator::default();
    let object = json!({
        "metadata": {"uid": "u-2", "resourceVersion": "1"},
        "status": {"conditions": [{"type": "Available", "status": "True"}], "replicas": 3},
        "spec": {"replicas": 3},
    });
    let rules: Vec<ConditionRule> = (0..64)
        .map(|i| {
            cel_rule(
                &format!("C{i}"),
                &[
                    "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')",
                    "object.status.replicas == object.spec.replicas",
                    "'abc'.startsWith('a') && object.metadata.uid.contains('u-')",
                ],
            )
        })
        .collect();
    let out = ev.evaluate_manifest(&rules, &object);
    assert_eq!(out.len(), 64);
    assert!(
        out.iter()
            .all(|c| c.status == Status::True && c.reason == "ConditionRuleEvaluated"),
        "{out:?}"
    );
}

#[test]
fn the_verdict_does_not_depend_on_cpu_load() {
    let ev = Evaluator::new(limits(250_000));
    let rules = [heavy("A"), heavy("B"), heavy("C"), cel_rule("D", &["true"])];
    let object = items(100);
    let quiet = ev.evaluate_manifest(&rules, &object);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let loaded = std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            });
        }
        let out: Vec<_> = (0..3)
            .map(|_| ev.evaluate_manifest(&rules, &object))
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        out
    });
    for out in loaded {
        assert_eq!(out, quiet);
    }
    assert_eq!(quiet[2].reason, "ConditionRuleExpressionError");
}

#[test]
fn message_expressions_and_regexes_are_charged() {
    // A long non-literal pattern costs a unit per byte, on every evaluation.
    let pattern = "a".repeat(5_000);
    let object =
        json!({"metadata": {"uid": "u-3", "resourceVersion": "1"}, "s": "aaa", "p": pattern});
    let ev = Evaluator::new(limits(4_000));
    let out = ev.evaluate_manifest(
        &[cel_rule("R", &["object.s.find(object.p) == ''"])],
        &object,
    );
    assert_eq!(out[0].reason, "ConditionRuleExpressionError", "{out:?}");
    assert!(out[0].message.contains("cost budget"), "{}", out[0].message);
    let ev = Evaluator::new(limits(8_000));
    let out = ev.evaluate_manifest(
        &[cel_rule("R", &["object.s.find(object.p) == ''"])],
        &object,
    );
    assert_eq!(out[0].status, Status::True, "{out:?}");

    // A messageExpression spends the same budget as the rule's expressions.
    let mut rule = cel_rule("M", &["true"]);
    rule.message_expression =
        Some("object.items.all(x, object.items.all(y, y >= 0)) ? 'ok' : 'no'".into());
    let ev = Evaluator::new(limits(50_000));
    let out = ev.evaluate_manifest(&[rule.clone(), cel_rule("After", &["true"])], &items(100));
    assert_eq!(out[0].status, Status::True);
    assert!(
        out[0]
            .message
            .starts_with("messageExpression failed: the manifest's CEL cost budget"),
        "{}",
        out[0].message
    );
    assert!(
        out[1]
            .message
            .contains("exhausted by rule \"M\" messageExpression"),
        "{}",
        out[1].message
    );
}

#[test]
fn size_dependent_functions_are_charged_by_size() {
    // One big string searched on every iteration: the iterations alone are cheap.
    let big = "x".repeat(100_000);
    let object = json!({"metadata": {"uid": "u-4", "resourceVersion": "1"}, "items": (0..100).collect::<Vec<_>>(), "big": big});
    let rule = cel_rule("R", &["object.items.all(i, !object.big.contains('y'))"]);
    // 100 iterations x 10,000 units for the 100 KB string.
    let out =
        Evaluator::new(limits(500_000)).evaluate_manifest(std::slice::from_ref(&rule), &object);
    assert_eq!(out[0].reason, "ConditionRuleExpressionError", "{out:?}");
    let out = Evaluator::new(limits(2_000_000)).evaluate_manifest(&[rule], &object);
    assert_eq!(out[0].status, Status::True, "{out:?}");
}

/// The deepest source `shape` accepts under the evaluator's limits.
fn deepest(ev: &Evaluator, shape: impl Fn(usize) -> String) -> String {
    (1..=ev.limits().max_nesting_depth)
        .rev()
        .map(&shape)
        .find(|s| ev.check_expression(s).is_ok())
        .expect("some depth is accepted")
}

#[test]
fn evaluate_manifest_at_the_depth_limit_runs_on_a_small_stack() {
    // Tokio blocking and worker threads have 2 MiB stacks.
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let ev = Evaluator::default();
            let shapes: [Box<dyn Fn(usize) -> String>; 4] = [
                Box::new(|n| format!("size({}1{}) == 1", "[".repeat(n), "]".repeat(n))),
                Box::new(|n| format!("{}object.items[0]{} == 1", "(".repeat(n), ")".repeat(n))),
                Box::new(|n| format!("{}1 > 0", "object.items[0] + ".repeat(n))),
                Box::new(|n| {
                    format!(
                        "{}object.s.contains('a'){}",
                        "object.items.all(x, ".repeat(n),
                        ")".repeat(n)
                    )
                }),
            ];
            let object =
                json!({"metadata": {"uid": "u-5", "resourceVersion": "1"}, "items": [1], "s": "a"});
            let rules: Vec<ConditionRule> = shapes
                .iter()
                .enumerate()
                .map(|(i, shape)| {
                    let source = deepest(&ev, shape);
                    cel_rule(&format!("Deep{i}"), &[source.as_str()])
                })
                .collect();
            let out = ev.evaluate_manifest(&rules, &object);
            let prepared = ev.prepare(&object);
            let again = ev.evaluate_prepared(&rules, &prepared);
            (out, again)
        })
        .unwrap();
    let (out, again) = handle.join().expect("evaluation overflowed a 2 MiB stack");
    assert_eq!(out.len(), 4);
    assert!(
        out.iter()
            .all(|c| c.status == Status::True && c.reason == "ConditionRuleEvaluated"),
        "{out:#?}"
    );
    assert_eq!(out, again);
}

#[test]
fn an_object_is_converted_once_per_resource_version() {
    // The object cache is off by default; a caller that turns it on gets one conversion per
    // resourceVersion.
    let ev = Evaluator::new(Limits {
        object_cache_capacity: 256,
        ..Limits::default()
    });
    let rules: Vec<ConditionRule> = (0..5)
        .map(|i| cel_rule(&format!("R{i}"), &["object.items.size() == 3"]))
        .chain([cel_rule("Complete", &["object.items[0] == 0"])])
        .collect();
    let v7 = items(3);
    for _ in 0..3 {
        let out = ev.evaluate_manifest(&rules, &v7);
        assert!(out.iter().all(|c| c.status == Status::True), "{out:?}");
    }
    assert_eq!(ev.is_complete(&rules, &v7), Some(true));
    assert_eq!(ev.object_conversions(), 1);

    let mut v8 = items(3);
    v8["metadata"]["resourceVersion"] = json!("8");
    ev.evaluate_manifest(&rules, &v8);
    ev.evaluate_manifest(&rules, &v8);
    assert_eq!(ev.object_conversions(), 2);

    // Without a resourceVersion there is nothing to key on: converted every time.
    let bare = json!({"items": [0, 1, 2]});
    ev.evaluate_manifest(&rules, &bare);
    ev.evaluate_manifest(&rules, &bare);
    assert_eq!(ev.object_conversions(), 4);

    // Well-known rules need no conversion.
    let well_known = ConditionRule {
        type_: ConditionRuleType::WellKnownConditions,
        ..Default::default()
    };
    ev.evaluate_manifest(&[well_known], &bare);
    assert_eq!(ev.object_conversions(), 4);
}

#[test]
fn prepared_objects_evaluate_like_json() {
    let ev = Evaluator::default();
    let object = json!({
        "metadata": {"generation": 2},
        "status": {"observedGeneration": 2, "ready": 1, "conditions": [{"type": "Ready", "status": "True"}]},
        "spec": {"replicas": 1},
    });
    let mut with_message = cel_rule("Ready", &["object.status.ready == object.spec.replicas"]);
    with_message.message_expression =
        Some("result ? 'ready ' + string(object.status.ready) : ''".into());
    let rules = [
        with_message,
        cel_rule(
            "Conds",
            &["object.status.conditions.exists(c, c.type == 'Ready')"],
        ),
        cel_rule("Bad", &["object.status.nope"]),
    ];
    let prepared = PreparedObject::new(object.clone());
    assert_eq!(
        ev.evaluate_prepared(&rules, &prepared),
        ev.evaluate_manifest(&rules, &object)
    );
    assert_eq!(
        ev.evaluate_prepared(&rules, &prepared)[0].message,
        "ready 1"
    );
    assert_eq!(ev.is_complete_prepared(&rules, &prepared), None);
}
