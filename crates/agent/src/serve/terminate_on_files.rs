//! `--terminate-on-files`: the agent stops (exit 0) when one of the listed files changes, as
//! upstream's agents do. The klusterlet operator lists the hub kubeconfig so that a new hub (or
//! a re-bootstrapped cluster) restarts the agent with the new identity.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often the files are read. Upstream polls every 10 s; the files are small.
pub const POLL_PERIOD: Duration = Duration::from_secs(2);

/// Content of each watched file at startup (`None`: unreadable or absent then).
#[derive(Debug)]
pub struct FileWatch {
    files: Vec<(PathBuf, Option<Vec<u8>>)>,
}

impl FileWatch {
    /// Records the current content of each file.
    pub fn new(paths: &[PathBuf]) -> Self {
        let files = paths
            .iter()
            .map(|p| {
                let content = std::fs::read(p).ok();
                if content.is_none() {
                    tracing::warn!(file = %p.display(), "--terminate-on-files: cannot read the file now; its appearance will stop the agent");
                }
                (p.clone(), content)
            })
            .collect();
        Self { files }
    }

    /// The first file whose content (or existence) differs from the recorded one.
    pub fn changed(&self) -> Option<&Path> {
        self.files
            .iter()
            .find(|(path, before)| std::fs::read(path).ok() != *before)
            .map(|(path, _)| path.as_path())
    }

    /// Resolves once a file changed, returning it.
    pub async fn wait_for_change(self, period: Duration) -> PathBuf {
        loop {
            tokio::time::sleep(period).await;
            if let Some(path) = self.changed() {
                return path.to_path_buf();
            }
        }
    }
}

/// Watches `paths` and, when one changes, sends this process SIGTERM so the agent goes through
/// its normal graceful shutdown (controllers stopped, Lease released) and exits 0.
pub fn spawn(paths: &[PathBuf]) {
    if paths.is_empty() {
        return;
    }
    let watch = FileWatch::new(paths);
    tokio::spawn(async move {
        let path = watch.wait_for_change(POLL_PERIOD).await;
        tracing::info!(file = %path.display(), "exiting because a --terminate-on-files file changed");
        terminate_self();
    });
}

fn terminate_self() {
    // SAFETY: kill(2) on our own pid with a valid signal number has no memory-safety
    // preconditions.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_an_appearance_and_a_removal_count_as_changes() {
        let dir = std::env::temp_dir().join(format!("terminate-on-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let kept = dir.join("kept");
        let later = dir.join("later");
        std::fs::write(&kept, "a").expect("write");
        let _ = std::fs::remove_file(&later);

        let watch = FileWatch::new(&[kept.clone(), later.clone()]);
        assert_eq!(watch.changed(), None);
        std::fs::write(&kept, "a").expect("same content rewritten");
        assert_eq!(watch.changed(), None, "same bytes are no change");
        std::fs::write(&later, "new").expect("write");
        assert_eq!(watch.changed(), Some(later.as_path()));
        std::fs::remove_file(&later).expect("remove");
        std::fs::write(&kept, "b").expect("write");
        assert_eq!(watch.changed(), Some(kept.as_path()));
        std::fs::remove_file(&kept).expect("remove");
        assert_eq!(watch.changed(), Some(kept.as_path()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
