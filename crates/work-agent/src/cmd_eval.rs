//! `work-agent eval`.

use std::process::ExitCode;

/// Arguments of `work-agent eval`.
#[derive(clap::Args, Debug)]
pub struct EvalArgs {}

/// Runs the subcommand.
pub fn main(_args: EvalArgs) -> ExitCode {
    eprintln!("work-agent eval: not built yet");
    ExitCode::from(2)
}
