//! `work-agent rules`: the rule library, ready to paste into a ManifestWork, written into one
//! (`add`), or printed as the catalog's documentation (`docs`).
//!
//! Exit codes: 0 printed (or the work written); 1 no entry of that name, or a work file that is
//! not a ManifestWork this command can edit; 2 the library itself does not decode, or a file
//! cannot be read or written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use conditions::Evaluator;
use serde_json::Value;
use work_api::{ManifestConfigOption, ManifestWork, ResourceIdentifier};

use crate::lint::selects;
use crate::rule_library::{self, LibraryRule};
use work_semantics::manifests::ManifestId;

/// Arguments of `work-agent rules`.
#[derive(clap::Args, Debug)]
pub struct RulesArgs {
    #[command(subcommand)]
    command: RulesCommand,
}

#[derive(clap::Subcommand, Debug)]
enum RulesCommand {
    /// List the library's entries, grouped by project.
    List,
    /// Print the catalog as Markdown (`docs/rules.md` is this output).
    Docs,
    /// Write the library's rules into a ManifestWork file for every manifest whose kind has an
    /// entry and that has no condition rules yet; the rest of the file is kept as it is.
    Add {
        /// The ManifestWork file (one document, block-style YAML under `spec`).
        file: PathBuf,
        /// Print the edited file instead of writing it.
        #[arg(long)]
        stdout: bool,
    },
    /// Print one entry's `manifestConfigs` with its `conditionRules`.
    Show {
        /// The entry's name (see `rules list`).
        name: String,
        /// text: the rules with a comment saying what they check; yaml: the YAML alone.
        #[arg(long, value_enum, default_value = "text")]
        output: ShowOutput,
    },
}

/// How `rules show` prints.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShowOutput {
    /// YAML with comments.
    Text,
    /// YAML only.
    Yaml,
}

/// The project heading an entry is listed under; entries for any kind are listed last.
fn project_of(rule: &LibraryRule) -> String {
    if rule.kinds.is_empty() {
        "Generic fallbacks (any kind)".to_string()
    } else if rule.project.is_empty() {
        "Other".to_string()
    } else {
        rule.project.clone()
    }
}

/// The entries grouped by project, in name order, the fallbacks last.
fn by_project(rules: &[LibraryRule]) -> Vec<(String, Vec<&LibraryRule>)> {
    let mut groups: BTreeMap<(bool, String), Vec<&LibraryRule>> = BTreeMap::new();
    for rule in rules {
        groups
            .entry((rule.kinds.is_empty(), project_of(rule).to_lowercase()))
            .or_default()
            .push(rule);
    }
    groups
        .into_values()
        .map(|mut entries| {
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            (project_of(entries[0]), entries)
        })
        .collect()
}

/// What an entry's kinds are, in one line.
fn kinds_text(rule: &LibraryRule) -> String {
    if !rule.kinds.is_empty() {
        let mut out: Vec<String> = Vec::new();
        let mut last_version = "";
        for k in &rule.kinds {
            if k.api_version == last_version {
                out.push(k.kind.clone());
            } else {
                out.push(format!("{} {}", k.api_version, k.kind));
                last_version = &k.api_version;
            }
        }
        out.join(", ")
    } else if rule.group_suffixes.is_empty() {
        "any kind".to_string()
    } else {
        format!("any kind in groups *{}", rule.group_suffixes.join(", *"))
    }
}

/// The conditions an entry's rules set (`Healthy`, `Healthy, Complete`).
fn conditions_text(rule: &LibraryRule) -> String {
    rule.condition_rules
        .iter()
        .map(|r| r.condition_type())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `rules list` table: entries grouped by project, with the conditions they set (those
/// with `Complete` are for run-once kinds) and their kinds.
pub fn list_text(rules: &[LibraryRule]) -> String {
    let width = rules.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let cwidth = rules
        .iter()
        .map(|r| conditions_text(r).len())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (project, entries) in by_project(rules) {
        let _ = writeln!(out, "{project}");
        for rule in entries {
            let _ = writeln!(
                out,
                "  {:width$}  {:cwidth$}  {}",
                rule.name,
                conditions_text(rule),
                kinds_text(rule)
            );
        }
    }
    let kinds: usize = rules.iter().map(|r| r.kinds.len()).sum();
    let complete = rules.iter().filter(|r| r.gives_complete()).count();
    let _ = writeln!(
        out,
        "{} entries for {kinds} kinds; {complete} give Complete (run-once kinds)",
        rules.len()
    );
    let _ = writeln!(out, "{}", argocd_coverage_text(rules));
    out
}

/// How many of the kinds Argo CD's health catalog checks have an entry here.
pub fn argocd_coverage_text(rules: &[LibraryRule]) -> String {
    format!(
        "{} of the {} kinds Argo CD's health catalog checks have an entry (written for the kind or a fallback for its group)",
        crate::rule_library::argocd_kinds_covered(rules).len(),
        crate::rule_library::argocd_health_kinds().count()
    )
}

/// The `manifestConfigs` entries of `rule` as YAML (a list, ready to paste under
/// `spec.manifestConfigs`).
pub fn show_yaml(rule: &LibraryRule) -> Result<String, String> {
    serde_norway::to_string(&rule.manifest_configs()).map_err(|e| e.to_string())
}

/// `show_yaml` preceded by comments saying what the rule checks.
pub fn show_text(rule: &LibraryRule) -> Result<String, String> {
    let mut out = String::new();
    for line in textwrap(&rule.description, 96) {
        out.push_str(&format!("# {line}\n"));
    }
    if let Some(docs) = &rule.docs {
        out.push_str(&format!("# Status reference: {docs}\n"));
    }
    if rule.kinds.is_empty() {
        out.push_str(
            "# A fallback: prefer an entry written for your kind (`work-agent rules list`).\n",
        );
        out.push_str("# Set group and resource to the kind you apply.\n");
    }
    out.push_str("# Paste under spec.manifestConfigs; narrow name and namespace as needed.\n");
    out.push_str(&show_yaml(rule)?);
    Ok(out)
}

fn textwrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

/// Runs the subcommand.
pub fn main(args: RulesArgs) -> ExitCode {
    let rules = match rule_library::load() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("work-agent rules: {e}");
            return ExitCode::from(2);
        }
    };
    match args.command {
        RulesCommand::List => {
            print!("{}", list_text(&rules));
            ExitCode::SUCCESS
        }
        RulesCommand::Docs => {
            print!("{}", docs_markdown(&rules));
            ExitCode::SUCCESS
        }
        RulesCommand::Add { file, stdout } => add_main(&rules, &file, stdout),
        RulesCommand::Show { name, output } => {
            let Some(rule) = rules.iter().find(|r| r.name == name) else {
                let names: Vec<&str> = rules.iter().map(|r| r.name.as_str()).collect();
                eprintln!(
                    "work-agent rules: no entry {name:?}; entries: {}",
                    names.join(", ")
                );
                return ExitCode::from(1);
            };
            let printed = match output {
                ShowOutput::Text => show_text(rule),
                ShowOutput::Yaml => show_yaml(rule),
            };
            match printed {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("work-agent rules: printing {name}: {e}");
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// A Markdown table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `Status Reason` of the condition `condition` the entry's rules give `object`.
fn verdict(rule: &LibraryRule, object: &Value, condition: &str) -> Option<(String, String)> {
    let conditions = Evaluator::shared().evaluate_manifest(&rule.condition_rules, object);
    conditions
        .into_iter()
        .find(|c| c.type_ == condition)
        .map(|c| {
            let reason = c
                .reason
                .strip_prefix("ConditionRule")
                .unwrap_or(&c.reason)
                .to_string();
            (format!("{} `{reason}`", c.status.as_str()), c.message)
        })
}

/// The catalog as Markdown: an index of kinds, then per project each entry with what it checks
/// and, from its fixtures run through the agent's evaluator, what it reports in each state.
pub fn docs_markdown(rules: &[LibraryRule]) -> String {
    let mut out = String::new();
    out.push_str(DOCS_INTRO);
    let mut index: Vec<(String, String, String, &LibraryRule)> = rules
        .iter()
        .flat_map(|r| {
            r.kinds
                .iter()
                .map(move |k| (project_of(r), k.kind.clone(), k.api_version.clone(), r))
        })
        .collect();
    index.sort_by(|a, b| (a.0.to_lowercase(), &a.2, &a.1).cmp(&(b.0.to_lowercase(), &b.2, &b.1)));
    let _ = writeln!(
        out,
        "## Kinds\n\n{} kinds have an entry written for them ({} entries; {} more are fallbacks for \
         any kind). {}.\n\n| project | apiVersion | kind | entry | conditions |\n|---|---|---|---|---|",
        index.len(),
        rules.iter().filter(|r| !r.kinds.is_empty()).count(),
        rules.iter().filter(|r| r.kinds.is_empty()).count(),
        argocd_coverage_text(rules)
    );
    for (project, kind, api_version, rule) in &index {
        let _ = writeln!(
            out,
            "| {project} | `{api_version}` | {kind} | [`{}`](#{}) | {} |",
            rule.name,
            rule.name,
            conditions_text(rule)
        );
    }
    for (project, entries) in by_project(rules) {
        let _ = writeln!(out, "\n## {project}");
        for rule in entries {
            let _ = writeln!(out, "\n### {}\n", rule.name);
            let _ = writeln!(out, "{}\n", rule.description.trim());
            let _ = writeln!(out, "- Kinds: {}", kinds_text(rule));
            let _ = writeln!(out, "- Conditions: {}", conditions_text(rule));
            if let Some(docs) = &rule.docs {
                let _ = writeln!(out, "- Status reference: <{docs}>");
            }
            let _ = writeln!(out, "- Print it: `work-agent rules show {}`\n", rule.name);
            let complete = rule.gives_complete();
            if complete {
                out.push_str(
                    "| state | kind | Healthy | Complete | message |\n|---|---|---|---|---|\n",
                );
            } else {
                out.push_str("| state | kind | Healthy | message |\n|---|---|---|---|\n");
            }
            for fixture in &rule.fixtures {
                let kind = fixture.object["kind"].as_str().unwrap_or("?");
                let first = rule
                    .condition_rules
                    .first()
                    .map(|r| r.condition_type())
                    .unwrap_or("Healthy");
                let (healthy, message) = verdict(rule, &fixture.object, first).unwrap_or_default();
                let mut message = cell(&message);
                if let Some(note) = &fixture.note {
                    let _ = write!(message, " — {}", cell(note));
                }
                if complete {
                    let (done, _) =
                        verdict(rule, &fixture.object, work_api::condition_types::COMPLETE)
                            .unwrap_or_default();
                    let _ = writeln!(
                        out,
                        "| {} | {kind} | {healthy} | {done} | {message} |",
                        fixture.state
                    );
                } else {
                    let _ = writeln!(
                        out,
                        "| {} | {kind} | {healthy} | {message} |",
                        fixture.state
                    );
                }
            }
        }
    }
    out
}

const DOCS_INTRO: &str = "# The rule library

<!-- Generated by `work-agent rules docs > docs/rules.md` from crates/authoring/rules/*.yaml;
     do not edit by hand (a test checks that this file is current). -->

Condition rules for the custom resources platform teams deploy, each tested against objects in
every state its controller produces (the tables below are those objects run through the
agent's evaluator). `work-agent rules show NAME` prints an entry ready to paste under
`spec.manifestConfigs`; `work-agent rules add WORK.yaml` writes the matching entries into a
ManifestWork file for every manifest that has no condition rules yet.

Every entry sets `Healthy`; entries for run-once kinds (pipelines, workflows, backups,
training jobs) also set `Complete`, so the agent's sticky `Complete` and
`ttlSecondsAfterFinished` work for them as for Jobs. The reasons are the same across the
library (the agent prefixes them with `ConditionRule`):

| condition | status | reason | meaning |
|---|---|---|---|
| `Healthy` | True | `Ready` | the controller reports the resource ready (for a run-once kind: it succeeded) |
| `Healthy` | False | `Progressing` | the controller is still working on it (creating, rolling out, running) |
| `Healthy` | False | `Failed` | the controller reports a failure; the message is the controller's |
| `Healthy` | Unknown | `NoStatus` | the controller has not reported a status yet |
| `Healthy` | Unknown | `UnknownState` | the controller reports a state the entry does not know (never read as a verdict) |
| `Healthy` | Unknown | `StaleStatus` | the status is for an older generation and would read as ready (the agent's own guard gives the same reason when `status.observedGeneration` is behind; a failure reported on a stale status is still `Failed`) |
| `Healthy` | Unknown | `Suspended` | the resource is suspended or paused on purpose: neither failed nor known to be current |
| `Complete` | True | `Succeeded` | a run-once resource finished successfully; `Complete` is then sticky |
| `Complete` | False | `Failed` | it finished and failed; the message is the controller's (the work does not complete, so its TTL does not delete a failure you have not seen) |
| `Complete` | False | `Running` | it has not finished (pending, running, suspended) |
| `Complete` | Unknown | `NoStatus` / `StaleStatus` | as for `Healthy` |

Entries without kinds are fallbacks: `rules add` and `lint` use them only for a kind no entry is
written for, and only when they name a group suffix (ACK, Config Connector, Azure Service
Operator, Crossplane managed resources); they are printed with a `<group>`/`<resource>` to fill
in. `kstatus-ready` fits any kind that follows the Kubernetes status conventions, and
`crossplane` any claim or composite resource (their groups are your own).

";

/// What `rules add` did for one manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddNote {
    /// `spec.workload.manifests[i]`.
    pub path: String,
    /// What was done or why nothing was.
    pub message: String,
    /// Whether rules were added for it.
    pub added: bool,
}

/// `text` (one ManifestWork, block-style YAML) with a `manifestConfigs` entry added for every
/// manifest whose kind has a library entry and that no config gives condition rules yet;
/// everything else in the text is kept byte for byte.
pub fn add_to_work(text: &str, rules: &[LibraryRule]) -> Result<(String, Vec<AddNote>), String> {
    let docs = crate::eval::parse_documents(text)?;
    let [doc] = docs.as_slice() else {
        return Err(format!(
            "expected one ManifestWork in the file, found {} documents",
            docs.len()
        ));
    };
    if doc.get("kind").and_then(Value::as_str) != Some("ManifestWork") {
        return Err("the document is not a ManifestWork".to_string());
    }
    let work: ManifestWork = serde_json::from_value(doc.clone())
        .map_err(|e| format!("not a valid ManifestWork: {e}"))?;
    let mut notes = Vec::new();
    let mut configs: Vec<ManifestConfigOption> = Vec::new();
    for (i, manifest) in work.spec.workload.manifests.iter().enumerate() {
        let path = format!("spec.workload.manifests[{i}]");
        let Ok(id) = ManifestId::of(&manifest.0) else {
            continue;
        };
        let Some(rule) = rule_library::select(rules.to_vec(), &id.group, &id.kind)
            .into_iter()
            .next()
        else {
            continue;
        };
        let label = if id.namespace.is_empty() {
            format!("{} {}", id.kind, id.name)
        } else {
            format!("{} {}/{}", id.kind, id.namespace, id.name)
        };
        if let Some(j) = work
            .spec
            .manifest_configs
            .iter()
            .position(|c| !c.condition_rules.is_empty() && selects(c, &id))
        {
            notes.push(AddNote {
                path,
                message: format!(
                    "{label}: kept; spec.manifestConfigs[{j}] already gives it condition rules (the first config with rules wins; `work-agent rules show {}` prints the library's)",
                    rule.name
                ),
                added: false,
            });
            continue;
        }
        configs.push(ManifestConfigOption {
            resource_identifier: ResourceIdentifier {
                group: id.group.clone(),
                resource: rule_library::plural(&id.api_version, &id.kind),
                name: id.name.clone(),
                namespace: id.namespace.clone(),
            },
            condition_rules: rule.condition_rules.clone(),
            ..Default::default()
        });
        notes.push(AddNote {
            path,
            message: format!("{label}: added {} ({})", rule.name, conditions_text(&rule)),
            added: true,
        });
    }
    if configs.is_empty() {
        return Ok((text.to_string(), notes));
    }
    let items = serde_norway::to_string(&configs).map_err(|e| e.to_string())?;
    let edited = insert_configs(text, &items)?;
    // The edit is textual; check that it means exactly "these configs appended" before anyone
    // writes it over the author's file.
    let mut expected = doc.clone();
    let new_configs = serde_json::to_value(&configs).map_err(|e| e.to_string())?;
    if let (Some(spec), Value::Array(new)) = (
        expected.get_mut("spec").and_then(Value::as_object_mut),
        new_configs,
    ) {
        let list = spec
            .entry("manifestConfigs")
            .or_insert_with(|| Value::Array(Vec::new()));
        if list.is_null() {
            *list = Value::Array(Vec::new());
        }
        if let Some(list) = list.as_array_mut() {
            list.extend(new);
        }
    }
    let reparsed = crate::eval::parse_documents(&edited)?;
    if reparsed.as_slice() != [expected] {
        return Err(
            "cannot add the rules without rewriting the file (is spec or manifestConfigs in flow style?); paste the output of `work-agent rules show NAME` instead"
                .to_string(),
        );
    }
    Ok((edited, notes))
}

fn indent_of(line: &str) -> usize {
    line.len() - line.trim_start_matches(' ').len()
}

fn is_content(line: &str) -> bool {
    let t = line.trim();
    !t.is_empty() && !t.starts_with('#')
}

/// What follows `key:` on a line, without a trailing comment.
fn after_key<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let rest = line.trim_start().strip_prefix(key)?.strip_prefix(':')?;
    let rest = rest.split(" #").next().unwrap_or(rest).trim();
    Some(rest)
}

/// Inserts `items` (a YAML list at column 0) at the end of `spec.manifestConfigs`, creating the
/// key at the end of `spec` when it is absent.
fn insert_configs(text: &str, items: &str) -> Result<String, String> {
    let mut lines: Vec<String> = text.split_inclusive('\n').map(str::to_string).collect();
    let doc_end = |l: &str| l.starts_with("---") || l.starts_with("...");
    let spec = lines
        .iter()
        .position(|l| indent_of(l) == 0 && after_key(l, "spec") == Some(""))
        .ok_or("no block-style `spec:` at the top level of the file")?;
    let spec_end = lines
        .iter()
        .enumerate()
        .skip(spec + 1)
        .find(|(_, l)| is_content(l) && (indent_of(l) == 0 || doc_end(l)))
        .map_or(lines.len(), |(i, _)| i);
    let child = lines[spec + 1..spec_end]
        .iter()
        .find(|l| is_content(l))
        .map(|l| indent_of(l))
        .ok_or("`spec` is empty")?;
    let last_content = |from: usize, to: usize, lines: &[String]| {
        (from..to)
            .rev()
            .find(|&i| is_content(&lines[i]))
            .unwrap_or(from)
    };
    let existing = (spec + 1..spec_end).find(|&i| {
        indent_of(&lines[i]) == child && after_key(&lines[i], "manifestConfigs").is_some()
    });
    let (at, item_indent, header) = match existing {
        Some(m) => {
            let rest = after_key(&lines[m], "manifestConfigs").unwrap_or_default();
            match rest {
                "" | "[]" | "null" | "~" => {}
                _ => {
                    return Err(
                        "spec.manifestConfigs is in flow style; write it as a block list"
                            .to_string(),
                    );
                }
            }
            let first_item = (m + 1..spec_end).find(|&i| is_content(&lines[i]));
            let item_indent = match first_item {
                Some(i)
                    if rest.is_empty()
                        && indent_of(&lines[i]) >= child
                        && lines[i].trim_start().starts_with('-') =>
                {
                    indent_of(&lines[i])
                }
                _ => child + 2,
            };
            if !rest.is_empty() {
                lines[m] = format!("{}manifestConfigs:\n", " ".repeat(child));
                (m + 1, item_indent, None)
            } else {
                let end = (m + 1..spec_end)
                    .find(|&i| {
                        let l = &lines[i];
                        is_content(l)
                            && (indent_of(l) < item_indent
                                || (indent_of(l) == item_indent
                                    && !l.trim_start().starts_with('-')))
                    })
                    .unwrap_or(spec_end);
                (last_content(m, end, &lines) + 1, item_indent, None)
            }
        }
        None => (
            last_content(spec, spec_end, &lines) + 1,
            child + 2,
            Some(format!("{}manifestConfigs:\n", " ".repeat(child))),
        ),
    };
    let mut block = header.unwrap_or_default();
    let pad = " ".repeat(item_indent);
    for line in items.lines() {
        if line.is_empty() {
            block.push('\n');
        } else {
            let _ = writeln!(block, "{pad}{line}");
        }
    }
    if at > 0 && !lines[at - 1].ends_with('\n') {
        lines[at - 1].push('\n');
    }
    lines.insert(at, block);
    Ok(lines.concat())
}

fn add_main(rules: &[LibraryRule], file: &std::path::Path, stdout: bool) -> ExitCode {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("work-agent rules add: {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let (edited, notes) = match add_to_work(&text, rules) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("work-agent rules add: {}: {e}", file.display());
            return ExitCode::from(1);
        }
    };
    for note in &notes {
        eprintln!("{}: {}: {}", file.display(), note.path, note.message);
    }
    let added = notes.iter().filter(|n| n.added).count();
    if stdout {
        print!("{edited}");
    } else if added > 0
        && let Err(e) = std::fs::write(file, &edited)
    {
        eprintln!("work-agent rules add: writing {}: {e}", file.display());
        return ExitCode::from(2);
    }
    eprintln!("{added} manifest(s) given library rules");
    ExitCode::SUCCESS
}
