//! `work-agent crd`.

use std::process::ExitCode;

/// Arguments of `work-agent crd`.
#[derive(clap::Args, Debug)]
pub struct CrdArgs {}

/// Runs the subcommand.
pub fn main(_args: CrdArgs) -> ExitCode {
    eprintln!("work-agent crd: not built yet");
    ExitCode::from(2)
}
