//! The rule library: ready-to-paste `conditionRules` for popular resources, each with fixtures
//! (real-shaped objects in each state) that the tests run through the agent's evaluator.
//!
//! Entries are YAML files under `crates/authoring/rules/`, embedded at build time: adding an
//! entry is adding a file.

use kube::core::{ApiResource, GroupVersionKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use work_api::{ConditionRule, ManifestConfigOption, ResourceIdentifier};

include!(concat!(env!("OUT_DIR"), "/rule_library_files.rs"));

/// The kinds Argo CD's health catalog checks, one `group/kind` a line (`_.<suffix>/_` for every
/// kind of the groups ending in `.<suffix>`), with `#` comments: what `rules list` measures the
/// library's breadth against.
pub const ARGOCD_HEALTH_KINDS: &str = include_str!("../argocd-health-kinds.txt");

/// The `group/kind` lines of [`ARGOCD_HEALTH_KINDS`].
pub fn argocd_health_kinds() -> impl Iterator<Item = &'static str> {
    ARGOCD_HEALTH_KINDS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// Those of Argo CD's health-checked kinds that `rules add` finds an entry for (written for the
/// kind, or a fallback for its group; for `_.<suffix>/_`, a fallback for the suffix).
pub fn argocd_kinds_covered(rules: &[LibraryRule]) -> Vec<&'static str> {
    argocd_health_kinds()
        .filter(|line| {
            let (group, kind) = line.rsplit_once('/').unwrap_or((line, ""));
            match group.strip_prefix('_') {
                Some(suffix) if kind == "_" => rules.iter().any(|r| {
                    r.group_suffixes
                        .iter()
                        .any(|s| s == suffix || suffix.ends_with(s.as_str()))
                }),
                _ => !select(rules.to_vec(), group, kind).is_empty(),
            }
        })
        .collect()
}

/// A kind a library entry is written for.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct KindRef {
    /// `group/version` (or `version` for the core group).
    pub api_version: String,
    /// The kind.
    pub kind: String,
}

impl KindRef {
    /// The API group (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version.rsplit_once('/').map_or("", |(g, _)| g)
    }

    /// The resource (plural) as kube derives it from the kind.
    pub fn resource(&self) -> String {
        plural(&self.api_version, &self.kind)
    }
}

/// The plural resource name kube derives for `apiVersion`/`kind`.
pub fn plural(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)).plural
}

/// What a fixture's condition must be.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Expect {
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// The reason the rule returns (without the `ConditionRule` prefix).
    pub reason: String,
    /// The message, when the fixture pins it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One object in one state, with the condition the entry's rule must give it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
pub struct Fixture {
    /// One of [`REQUIRED_STATES`] or [`OPTIONAL_STATES`].
    pub state: String,
    /// Why the fixture expects what it expects, when it is not obvious.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The expected `Healthy` condition (the entry's first rule).
    pub expect: Expect,
    /// The expected `Complete` condition, for entries with a `Complete` rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<Expect>,
    /// The live object.
    pub object: Value,
}

/// The states every entry has a fixture for.
pub const REQUIRED_STATES: &[&str] = &["no-status", "progressing", "healthy", "failed", "stale"];

/// States an entry has a fixture for when its kinds have them (`spec.suspend`, paused; a state
/// the controller reports that the entry does not know).
pub const OPTIONAL_STATES: &[&str] = &["suspended", "unknown"];

/// One library entry.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LibraryRule {
    /// The name `rules show` takes.
    pub name: String,
    /// The project whose controller reports the status (`rules list` groups by it).
    #[serde(default)]
    pub project: String,
    /// What the rule checks.
    pub description: String,
    /// The kinds it is written for (empty: any kind, e.g. the kstatus rule or Crossplane's
    /// user-defined kinds).
    #[serde(default)]
    pub kinds: Vec<KindRef>,
    /// For an entry without kinds: group suffixes (`.services.k8s.aws`) whose every kind it
    /// fits, as a fallback after the entries written for the kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_suffixes: Vec<String>,
    /// Where the status shape is documented.
    #[serde(default)]
    pub docs: Option<String>,
    /// The rules to paste.
    pub condition_rules: Vec<ConditionRule>,
    /// Objects in each state.
    #[serde(default)]
    pub fixtures: Vec<Fixture>,
}

impl LibraryRule {
    /// `manifestConfigs` entries selecting every object of the entry's kinds (or a placeholder
    /// identifier for kind-agnostic entries).
    pub fn manifest_configs(&self) -> Vec<ManifestConfigOption> {
        let identifiers: Vec<ResourceIdentifier> = if self.kinds.is_empty() {
            vec![ResourceIdentifier {
                group: "<group>".to_string(),
                resource: "<resource>".to_string(),
                name: "*".to_string(),
                namespace: "*".to_string(),
            }]
        } else {
            self.kinds
                .iter()
                .map(|k| ResourceIdentifier {
                    group: k.group().to_string(),
                    resource: k.resource(),
                    name: "*".to_string(),
                    namespace: "*".to_string(),
                })
                .collect()
        };
        identifiers
            .into_iter()
            .map(|resource_identifier| ManifestConfigOption {
                resource_identifier,
                condition_rules: self.condition_rules.clone(),
                ..Default::default()
            })
            .collect()
    }

    /// Whether the entry is written for this group and kind.
    pub fn covers(&self, group: &str, kind: &str) -> bool {
        self.kinds
            .iter()
            .any(|k| k.group() == group && k.kind == kind)
    }

    /// Whether the entry is a fallback for every kind of this group (by group suffix).
    pub fn covers_group(&self, group: &str) -> bool {
        self.group_suffixes
            .iter()
            .any(|s| group.ends_with(s.as_str()))
    }

    /// Whether the entry has a rule setting `Complete` (a run-once kind).
    pub fn gives_complete(&self) -> bool {
        self.condition_rules
            .iter()
            .any(|r| r.condition_type() == work_api::condition_types::COMPLETE)
    }
}

/// A library file that does not decode.
#[derive(Debug, thiserror::Error)]
#[error("rule library file {file}: {message}")]
pub struct LibraryError {
    /// The file name.
    pub file: String,
    /// What is wrong.
    pub message: String,
}

/// Every entry, in file-name order.
pub fn load() -> Result<Vec<LibraryRule>, LibraryError> {
    FILES
        .iter()
        .map(|(file, text)| {
            serde_norway::from_str::<LibraryRule>(text).map_err(|e| LibraryError {
                file: (*file).to_string(),
                message: e.to_string(),
            })
        })
        .collect()
}

/// The entry named `name`.
pub fn find(name: &str) -> Result<Option<LibraryRule>, LibraryError> {
    Ok(load()?.into_iter().find(|r| r.name == name))
}

/// The entries written for this group and kind; when there is none, the fallbacks for its
/// group (ACK, Config Connector, Azure Service Operator, Crossplane managed resources).
pub fn for_kind(group: &str, kind: &str) -> Vec<LibraryRule> {
    select(load().unwrap_or_default(), group, kind)
}

/// [`for_kind`] over a given list of entries.
pub fn select(rules: Vec<LibraryRule>, group: &str, kind: &str) -> Vec<LibraryRule> {
    let (written, rest): (Vec<_>, Vec<_>) = rules.into_iter().partition(|r| r.covers(group, kind));
    if !written.is_empty() {
        return written;
    }
    rest.into_iter().filter(|r| r.covers_group(group)).collect()
}
