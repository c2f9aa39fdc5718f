//! Where an object sits in a work: which manifest it is and which condition rules the agent
//! would evaluate for it (shared by `eval --work`, `explain` and `lint`).

use serde_json::Value;
use work_api::ManifestWork;

use work_semantics::manifests::{ManifestId, glob_match, settings_for};

/// The plural resource name of a kind, as discovery would most likely report it.
pub fn guess_plural(kind: &str) -> String {
    let lower = kind.to_ascii_lowercase();
    // Kinds whose resource is not the regular plural (core, metrics and common add-ons).
    const IRREGULAR: &[(&str, &str)] = &[
        ("endpoints", "endpoints"),
        ("podmetrics", "pods"),
        ("nodemetrics", "nodes"),
        ("securitycontextconstraints", "securitycontextconstraints"),
        ("chaos", "chaos"),
        ("person", "people"),
        ("child", "children"),
    ];
    if let Some((_, plural)) = IRREGULAR.iter().find(|(k, _)| *k == lower) {
        return (*plural).to_string();
    }
    let ends = |s: &str| lower.ends_with(s);
    if ends("s") || ends("x") || ends("z") || ends("ch") || ends("sh") {
        format!("{lower}es")
    } else if ends("y")
        && !lower
            .chars()
            .rev()
            .nth(1)
            .is_some_and(|c| "aeiou".contains(c))
    {
        format!("{}ies", &lower[..lower.len() - 1])
    } else {
        format!("{lower}s")
    }
}

/// Where an object sits in a work: its identity, ordinal and the rules the agent applies to it.
#[derive(Debug)]
pub struct Located {
    /// The object's identity.
    pub id: ManifestId,
    /// The resource (plural) the agent derives for its kind.
    pub resource: String,
    /// Its position among the work's manifests (0 when it is not one of them).
    pub ordinal: usize,
    /// Index of the manifestConfig whose conditionRules apply, if any.
    pub config_index: Option<usize>,
    /// The rules that apply (empty when none).
    pub rules: Vec<work_api::ConditionRule>,
    /// Notes for the author (no matching config, object not in the work, ...).
    pub notes: Vec<String>,
}

/// Finds `object` in `work` and the condition rules the agent would evaluate for it.
pub fn locate(work: &ManifestWork, object: &Value) -> Result<Located, String> {
    let id = ManifestId::of(object).map_err(|e| format!("object: {e}"))?;
    let resource = guess_plural(&id.kind);
    let mut notes = Vec::new();
    let ordinal = work
        .spec
        .workload
        .manifests
        .iter()
        .position(|m| ManifestId::of(&m.0).is_ok_and(|mid| same_object(&mid, &id)))
        .unwrap_or_else(|| {
            notes.push(format!(
                "the work has no manifest {}/{} {}; ordinal shown as 0",
                id.api_version,
                id.kind,
                qualified(&id)
            ));
            0
        });
    let settings = settings_for(
        &work.spec.manifest_configs,
        &id.group,
        &resource,
        &id.namespace,
        &id.name,
    );
    if settings.rules.is_empty() {
        notes.push(format!(
            "no manifestConfig with conditionRules matches group {:?}, resource {:?}, {}",
            id.group,
            resource,
            qualified(&id)
        ));
    }
    // The same choice settings_for makes: the first matching config that has rules.
    let config_index = work.spec.manifest_configs.iter().position(|c| {
        let rid = &c.resource_identifier;
        !c.condition_rules.is_empty()
            && rid.group == id.group
            && rid.resource == resource
            && glob_match(&rid.name, &id.name)
            && glob_match(&rid.namespace, &id.namespace)
    });
    Ok(Located {
        id,
        resource,
        ordinal,
        config_index,
        rules: settings.rules,
        notes,
    })
}

fn same_object(a: &ManifestId, b: &ManifestId) -> bool {
    a.group == b.group && a.kind == b.kind && a.namespace == b.namespace && a.name == b.name
}

fn qualified(id: &ManifestId) -> String {
    if id.namespace.is_empty() {
        format!("name {:?}", id.name)
    } else {
        format!("namespace {:?}, name {:?}", id.namespace, id.name)
    }
}

/// Whether `config` selects the manifest `id` (group, plural derived from the kind, name and
/// namespace globs).
pub fn selects(config: &work_api::ManifestConfigOption, id: &ManifestId) -> bool {
    let rid = &config.resource_identifier;
    rid.group == id.group
        && rid.resource == guess_plural(&id.kind)
        && glob_match(&rid.name, &id.name)
        && glob_match(&rid.namespace, &id.namespace)
}
