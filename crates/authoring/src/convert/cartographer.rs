//! Cartographer `healthRule` to one CEL rule.
//!
//! Semantics (Cartographer's `healthcheck` package): `alwaysHealthy` is True / `AlwaysHealthy`
//! with an empty message. `singleConditionType: X` takes the first condition of type X in
//! `status.conditions`: its status if True or False, else Unknown; reason `XCondition`;
//! message the condition's message (or that it was not found). `multiMatch` first tries the
//! `unhealthy` matchers, any of which makes it False (conditions first, then fields); then the
//! `healthy` matchers, all of which must hold for True; the reason is `MatchedCondition` or
//! `MatchedField` after the first matcher that decided; otherwise Unknown /
//! `NoMatchesFulfilled`. `matchFields` keys are JSONPath (`.status.a`, `['a/b']`, `[0]`,
//! `[?(@.type=="X")]`); `In`/`NotIn` compare the value's string form and do not match a field
//! that is absent.

use serde::Deserialize;
use work_api::{CelExpression, ConditionRule, ConditionRuleType};

use super::cel_string;

/// A template's `healthRule`.
#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthRule {
    /// Always healthy.
    #[serde(default)]
    pub always_healthy: Option<serde_json::Value>,
    /// Health is this condition's status.
    #[serde(default)]
    pub single_condition_type: Option<String>,
    /// Healthy and unhealthy matchers.
    #[serde(default)]
    pub multi_match: Option<MultiMatch>,
}

/// `multiMatch`.
#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
pub struct MultiMatch {
    /// All must match for True.
    #[serde(default)]
    pub healthy: Matchers,
    /// Any matching gives False.
    #[serde(default)]
    pub unhealthy: Matchers,
}

/// Condition and field matchers.
#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Matchers {
    /// Conditions with a given status.
    #[serde(default)]
    pub match_conditions: Vec<MatchCondition>,
    /// Field requirements.
    #[serde(default)]
    pub match_fields: Vec<MatchField>,
}

/// A condition of `type_` with `status`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct MatchCondition {
    /// Condition type.
    #[serde(rename = "type")]
    pub type_: String,
    /// Expected status.
    pub status: String,
}

/// A field requirement.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MatchField {
    /// JSONPath of the field.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    #[serde(default)]
    pub values: Vec<String>,
    /// JSONPath of a message to show.
    #[serde(default)]
    pub message_path: Option<String>,
}

/// One step of a JSONPath.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathStep {
    /// `.name` or `['name']`.
    Field(String),
    /// `[N]`.
    Index(usize),
    /// `[?(@.a.b=="v")]`: the first item whose field path equals the string.
    Filter(Vec<String>, String),
}

/// Parses the JSONPath subset Cartographer templates use.
pub fn parse_path(path: &str) -> Result<Vec<PathStep>, String> {
    let text = path.trim();
    let text = text
        .strip_prefix('{')
        .and_then(|t| t.strip_suffix('}'))
        .unwrap_or(text);
    let text = text.strip_prefix('$').unwrap_or(text);
    let chars: Vec<char> = text.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    let bad = |why: &str| format!("JSONPath {path:?}: {why}");
    while i < chars.len() {
        match chars[i] {
            '.' => i += 1,
            '[' => {
                let close = find_bracket_end(&chars, i).ok_or_else(|| bad("unclosed ["))?;
                let inner: String = chars[i + 1..close].iter().collect();
                steps.push(
                    bracket_step(inner.trim())
                        .ok_or_else(|| bad(&format!("unsupported [{inner}]")))?,
                );
                i = close + 1;
            }
            _ => {
                let start = i;
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    i += 1;
                }
                steps.push(PathStep::Field(chars[start..i].iter().collect()));
            }
        }
    }
    if steps.is_empty() {
        return Err(bad("empty path"));
    }
    Ok(steps)
}

fn find_bracket_end(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (j, &c) in chars.iter().enumerate().skip(open + 1) {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, ']') => return Some(j),
            _ => {}
        }
    }
    None
}

fn unquote(s: &str) -> Option<&str> {
    let s = s.trim();
    s.strip_prefix('\'')
        .and_then(|t| t.strip_suffix('\''))
        .or_else(|| s.strip_prefix('"').and_then(|t| t.strip_suffix('"')))
}

fn bracket_step(inner: &str) -> Option<PathStep> {
    if let Some(filter) = inner.strip_prefix("?(").and_then(|t| t.strip_suffix(')')) {
        let (lhs, rhs) = filter.split_once("==")?;
        let field = lhs.trim().strip_prefix("@.")?;
        let fields = field.split('.').map(str::to_string).collect();
        return Some(PathStep::Filter(fields, unquote(rhs)?.to_string()));
    }
    if let Some(name) = unquote(inner) {
        return Some(PathStep::Field(name.to_string()));
    }
    inner.parse().ok().map(PathStep::Index)
}

/// CEL telling whether the path exists, and CEL for its value (valid only where it exists).
pub fn path_cel(steps: &[PathStep]) -> (String, String) {
    let mut guards: Vec<String> = Vec::new();
    let mut cur = "object".to_string();
    for (depth, step) in steps.iter().enumerate() {
        match step {
            PathStep::Field(name) => {
                guards.push(format!("{} in {cur}", cel_string(name)));
                cur = if is_identifier(name) {
                    format!("{cur}.{name}")
                } else {
                    format!("{cur}[{}]", cel_string(name))
                };
            }
            PathStep::Index(n) => {
                guards.push(format!("size({cur}) > {n}"));
                cur = format!("{cur}[{n}]");
            }
            PathStep::Filter(fields, value) => {
                let var = format!("m{depth}");
                let test = item_test(&var, fields, value);
                guards.push(format!("{cur}.exists({var}, {test})"));
                cur = format!("{cur}.filter({var}, {test})[0]");
            }
        }
    }
    (guards.join(" && "), cur)
}

/// A name CEL accepts after a dot (and not a reserved word).
fn is_identifier(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !RESERVED.contains(&name)
}

fn item_test(var: &str, fields: &[String], value: &str) -> String {
    let mut guards = Vec::new();
    let mut cur = var.to_string();
    for f in fields {
        guards.push(format!("{} in {cur}", cel_string(f)));
        cur = format!("{cur}[{}]", cel_string(f));
    }
    guards.push(format!("{cur} == {}", cel_string(value)));
    format!("({})", guards.join(" && "))
}

/// CEL true when `status.conditions` has a condition of `type_`.
fn condition_exists(type_: &str) -> String {
    format!(
        "'status' in object && 'conditions' in object.status && object.status.conditions.exists(c, 'type' in c && c.type == {})",
        cel_string(type_)
    )
}

/// CEL for `body` (an expression over `c`) on the first condition of `type_`; valid only
/// where [`condition_exists`] holds.
fn on_condition(type_: &str, body: &str) -> String {
    format!(
        "object.status.conditions.filter(c, 'type' in c && c.type == {}).map(c, {body})[0]",
        cel_string(type_)
    )
}

const C_STATUS: &str = "('status' in c ? string(c.status) : '')";
const C_MESSAGE: &str = "('message' in c ? string(c.message) : '')";

fn verdict(status: &str, reason: &str, message: &str) -> String {
    format!(
        "{{'status': '{status}', 'reason': {}, 'message': {message}}}",
        cel_string(reason)
    )
}

/// CEL for "this matcher holds" and for its message.
fn condition_matcher(m: &MatchCondition) -> (String, String) {
    let holds = format!(
        "({} && {})",
        condition_exists(&m.type_),
        on_condition(
            &m.type_,
            &format!("{C_STATUS} == {}", cel_string(&m.status))
        )
    );
    let message = on_condition(
        &m.type_,
        &format!("'condition status: ' + {C_STATUS} + ', message: ' + {C_MESSAGE}"),
    );
    (holds, message)
}

fn field_matcher(m: &MatchField) -> Result<(String, String), String> {
    let (exists, value) = path_cel(&parse_path(&m.key)?);
    let values = format!(
        "[{}]",
        m.values
            .iter()
            .map(|v| cel_string(v))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let holds = match m.operator.as_str() {
        "Exists" => format!("({exists})"),
        "DoesNotExist" => format!("!({exists})"),
        "In" => format!("(({exists}) && string({value}) in {values})"),
        "NotIn" => format!("(({exists}) && !(string({value}) in {values}))"),
        other => {
            return Err(format!(
                "matchFields operator {other:?}: expected In, NotIn, Exists or DoesNotExist"
            ));
        }
    };
    let mut message = cel_string(&format!("field {} matched", m.key));
    if let Some(path) = m.message_path.as_deref().filter(|p| !p.is_empty()) {
        let (msg_exists, msg_value) = path_cel(&parse_path(path)?);
        message = format!(
            "{message} + ', message: ' + (({msg_exists}) ? string({msg_value}) : {})",
            cel_string(&format!("unknown, error retrieving message path [{path}]"))
        );
    }
    Ok((holds, message))
}

/// The CEL expressions for a health rule. `multiMatch` gives one expression per unhealthy
/// matcher (the AND stops at the first that matches) and a last one for the healthy
/// matchers, which keeps each expression shallow.
pub fn rule_expressions(rule: &HealthRule) -> Result<Vec<String>, String> {
    let set = [
        rule.always_healthy.is_some(),
        rule.single_condition_type.is_some(),
        rule.multi_match.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count();
    if set != 1 {
        return Err(
            "healthRule must set exactly one of alwaysHealthy, singleConditionType, multiMatch"
                .into(),
        );
    }
    if rule.always_healthy.is_some() {
        return Ok(vec![verdict("True", "AlwaysHealthy", "''")]);
    }
    if let Some(type_) = &rule.single_condition_type {
        let reason = format!("{type_}Condition");
        if !reason
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        {
            return Err(format!(
                "condition type {type_:?} does not make a valid reason {reason:?}"
            ));
        }
        let body = format!(
            "{C_STATUS} == 'True' ? {} : {C_STATUS} == 'False' ? {} : {}",
            verdict("True", &reason, C_MESSAGE),
            verdict("False", &reason, C_MESSAGE),
            verdict("Unknown", &reason, C_MESSAGE),
        );
        return Ok(vec![format!(
            "{}\n  ? {}\n  : {}",
            condition_exists(type_),
            on_condition(type_, &body),
            verdict(
                "Unknown",
                &reason,
                &cel_string(&format!(
                    "condition with type [{type_}] not found on resource status"
                ))
            ),
        )]);
    }
    let multi = rule.multi_match.as_ref().ok_or("multiMatch missing")?;
    if multi.healthy.match_conditions.is_empty() && multi.healthy.match_fields.is_empty() {
        return Err("multiMatch.healthy needs at least one matcher".into());
    }
    let pass = "{'status': 'True'}";
    let mut expressions = Vec::new();
    // Unhealthy matchers in Cartographer's order (conditions, then fields), each deciding False.
    for m in &multi.unhealthy.match_conditions {
        let (holds, message) = condition_matcher(m);
        expressions.push(format!(
            "{holds}\n  ? {}\n  : {pass}",
            verdict("False", "MatchedCondition", &message)
        ));
    }
    for m in &multi.unhealthy.match_fields {
        let (holds, message) = field_matcher(m)?;
        expressions.push(format!(
            "{holds}\n  ? {}\n  : {pass}",
            verdict("False", "MatchedField", &message)
        ));
    }
    // Healthy: all must hold; the first matcher gives the reason and message.
    let mut all = Vec::new();
    let mut first: Option<String> = None;
    for m in &multi.healthy.match_conditions {
        let (holds, message) = condition_matcher(m);
        all.push(holds);
        first.get_or_insert_with(|| verdict("True", "MatchedCondition", &message));
    }
    for m in &multi.healthy.match_fields {
        let (holds, message) = field_matcher(m)?;
        all.push(holds);
        first.get_or_insert_with(|| verdict("True", "MatchedField", &message));
    }
    expressions.push(format!(
        "{}\n  ? {}\n  : {}",
        all.join("\n    && "),
        first.unwrap_or_default(),
        verdict("Unknown", "NoMatchesFulfilled", "''")
    ));
    Ok(expressions)
}

/// The rule setting `condition` for a health rule.
pub fn convert(rule: &HealthRule, condition: &str) -> Result<ConditionRule, String> {
    Ok(ConditionRule {
        condition: condition.to_string(),
        type_: ConditionRuleType::Cel,
        cel_expressions: rule_expressions(rule)?
            .into_iter()
            .map(CelExpression::new)
            .collect(),
        ..Default::default()
    })
}

/// The health rule and the stamped kind of a template document (`spec.healthRule`,
/// `spec.template.apiVersion`/`kind`), or of a bare `{healthRule: ...}`.
pub fn from_document(
    doc: &serde_json::Value,
) -> Result<(HealthRule, Option<(String, String)>), String> {
    let rule = doc
        .pointer("/spec/healthRule")
        .or_else(|| doc.get("healthRule"))
        .ok_or("no spec.healthRule or healthRule")?;
    let rule: HealthRule =
        serde_json::from_value(rule.clone()).map_err(|e| format!("healthRule: {e}"))?;
    let kind = doc.pointer("/spec/template").and_then(|t| {
        Some((
            t.get("apiVersion")?.as_str()?.to_string(),
            t.get("kind")?.as_str()?.to_string(),
        ))
    });
    Ok((rule, kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse() {
        assert_eq!(
            parse_path(r#"status.conditions[?(@.type=="ReconcileFailed")].status"#).unwrap(),
            vec![
                PathStep::Field("status".into()),
                PathStep::Field("conditions".into()),
                PathStep::Filter(vec!["type".into()], "ReconcileFailed".into()),
                PathStep::Field("status".into()),
            ]
        );
        assert_eq!(
            parse_path(".status.loadBalancer").unwrap(),
            vec![
                PathStep::Field("status".into()),
                PathStep::Field("loadBalancer".into())
            ]
        );
        assert_eq!(
            parse_path("{.metadata.annotations['a/b'][0]}").unwrap(),
            vec![
                PathStep::Field("metadata".into()),
                PathStep::Field("annotations".into()),
                PathStep::Field("a/b".into()),
                PathStep::Index(0),
            ]
        );
        assert!(parse_path("status[?(@.x > 1)]").is_err());
        assert!(parse_path("").is_err());
    }

    #[test]
    fn a_rule_must_set_exactly_one_way() {
        assert!(rule_expressions(&HealthRule::default()).is_err());
        let bad_reason = HealthRule {
            single_condition_type: Some("example.com/Ready".into()),
            ..Default::default()
        };
        assert!(rule_expressions(&bad_reason).is_err());
    }
}
