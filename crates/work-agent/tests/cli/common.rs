//! Shared helpers for the CLI tests (included with `#[path]`).

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// What one run of the binary gave.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Path of a file under `tests/fixtures`.
pub fn fixture(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
        .display()
        .to_string()
}

/// Runs `work-agent` with `args`, feeding `stdin` if given.
pub fn run_with_stdin(args: &[&str], stdin: Option<&str>) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_work-agent"))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary starts");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(input.as_bytes())
            .expect("stdin is written");
    }
    let out = child.wait_with_output().expect("the binary finishes");
    Run {
        code: out.status.code().expect("exited, not killed"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `work-agent` with `args`.
pub fn run(args: &[&str]) -> Run {
    run_with_stdin(args, None)
}

/// `work-agent eval --work <work> --object <object>`, with `more` after.
pub fn eval_work(work: &str, object: &str, more: &[&str]) -> Run {
    let mut args = vec!["eval", "--work", work, "--object", object];
    args.extend(more);
    run(&args)
}

/// Asserts that `text` (a run's output) contains `needle`, showing the text when not.
pub fn assert_contains(text: &str, needle: &str) {
    assert!(text.contains(needle), "{needle:?} not in:\n{text}");
}

/// Asserts that the run was refused as a usage or input error: exit code 2, and `needle` in what
/// it said on stderr.
pub fn assert_refused(r: &Run, needle: &str) {
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_contains(&r.stderr, needle);
}

/// A fresh scratch directory for one test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}
