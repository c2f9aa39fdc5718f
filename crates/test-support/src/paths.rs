//! Where the harness keeps things, and unique names.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The repository root (the workspace this crate was compiled in).
pub fn repo_root() -> PathBuf {
    // crates/test-support → ../..
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("..")
}

/// The harness state directory: `$WORK_AGENT_RUN_DIR`, else `<repo>/.run` (gitignored).
pub fn run_dir() -> PathBuf {
    match std::env::var_os("WORK_AGENT_RUN_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join(".run"),
    }
}

/// The project's own CRDs (generated from the Rust types by `make crds`).
pub fn our_crds_dir() -> PathBuf {
    repo_root().join("deploy").join("crds")
}

/// The upstream OCM work CRDs, vendored for clean-clone CI runs.
pub fn upstream_crds_dir() -> PathBuf {
    repo_root().join("e2e").join("upstream-crds")
}

/// A loopback TCP port that was free a moment ago (for agent metrics/health listeners).
///
/// Panics when the OS hands out no port, which means the machine itself is broken.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind(("127.0.0.1", 0))
        .unwrap_or_else(|e| panic!("cannot bind a loopback port: {e}"));
    listener
        .local_addr()
        .unwrap_or_else(|e| panic!("bound loopback socket has no address: {e}"))
        .port()
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name that is unique across test threads, test processes and runs, valid as a DNS-1123 label:
/// the sanitized prefix (at most 40 characters), then a suffix from time, pid and a counter.
pub fn unique_name(prefix: &str) -> String {
    let mut clean: String = prefix
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .take(40)
        .collect();
    while clean.ends_with('-') {
        clean.pop();
    }
    let clean = clean.trim_start_matches('-');
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    // Mixing pid and counter into the time keeps parallel processes apart even within one tick.
    let mixed =
        nanos ^ (u64::from(std::process::id()) << 40) ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let suffix = base36(mixed % 36u64.pow(8));
    if clean.is_empty() {
        format!("t-{suffix}{n}")
    } else {
        format!("{clean}-{suffix}{n}")
    }
}

fn base36(mut v: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(v % 36) as usize]);
        v /= 36;
        if v == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).unwrap_or_default()
}

/// A directory of its own under the system's temporary directory, removed on drop: for the
/// certificates and config files a test writes.
pub struct TempDir(PathBuf);

impl TempDir {
    /// Creates `<tmp>/<unique name from prefix>`.
    ///
    /// Panics when the directory cannot be created: the machine has no writable temp directory.
    pub fn new(prefix: &str) -> Self {
        let dir = std::env::temp_dir().join(unique_name(prefix));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
        Self(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Writes `contents` to `name` in the directory, atomically (a temporary file renamed over
    /// it, as a Secret volume rotates its files); its path. Panics as [`TempDir::new`].
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let tmp = self.0.join(format!(".{name}.tmp"));
        let path = self.0.join(name);
        std::fs::write(&tmp, contents)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn unique_names_are_distinct_and_valid_labels() {
        let names: Vec<String> = (0..500).map(|_| unique_name("Job_Completes!")).collect();
        let set: HashSet<&String> = names.iter().collect();
        assert_eq!(set.len(), names.len());
        for n in &names {
            assert!(is_dns_label(n), "{n}");
            assert!(n.starts_with("job-completes-"), "{n}");
        }
    }

    #[test]
    fn long_or_empty_prefixes_still_give_labels() {
        assert!(is_dns_label(&unique_name(&"x".repeat(200))));
        assert!(is_dns_label(&unique_name("")));
        assert!(is_dns_label(&unique_name("---")));
    }

    #[test]
    fn free_port_is_bindable() {
        let port = free_port();
        assert_ne!(port, 0);
        assert!(TcpListener::bind(("127.0.0.1", port)).is_ok());
    }
}
