//! The `work-agent` command line: `run` (upstream's flags accepted as aliases) and `crd`; the
//! authoring subcommands come from the `authoring` crate.

pub mod agent_id;
pub mod allocator;
pub mod cmd_crd;
pub mod cmd_run;
pub mod maestro_agent;
pub mod upstream_flags;
