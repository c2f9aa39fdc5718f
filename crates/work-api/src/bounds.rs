//! The bounds and validation rules the schema carries: what one work may ask of the agent.

/// Most manifestConfigs one work may have; bounds the cost of the CEL rules inside them.
pub const MAX_MANIFEST_CONFIGS: i64 = 256;
/// Most condition rules one manifestConfig may have; bounds the cost of the uniqueness rule.
pub const MAX_CONDITION_RULES: i64 = 64;
/// Most CEL expressions one condition rule may have; with the per-manifest cost budget of the
/// agent, it bounds the work one manifest's rules can ask for.
pub const MAX_CEL_EXPRESSIONS: i64 = 64;
/// Longest condition type a rule may name (the limit of `metav1.Condition.type`).
pub const MAX_CONDITION_TYPE_LEN: i64 = 316;
/// A DNS-1123 subdomain, as upstream validates ServiceAccount names.
pub const DNS1123_SUBDOMAIN: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)$";

/// A CEL rule must name its condition (upstream's rule; `has()` because clients may omit it).
pub const RULE_CEL_NEEDS_CONDITION: &str =
    "self.type != 'CEL' || (has(self.condition) && self.condition != '')";

/// Exact duplicates are already refused by the list-map key; what is left is an unnamed
/// well-known rule (which sets `Complete`) next to a rule named `Complete`.
pub const RULE_UNIQUE_CONDITIONS: &str = "!(self.exists(r, !has(r.condition) || r.condition == '') \
     && self.exists(r, has(r.condition) && r.condition == 'Complete'))";
