//! Condition rules: how a manifest's live object becomes conditions.

use std::borrow::Cow;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One condition rule of a manifestConfig.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": crate::bounds::RULE_CEL_NEEDS_CONDITION,
    "message": "Condition is required for CEL rules"
}]))]
pub struct ConditionRule {
    /// Condition type set from this rule. Required for CEL; empty means `Complete` for well-known rules.
    #[serde(default)]
    #[schemars(extend("maxLength" = crate::bounds::MAX_CONDITION_TYPE_LEN))]
    pub condition: String,
    /// How the rule is evaluated.
    #[serde(rename = "type")]
    pub type_: ConditionRuleType,
    /// CEL expressions, AND-ed; an empty list is True.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("maxItems" = crate::bounds::MAX_CEL_EXPRESSIONS))]
    pub cel_expressions: Vec<CelExpression>,
    /// Message used instead of the default one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// CEL expression (variables `object` and `result`) that yields the message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_expression: Option<String>,
}

impl ConditionRule {
    /// A CEL rule setting `condition` when every expression of `expressions` is true.
    pub fn cel<'a>(condition: &str, expressions: impl IntoIterator<Item = &'a str>) -> Self {
        Self {
            condition: condition.to_string(),
            type_: ConditionRuleType::Cel,
            cel_expressions: expressions.into_iter().map(CelExpression::new).collect(),
            ..Self::default()
        }
    }

    /// The condition type this rule sets: `condition`, or `Complete` for an unnamed well-known rule.
    pub fn condition_type(&self) -> &str {
        if self.condition.is_empty() && self.type_ == ConditionRuleType::WellKnownConditions {
            crate::condition_types::COMPLETE
        } else {
            &self.condition
        }
    }
}

/// How a condition rule is evaluated.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ConditionRuleType {
    /// Built-in rules for well-known kinds (`WellKnownConditions`, alias `WellKnownCompletions`).
    #[default]
    WellKnownConditions,
    /// User-written CEL expressions.
    Cel,
    /// A type this agent does not know; the rule yields a `ConditionRuleInvalid` condition.
    Unknown(String),
}

impl ConditionRuleType {
    /// The canonical spelling.
    pub fn as_str(&self) -> &str {
        match self {
            Self::WellKnownConditions => "WellKnownConditions",
            Self::Cel => "CEL",
            Self::Unknown(s) => s,
        }
    }
}

impl From<&str> for ConditionRuleType {
    fn from(s: &str) -> Self {
        match s {
            "WellKnownConditions" | "WellKnownCompletions" => Self::WellKnownConditions,
            "CEL" => Self::Cel,
            other => Self::Unknown(other.to_string()),
        }
    }
}

impl Serialize for ConditionRuleType {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ConditionRuleType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = Cow::<str>::deserialize(d)?;
        Ok(Self::from(s.as_ref()))
    }
}

impl JsonSchema for ConditionRuleType {
    fn schema_name() -> Cow<'static, str> {
        "ConditionRuleType".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "string",
            "enum": ["WellKnownConditions", "WellKnownCompletions", "CEL"],
            "description": "How the rule is evaluated: WellKnownConditions (alias WellKnownCompletions) or CEL."
        })
    }
}

/// One CEL expression of a rule; decodes from a string or from `{expression: <string>}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CelExpression {
    /// The expression source.
    pub expression: String,
}

impl CelExpression {
    /// An expression from its source text.
    pub fn new(expression: impl Into<String>) -> Self {
        Self {
            expression: expression.into(),
        }
    }
}

impl Serialize for CelExpression {
    // Upstream hubs store plain strings, so that is what we write back.
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.expression)
    }
}

/// Source given to an item that is neither a string nor `{expression: <string>}`: it never
/// compiles, so the rule reports the bad item instead of the whole ManifestWork failing to decode
/// (our CRD cannot check the item, see the schema below).
pub const INVALID_CEL_ITEM_PREFIX: &str = "<invalid celExpressions item>";

impl CelExpression {
    /// True when this item was neither a string nor `{expression: <string>}` on the wire.
    pub fn is_invalid_item(&self) -> bool {
        self.expression.starts_with(INVALID_CEL_ITEM_PREFIX)
    }
}

impl<'de> Deserialize<'de> for CelExpression {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        let expression = match &value {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Object(map) => match map.get("expression") {
                Some(serde_json::Value::String(s)) => s.clone(),
                _ => invalid_item(&value),
            },
            _ => invalid_item(&value),
        };
        Ok(Self { expression })
    }
}

fn invalid_item(value: &serde_json::Value) -> String {
    format!(
        "{INVALID_CEL_ITEM_PREFIX} {value} (must be a string or an object {{expression: <string>}})"
    )
}

impl JsonSchema for CelExpression {
    fn schema_name() -> Cow<'static, str> {
        "CelExpression".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // A structural schema cannot say "string or object", and the API server cannot run CEL
        // on an untyped node, so the item is left open; the agent reports a bad item itself.
        json_schema!({
            "description": "A CEL expression: a string, or an object {expression: <string>}.",
            "x-kubernetes-preserve-unknown-fields": true
        })
    }
}
