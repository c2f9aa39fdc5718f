//! `work-agent run`.

use std::process::ExitCode;

/// Arguments of `work-agent run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {}

/// Runs the subcommand.
pub fn main(_args: RunArgs) -> ExitCode {
    eprintln!("work-agent run: not built yet");
    ExitCode::from(2)
}
