//! The explanation of a rule reaches the condition the agent computes, and says how.

use conditions::{Evaluator, MessageSource, Status};
use serde_json::{Value, json};
use work_api::{ConditionRule, ConditionRuleType};

fn cel(condition: &str, exprs: &[&str]) -> ConditionRule {
    ConditionRule::cel(condition, exprs.iter().copied())
}

fn job(status: Value, generation: i64) -> Value {
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j", "namespace": "n", "generation": generation},
           "spec": {"completions": 2}, "status": status})
}

fn rules() -> Vec<ConditionRule> {
    let mut with_message = cel(
        "Done",
        &["object.status.succeeded >= object.spec.completions"],
    );
    with_message.message = Some("all pods succeeded".into());
    let mut with_expression = cel("Counted", &["object.status.succeeded > 0"]);
    with_expression.message_expression = Some("result ? 'some' : 'none yet'".into());
    let mut failing_expression = cel("Odd", &["true"]);
    failing_expression.message_expression = Some("object.status.nope".into());
    let mut empty_expression = cel("Empty", &["false"]);
    empty_expression.message_expression = Some("''".into());
    empty_expression.message = Some("fallback".into());
    vec![
        cel("Plain", &["object.status.succeeded == 2"]),
        cel(
            "Stops",
            &["true", "object.status.succeeded > 5", "object.nope"],
        ),
        cel(
            "Carried",
            &["{'reason': 'First', 'message': 'one'}", "true"],
        ),
        cel(
            "MapFalse",
            &["{'status': 'False', 'reason': 'Nope', 'message': 'not yet'}"],
        ),
        cel("Unknownish", &["{'status': 'Unknown'}"]),
        cel("BadReason", &["{'status': 'True', 'reason': 'has space'}"]),
        cel("Errors", &["object.status.nope == 1"]),
        cel("WrongType", &["'a string'"]),
        cel("Empty list", &[]),
        cel("Applied", &["true"]),
        with_message,
        with_expression,
        failing_expression,
        empty_expression,
        ConditionRule {
            type_: ConditionRuleType::WellKnownConditions,
            ..Default::default()
        },
        ConditionRule {
            condition: "Healthy".into(),
            type_: ConditionRuleType::WellKnownConditions,
            ..Default::default()
        },
        ConditionRule {
            condition: "X".into(),
            type_: ConditionRuleType::Unknown("Fancy".into()),
            ..Default::default()
        },
    ]
}

#[test]
fn explained_conditions_equal_the_agents_on_every_fixture() {
    let objects = [
        job(
            json!({"succeeded": 2, "conditions": [{"type": "Complete", "status": "True"}]}),
            1,
        ),
        job(json!({"succeeded": 0, "active": 1}), 1),
        job(json!({"succeeded": 1, "observedGeneration": 1}), 2),
        job(json!({}), 1),
        json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}}),
    ];
    let ev = Evaluator::shared();
    let rules = rules();
    for (i, object) in objects.iter().enumerate() {
        let expected = ev.evaluate_manifest(&rules, object);
        let explained: Vec<_> = ev
            .explain_manifest(&rules, object)
            .into_iter()
            .filter_map(|e| e.result)
            .collect();
        assert_eq!(explained, expected, "object {i}");
    }
}

#[test]
fn the_explanation_says_where_the_and_stopped_and_where_the_message_came_from() {
    let ev = Evaluator::shared();
    let object = job(json!({"succeeded": 1}), 1);
    let rules = rules();
    let stops = ev.explain_rule(&rules[1], &object);
    assert_eq!(stops.stopped_at, Some(1));
    assert_eq!(stops.not_evaluated, 1);
    assert_eq!(stops.steps.len(), 2);
    assert_eq!(stops.steps[0].value, Some(json!(true)));
    assert_eq!(stops.message_source, Some(MessageSource::Default));

    let carried = ev.explain_rule(&rules[2], &object);
    assert_eq!(carried.stopped_at, None);
    assert_eq!(carried.message_source, Some(MessageSource::ResultMap(0)));
    assert_eq!(
        carried.result.as_ref().map(|c| c.reason.as_str()),
        Some("ConditionRuleFirst")
    );

    let errors = ev.explain_rule(&rules[6], &object);
    assert_eq!(errors.message_source, Some(MessageSource::ExpressionError));
    assert!(
        errors.steps[0]
            .error
            .as_deref()
            .is_some_and(|e| e.contains("nope")),
        "{errors:?}"
    );

    assert_eq!(
        ev.explain_rule(&rules[10], &object).message_source,
        Some(MessageSource::Message)
    );
    assert_eq!(
        ev.explain_rule(&rules[11], &object).message_source,
        Some(MessageSource::MessageExpression)
    );
    assert_eq!(
        ev.explain_rule(&rules[12], &object).message_source,
        Some(MessageSource::MessageExpressionFailed)
    );
    assert_eq!(
        ev.explain_rule(&rules[13], &object).message_source,
        Some(MessageSource::Message)
    );
    assert_eq!(
        ev.explain_rule(&rules[9], &object).message_source,
        Some(MessageSource::InvalidRule)
    );

    let well_known = ev.explain_rule(&rules[14], &object);
    assert_eq!(
        well_known.well_known.as_ref().map(|w| w.passed),
        Some(false)
    );
    assert_eq!(well_known.message_source, Some(MessageSource::WellKnown));
    let no_rule = ev.explain_rule(&rules[15], &object);
    assert!(no_rule.result.is_none() && no_rule.no_condition.is_some());

    let stale = ev.explain_rule(
        &rules[0],
        &job(json!({"succeeded": 1, "observedGeneration": 1}), 2),
    );
    assert_eq!(
        stale
            .stale
            .map(|s| (s.observed_generation, s.generation, s.withheld)),
        Some((1, 2, false))
    );
    // The rule is evaluated; its False verdict stands.
    assert_eq!(stale.steps.len(), 1);
    assert_eq!(stale.result.map(|c| c.status), Some(Status::False));
    let withheld = ev.explain_rule(
        &rules[0],
        &job(json!({"succeeded": 2, "observedGeneration": 1}), 2),
    );
    assert_eq!(withheld.stale.map(|s| s.withheld), Some(true));
    assert_eq!(withheld.steps[0].status, Status::True);
    assert_eq!(withheld.message_source, Some(MessageSource::StaleStatus));
    assert_eq!(
        withheld.result.map(|c| (c.status, c.reason)),
        Some((Status::Unknown, "ConditionRuleStaleStatus".to_string()))
    );

    let map = ev.explain_rule(&rules[3], &object);
    assert_eq!(
        map.steps[0].value,
        Some(json!({"status": "False", "reason": "Nope", "message": "not yet"}))
    );
    assert_eq!(map.steps[0].reason.as_deref(), Some("ConditionRuleNope"));
}
