//! `work-agent`: applies the ManifestWorks of one managed cluster, and helps authors test them.

use authoring::{convert, eval, lint, rules};
use work_agent::{cmd_crd, cmd_run};

use std::process::ExitCode;

/// jemalloc on Linux (glibc and musl): it hands free pages back by itself (`allocator`). The
/// `system-allocator` feature leaves the C library's malloc in place, for heap profilers that
/// intercept it (heaptrack).
#[cfg(all(target_os = "linux", not(feature = "system-allocator")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options: the `malloc_conf` that jemalloc reads at its first allocation, as a C
/// string (a `const char *`; a reference to the first byte has that layout).
#[cfg(all(target_os = "linux", not(feature = "system-allocator")))]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: &u8 = &work_agent::allocator::CONF[0];

use clap::{Parser, Subcommand};

/// The Open Cluster Management work agent, with workload completion and TTL garbage collection.
#[derive(Parser, Debug)]
#[command(name = "work-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the agent for one managed cluster (`agent` is upstream's name for it).
    #[command(alias = "agent")]
    Run(Box<cmd_run::RunArgs>),
    /// Evaluate a CEL expression, or a work's condition rules, against an object.
    Eval(eval::EvalArgs),
    /// Check ManifestWork files before shipping them.
    Lint(lint::LintArgs),
    /// Print (or write) the CustomResourceDefinitions.
    Crd(cmd_crd::CrdArgs),
    /// Ready-to-paste condition rules for popular resources.
    Rules(rules::RulesArgs),
    /// Turn Flux healthCheckExprs or Cartographer healthRules into condition rules.
    Convert(convert::command::ConvertArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // clap prints help/version to stdout with exit 0 and usage errors with exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli.command {
        Command::Run(args) => cmd_run::main(*args),
        Command::Eval(args) => eval::main(args),
        Command::Lint(args) => lint::main(args),
        Command::Crd(args) => cmd_crd::main(args),
        Command::Rules(args) => rules::main(args),
        Command::Convert(args) => convert::command::main(args),
    }
}
