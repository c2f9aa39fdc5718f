//! The binary's allocator reads the agent's options: jemalloc, asked to confirm its
//! configuration (`confirm_conf`, through its environment variable), names the string the
//! binary exports as `malloc_conf`. A wrong symbol name would leave jemalloc on its defaults
//! (free pages kept for ten seconds, no background thread) without any error.

#![cfg(target_os = "linux")]

use std::process::Command;

#[test]
fn jemalloc_reads_the_agents_malloc_conf() {
    let out = Command::new(env!("CARGO_BIN_EXE_work-agent"))
        .arg("--version")
        .env("_RJEM_MALLOC_CONF", "confirm_conf:true")
        .output()
        .expect("the work-agent binary runs");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let conf = std::str::from_utf8(work_agent::allocator::CONF)
        .expect("ASCII")
        .trim_end_matches('\0');
    assert!(
        stderr
            .lines()
            .any(|l| l.contains("global variable malloc_conf") && l.contains(conf)),
        "jemalloc did not report the agent's options {conf:?}:\n{stderr}"
    );
    assert!(
        !stderr.contains("Invalid conf"),
        "jemalloc refused an option:\n{stderr}"
    );
}
