//! `work-agent lint`.

use std::process::ExitCode;

/// Arguments of `work-agent lint`.
#[derive(clap::Args, Debug)]
pub struct LintArgs {}

/// Runs the subcommand.
pub fn main(_args: LintArgs) -> ExitCode {
    eprintln!("work-agent lint: not built yet");
    ExitCode::from(2)
}
