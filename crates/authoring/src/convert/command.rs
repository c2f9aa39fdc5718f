//! `work-agent convert`: condition rules from Flux `healthCheckExprs`, Cartographer
//! `healthRule` or kapp-style health, printed as `manifestConfigs` entries to paste.
//!
//! Exit codes: 0 converted; 2 the input cannot be read or converted.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::Value;
use work_api::{ManifestConfigOption, condition_types};

use crate::convert::{cartographer, flux, kapp, manifest_config};
use crate::eval::parse_documents;

/// Arguments of `work-agent convert`.
#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    /// The file to convert (YAML or JSON; `-` reads standard input): a Flux Kustomization or
    /// a list of healthCheckExprs entries; a Cartographer template with spec.healthRule; or
    /// manifests for kapp-style health.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// What the file holds (guessed from its content when not given).
    #[arg(long, value_enum)]
    pub from: Option<Source>,
    /// Condition type the rules set.
    #[arg(long, default_value = condition_types::HEALTHY)]
    pub condition: String,
    /// apiVersion of the stamped kind, for a Cartographer health rule without spec.template.
    #[arg(long)]
    pub api_version: Option<String>,
    /// Kind of the stamped resource, for a Cartographer health rule without spec.template.
    #[arg(long)]
    pub kind: Option<String>,
}

/// The shape of the input.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Flux healthCheckExprs.
    Flux,
    /// A Cartographer healthRule.
    Cartographer,
    /// Manifests whose kinds get kapp-style health.
    Kapp,
}

/// What to print: the entries and notes for the author.
#[derive(Debug, Default)]
pub struct Converted {
    /// `manifestConfigs` entries.
    pub configs: Vec<ManifestConfigOption>,
    /// Notes (kinds needing no rule, ...).
    pub notes: Vec<String>,
}

/// Guesses the source shape of the documents.
pub fn guess(docs: &[Value]) -> Source {
    let first = docs.first().cloned().unwrap_or(Value::Null);
    if first.pointer("/spec/healthCheckExprs").is_some()
        || first.get("healthCheckExprs").is_some()
        || first
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i.get("current").is_some()))
    {
        Source::Flux
    } else if first.pointer("/spec/healthRule").is_some() || first.get("healthRule").is_some() {
        Source::Cartographer
    } else {
        Source::Kapp
    }
}

/// Converts the documents of the input.
pub fn convert(docs: &[Value], args: &ConvertArgs) -> Result<Converted, String> {
    let source = args.from.unwrap_or_else(|| guess(docs));
    let mut out = Converted::default();
    match source {
        Source::Flux => {
            for doc in docs {
                let entries = flux::entries(doc)?;
                out.configs
                    .extend(flux::convert(&entries, &args.condition).map_err(|e| e.to_string())?);
            }
        }
        Source::Cartographer => {
            for doc in docs {
                let (rule, stamped) = cartographer::from_document(doc)?;
                let (api_version, kind) = match (&args.api_version, &args.kind, stamped) {
                    (Some(a), Some(k), _) => (a.clone(), k.clone()),
                    (_, _, Some(found)) => found,
                    _ => {
                        return Err(
                            "the template has no spec.template apiVersion and kind: give --api-version and --kind"
                                .to_string(),
                        );
                    }
                };
                let converted = cartographer::convert(&rule, &args.condition)?;
                out.configs
                    .push(manifest_config(&api_version, &kind, vec![converted]));
            }
        }
        Source::Kapp => {
            let result = kapp::convert(docs);
            for kind in result.always_healthy {
                out.notes
                    .push(format!("{kind}: kapp counts it as healthy; no rule needed"));
            }
            out.configs = result.configs;
        }
    }
    if out.configs.is_empty() && out.notes.is_empty() {
        return Err("nothing to convert".to_string());
    }
    Ok(out)
}

/// Runs the subcommand.
pub fn main(args: ConvertArgs) -> ExitCode {
    let text = if args.file.as_os_str() == "-" {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(&args.file)
    };
    let shown = args.file.display().to_string();
    let result = text
        .map_err(|e| e.to_string())
        .and_then(|t| parse_documents(&t))
        .and_then(|docs| convert(&docs, &args))
        .and_then(|c| {
            serde_norway::to_string(&c.configs)
                .map(|yaml| (c.notes, yaml))
                .map_err(|e| e.to_string())
        });
    match result {
        Ok((notes, yaml)) => {
            for note in notes {
                eprintln!("note: {note}");
            }
            println!("# Paste under spec.manifestConfigs.");
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("work-agent convert: {shown}: {e}");
            ExitCode::from(2)
        }
    }
}
