//! Bounds: deep or long expressions are rejected before they can overflow the stack, runaway
//! evaluations are stopped in bounded time, and compiled expressions are shared.

use std::sync::Arc;
use std::time::{Duration, Instant};

use conditions::{Bindings, EvalError, Evaluator, Limits, Status};
use serde_json::json;
use work_api::ConditionRule;

fn cel_rule(condition: &str, exprs: &[&str]) -> ConditionRule {
    ConditionRule::cel(condition, exprs.iter().copied())
}

fn deep_shapes(n: usize) -> Vec<String> {
    vec![
        format!("{}1{}", "(".repeat(n), ")".repeat(n)),
        format!("{}true", "!".repeat(n)),
        format!("{}1{}", "[".repeat(n), "]".repeat(n)),
        format!("{}1", "-".repeat(n)),
        format!("{}{}", "{'a': ".repeat(n), "}".repeat(n)),
        format!("{}1{}", "size([".repeat(n), "])".repeat(n)),
    ]
}

#[test]
fn ten_thousand_deep_expressions_are_rejected_not_overflowed() {
    let ev = Evaluator::new(Limits {
        max_expression_len: 100_000,
        ..Limits::default()
    });
    for source in deep_shapes(10_000) {
        let err = ev.check_expression(&source).unwrap_err();
        assert!(
            matches!(err, EvalError::TooDeep { .. }),
            "{}...: {err:?}",
            &source[..20]
        );
        assert!(err.is_compile_error());
    }
}

#[test]
fn deep_binary_chains_are_rejected() {
    // No brackets: long chains are caught by the lexical estimate, medium ones by the depth of
    // the parsed tree (parsed on the big stack).
    let ev = Evaluator::new(Limits {
        max_expression_len: 100_000,
        ..Limits::default()
    });
    for op in [" + ", " * ", " - ", " == ", "."] {
        for terms in [100, 5_000] {
            let source = vec!["a"; terms].join(op);
            let start = Instant::now();
            let err = ev.check_expression(&source).unwrap_err();
            assert!(
                matches!(err, EvalError::TooDeep { .. }),
                "{op} x{terms}: {err:?}"
            );
            assert!(start.elapsed() < Duration::from_secs(5), "{op} x{terms}");
        }
    }
    // The parser balances chains of `&&` and `||`, so those are shallow and fine.
    for op in [" && ", " || "] {
        let source = vec!["true"; 2_000].join(op);
        assert_eq!(
            ev.eval_expression(&source, &Bindings::Object(&json!({})))
                .unwrap(),
            json!(true),
            "{op}"
        );
    }
    let ternary = "true ? 1 : ".repeat(3_000) + "0";
    let err = ev.check_expression(&ternary).unwrap_err();
    assert!(err.is_compile_error(), "{err:?}");
}

#[test]
fn deep_rules_give_expression_error_conditions() {
    let ev = Evaluator::shared();
    for source in deep_shapes(10_000).iter().take(3) {
        let conditions = ev.evaluate_manifest(&[cel_rule("Deep", &[source])], &json!({}));
        assert_eq!(conditions.len(), 1);
        let c = &conditions[0];
        assert_eq!(
            (c.status, c.reason.as_str()),
            (Status::False, "ConditionRuleExpressionError")
        );
        assert!(
            c.message.starts_with("celExpressions[0]: expression is"),
            "{}",
            c.message
        );
    }
}

#[test]
fn reasonable_nesting_is_accepted() {
    let ev = Evaluator::shared();
    let source = format!("{}1{} == 1", "(".repeat(20), ")".repeat(20));
    assert_eq!(
        ev.eval_expression(&source, &Bindings::Object(&json!({})))
            .unwrap(),
        json!(true)
    );
}

#[test]
fn nested_comprehensions_are_stopped_in_bounded_time() {
    // Without a cost budget only the deadline (the safety net) can stop it.
    let ev = Evaluator::new(Limits {
        max_iterations: 10_000_000_000,
        max_evaluation_time: Duration::from_millis(100),
        manifest_cost_budget: u64::MAX,
        ..Limits::default()
    });
    let list = (0..300)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let source = format!("[{list}].map(x, [{list}].map(y, [{list}].map(z, x + y + z)))");
    let start = Instant::now();
    let err = ev
        .eval_expression(&source, &Bindings::Object(&json!({})))
        .unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, EvalError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("longer than"), "{err}");
    // The deadline is checked every iteration; allow generously for a slow debug build.
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn iteration_budget_stops_large_input_comprehensions() {
    let ev = Evaluator::new(Limits {
        max_iterations: 1_000,
        max_evaluation_time: Duration::from_secs(60),
        ..Limits::default()
    });
    let object = json!({"items": (0..100).collect::<Vec<_>>()});
    let nested = "object.items.all(x, object.items.all(y, x + y >= 0))";
    let err = ev
        .eval_expression(nested, &Bindings::Object(&object))
        .unwrap_err();
    assert!(matches!(err, EvalError::Timeout { .. }), "{err:?}");
    assert!(
        err.to_string().contains("1000 comprehension iterations"),
        "{err}"
    );
    // Within budget it evaluates normally (map keeps cel's append fast path).
    let single = "object.items.map(x, x * 2).size() == 100";
    assert_eq!(
        ev.eval_expression(single, &Bindings::Object(&object))
            .unwrap(),
        json!(true)
    );
}

#[test]
fn runaway_rule_gives_expression_error_condition() {
    let ev = Evaluator::new(Limits {
        max_iterations: 10_000,
        ..Limits::default()
    });
    let object = json!({"items": (0..1000).collect::<Vec<_>>()});
    let rule = cel_rule(
        "Heavy",
        &["object.items.exists(x, object.items.exists(y, x * y < 0))"],
    );
    let c = &ev.evaluate_manifest(&[rule], &object)[0];
    assert_eq!(
        (c.status, c.reason.as_str()),
        (Status::False, "ConditionRuleExpressionError")
    );
    assert!(c.message.contains("evaluation stopped"), "{}", c.message);
    // The budget is per evaluation: the next one starts fresh.
    let ok = cel_rule("Light", &["object.items.exists(x, x == 999)"]);
    assert_eq!(ev.evaluate_manifest(&[ok], &object)[0].status, Status::True);
}

#[test]
fn second_evaluation_does_not_compile() {
    let ev = Evaluator::new(Limits::default());
    let rule = cel_rule("Ready", &["object.status.ready == true"]);
    let object = json!({"status": {"ready": true}});
    assert_eq!(ev.compile_count(), 0);
    ev.evaluate_manifest(std::slice::from_ref(&rule), &object);
    assert_eq!(ev.compile_count(), 1);
    ev.evaluate_manifest(std::slice::from_ref(&rule), &object);
    ev.is_complete(std::slice::from_ref(&rule), &object);
    assert_eq!(ev.compile_count(), 1);
    // Bad expressions are cached too.
    ev.check_expression("1 +").unwrap_err();
    ev.check_expression("1 +").unwrap_err();
    assert_eq!(ev.compile_count(), 2);
}

#[test]
fn cache_is_bounded() {
    let ev = Evaluator::new(Limits {
        cache_capacity: 8,
        ..Limits::default()
    });
    for i in 0..20 {
        ev.check_expression(&format!("{i} == {i}")).unwrap();
    }
    assert_eq!(ev.cached_expressions(), 8);
}

#[test]
fn compiled_programs_are_shared_across_threads() {
    let ev = Arc::new(Evaluator::new(Limits::default()));
    let rule = cel_rule("Ready", &["object.n % 2 == 0"]);
    ev.check_expression("object.n % 2 == 0").unwrap();
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let ev = ev.clone();
            let rule = rule.clone();
            std::thread::spawn(move || {
                (0..50)
                    .map(|n| {
                        let c = &ev.evaluate_manifest(
                            std::slice::from_ref(&rule),
                            &json!({"n": t * 50 + n}),
                        )[0];
                        c.status == Status::True
                    })
                    .filter(|b| *b)
                    .count()
            })
        })
        .collect();
    let trues: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(trues, 100);
    assert_eq!(ev.compile_count(), 1);
}

#[test]
fn evaluator_is_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Evaluator>();
}

#[test]
fn expressions_at_the_depth_limit_evaluate_on_a_small_stack() {
    // Tokio worker threads have 2 MiB stacks; evaluation happens on the caller's thread.
    let handle = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(|| {
            let ev = Evaluator::new(Limits::default());
            let depth = ev.limits().max_nesting_depth - 4;
            let object = json!({"items": [1]});
            let shapes = [
                format!("{}1{} == 1", "(".repeat(depth), ")".repeat(depth)),
                format!("{}true", "!".repeat(depth)),
                format!("size({}1{}) == 1", "[".repeat(depth), "]".repeat(depth)),
                format!("{}1 > 0", "1 + ".repeat(depth / 2)),
                format!(
                    "{}true{}",
                    "object.items.all(x, ".repeat(depth / 4),
                    ")".repeat(depth / 4)
                ),
            ];
            for source in &shapes {
                let result = ev.eval_expression(source, &Bindings::Object(&object));
                assert!(result.is_ok(), "{source}: {result:?}");
            }
        })
        .unwrap();
    handle.join().expect("evaluation overflowed a 2 MiB stack");
}

#[test]
fn comprehensions_over_maps_are_metered_too() {
    let ev = Evaluator::new(Limits {
        max_iterations: 50,
        ..Limits::default()
    });
    let labels: serde_json::Map<String, serde_json::Value> =
        (0..40).map(|i| (format!("k{i}"), json!(i))).collect();
    let object = json!({"metadata": {"labels": labels}});
    let one = "object.metadata.labels.exists(k, k == 'k39')";
    assert_eq!(
        ev.eval_expression(one, &Bindings::Object(&object)).unwrap(),
        json!(true)
    );
    let nested = "object.metadata.labels.all(k, object.metadata.labels.all(j, k != '' && j != ''))";
    let err = ev
        .eval_expression(nested, &Bindings::Object(&object))
        .unwrap_err();
    assert!(matches!(err, EvalError::Timeout { .. }), "{err:?}");
    let filtered = "object.metadata.labels.filter(k, object.metadata.labels[k] < 3).size()";
    assert_eq!(
        ev.eval_expression(filtered, &Bindings::Object(&object))
            .unwrap(),
        json!(3)
    );
}

#[test]
fn oversized_sources_are_not_cached() {
    let ev = Evaluator::new(Limits::default());
    let huge = "1 == 1 && ".repeat(10_000) + "true";
    for _ in 0..3 {
        assert!(matches!(
            ev.check_expression(&huge),
            Err(EvalError::TooLong { .. })
        ));
    }
    assert_eq!(ev.cached_expressions(), 0);
    assert_eq!(ev.compile_count(), 0);
}

#[test]
fn slow_iteration_bodies_are_stopped_at_the_deadline() {
    // Few iterations, each building and sorting a big list: the deadline is checked per
    // iteration, not only after many of them.
    let ev = Evaluator::new(Limits {
        max_evaluation_time: Duration::from_millis(50),
        manifest_cost_budget: u64::MAX,
        ..Limits::default()
    });
    let source = "lists.range(1000).all(i, lists.range(200000).sort().size() > 0)";
    let start = Instant::now();
    let err = ev
        .eval_expression(source, &Bindings::Object(&json!({})))
        .unwrap_err();
    assert!(matches!(err, EvalError::Timeout { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "took {:?}",
        start.elapsed()
    );
}

#[test]
fn two_variable_comprehensions_are_metered() {
    let object = json!({"items": (0..100).collect::<Vec<_>>()});
    let eval =
        |ev: &Evaluator, source: &str| ev.eval_expression(source, &Bindings::Object(&object));
    let few_iterations = Evaluator::new(Limits {
        max_iterations: 1_000,
        max_evaluation_time: Duration::from_secs(60),
        ..Limits::default()
    });
    let nested = "object.items.all(i, x, object.items.all(j, y, x + y >= i - j - 200))";
    let err = eval(&few_iterations, nested).unwrap_err();
    assert!(matches!(err, EvalError::Timeout { .. }), "{err:?}");
    let small_budget = Evaluator::new(Limits {
        manifest_cost_budget: 5_000,
        ..Limits::default()
    });
    let quadratic = "object.items.transformMap(i, x, object.items.transformList(j, y, x + y))";
    let err = eval(&small_budget, quadratic).unwrap_err();
    assert!(matches!(err, EvalError::BudgetExceeded { .. }), "{err:?}");
    // Within the limits they evaluate normally.
    let single = "object.items.transformList(i, x, x * 2 + i).size() == 100";
    assert_eq!(eval(&small_budget, single).unwrap(), json!(true));
    assert_eq!(eval(&few_iterations, single).unwrap(), json!(true));
}

#[test]
fn deeply_nested_two_variable_comprehensions_are_rejected_cleanly() {
    let nest = |n: usize| {
        let mut source = "true".to_string();
        for i in 0..n {
            source = format!("[1].all(i{i}, v{i}, {source})");
        }
        source
    };
    let ev = Evaluator::shared();
    assert_eq!(
        ev.eval_expression(&nest(3), &Bindings::Object(&json!({})))
            .unwrap(),
        json!(true)
    );
    let err = ev
        .eval_expression(&nest(60), &Bindings::Object(&json!({})))
        .unwrap_err();
    assert!(matches!(err, EvalError::TooDeep { .. }), "{err:?}");
}
