//! `work-agent rules`: the rule library, ready to paste into a ManifestWork.
//!
//! Exit codes: 0 printed; 1 no entry of that name; 2 the library itself does not decode.

use std::process::ExitCode;

use crate::rule_library::{self, LibraryRule};

/// Arguments of `work-agent rules`.
#[derive(clap::Args, Debug)]
pub struct RulesArgs {
    #[command(subcommand)]
    command: RulesCommand,
}

#[derive(clap::Subcommand, Debug)]
enum RulesCommand {
    /// List the library's entries.
    List,
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

/// The `rules list` table: name, kinds, description.
pub fn list_text(rules: &[LibraryRule]) -> String {
    let width = rules.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for rule in rules {
        let kinds = if rule.kinds.is_empty() {
            "any kind".to_string()
        } else {
            rule.kinds
                .iter()
                .map(|k| format!("{} {}", k.api_version, k.kind))
                .collect::<Vec<_>>()
                .join(", ")
        };
        out.push_str(&format!("{:width$}  {kinds}\n", rule.name));
    }
    out
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
