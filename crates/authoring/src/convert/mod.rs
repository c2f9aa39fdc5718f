//! Condition rules from the health checks of other tools: Flux `healthCheckExprs`,
//! Cartographer `healthRule`, kapp-controller's health of core kinds.

pub mod cartographer;
pub mod cel_rewrite;
pub mod command;
pub mod flux;
pub mod kapp;

use work_api::{ConditionRule, ManifestConfigOption, ResourceIdentifier};

use crate::rule_library::plural;

/// A `manifestConfigs` entry selecting every object of `apiVersion`/`kind`, with `rules`.
pub fn manifest_config(
    api_version: &str,
    kind: &str,
    rules: Vec<ConditionRule>,
) -> ManifestConfigOption {
    ManifestConfigOption {
        resource_identifier: ResourceIdentifier {
            group: api_version
                .rsplit_once('/')
                .map_or("", |(g, _)| g)
                .to_string(),
            resource: plural(api_version, kind),
            name: "*".to_string(),
            namespace: "*".to_string(),
        },
        condition_rules: rules,
        ..Default::default()
    }
}

/// A CEL string literal holding `text`.
pub fn cel_string(text: &str) -> String {
    let mut out = String::from("'");
    for ch in text.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}
