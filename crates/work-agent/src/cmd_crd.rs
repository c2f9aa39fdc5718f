//! `work-agent crd`: the CustomResourceDefinitions generated from `work-api`'s types.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `work-agent crd`.
#[derive(clap::Args, Debug)]
pub struct CrdArgs {
    /// Write one file per CRD into this directory instead of printing them (multi-document YAML).
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,
    /// Print the JSON Schema of ManifestWork documents (for YAML editors) instead; with
    /// --output-dir, write it to DIR/manifestwork.schema.json.
    #[arg(long)]
    pub json_schema: bool,
}

/// Why the CRDs could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// YAML rendering failed.
    #[error("rendering CRD {name}: {source}")]
    Render {
        /// CRD name.
        name: String,
        /// Cause.
        source: serde_norway::Error,
    },
    /// The output directory or a file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
}

/// Each CRD as `(file name, YAML document)`.
pub fn rendered() -> Result<Vec<(String, String)>, CrdError> {
    work_api::crds()
        .iter()
        .map(|crd| {
            let yaml = work_api::crd_yaml(crd).map_err(|source| CrdError::Render {
                name: crd.metadata.name.clone().unwrap_or_default(),
                source,
            })?;
            Ok((work_api::crd_file_name(crd), yaml))
        })
        .collect()
}

/// Writes one file per CRD into `dir`, creating it if needed; returns the paths written.
pub fn write_all(dir: &Path) -> Result<Vec<PathBuf>, CrdError> {
    std::fs::create_dir_all(dir).map_err(|source| CrdError::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    rendered()?
        .into_iter()
        .map(|(name, yaml)| {
            let path = dir.join(name);
            std::fs::write(&path, yaml).map_err(|source| CrdError::Write {
                path: path.clone(),
                source,
            })?;
            Ok(path)
        })
        .collect()
}

fn main_json_schema(args: &CrdArgs) -> ExitCode {
    let text = work_api::manifest_work_json_schema_text();
    let Some(dir) = &args.output_dir else {
        print!("{text}");
        return ExitCode::SUCCESS;
    };
    let path = dir.join("manifestwork.schema.json");
    let written = std::fs::create_dir_all(dir).and_then(|()| std::fs::write(&path, text));
    match written {
        Ok(()) => {
            eprintln!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("work-agent crd: writing {}: {e}", path.display());
            ExitCode::from(2)
        }
    }
}

/// Runs the subcommand.
pub fn main(args: CrdArgs) -> ExitCode {
    if args.json_schema {
        return main_json_schema(&args);
    }
    let result = match &args.output_dir {
        Some(dir) => write_all(dir).map(|paths| {
            for p in paths {
                eprintln!("wrote {}", p.display());
            }
        }),
        None => rendered().map(|docs| {
            let docs: Vec<String> = docs.into_iter().map(|(_, yaml)| yaml).collect();
            print!("{}", docs.join("---\n"));
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("work-agent crd: {e}");
            ExitCode::from(2)
        }
    }
}
