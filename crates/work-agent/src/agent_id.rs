//! The agent's ID, recorded in each AppliedManifestWork's `spec.agentID`: the AppliedManifestWorks
//! with this agent's ID are the ones it evicts when their work is gone from the hub.
//!
//! Chosen as upstream's agents choose it: `--agent-id`; else the `agent-name` file of the hub
//! kubeconfig directory (the klusterlet's registration writes it into the hub kubeconfig Secret);
//! else a name generated from the hub hash and the cluster name. Upstream's standalone work agent
//! falls back to the hub hash alone, which every agent talking to the same hub or broker shares:
//! two agents on one spoke (two clusters' agents, as OCM's suite runs them) would then each take
//! the other's AppliedManifestWorks for their own. The generated name is as stable as the hub hash
//! (the same across restarts) and differs per cluster; AppliedManifestWorks recorded with the hub
//! hash (by upstream's agent in the same case) still count as the agent's own for eviction
//! (`AgentConfig::is_own_agent_id`), so switching from upstream's agent leaves none behind.

use std::path::{Path, PathBuf};

/// The file of the hub kubeconfig directory that holds the agent's name (upstream's
/// `register.AgentNameFile`).
pub const AGENT_NAME_FILE: &str = "agent-name";

/// Where the agent's ID came from, for the start-up log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AgentIdSource {
    /// `--agent-id`.
    Flag,
    /// The `agent-name` file at this path.
    AgentNameFile(PathBuf),
    /// Generated from the hub hash and the cluster name.
    Generated,
}

impl std::fmt::Display for AgentIdSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Flag => f.write_str("--agent-id"),
            Self::AgentNameFile(path) => write!(f, "{}", path.display()),
            Self::Generated => f.write_str("generated from the hub hash and the cluster name"),
        }
    }
}

/// The agent's ID from the flag, the `agent-name` file's content (`None`: absent or unreadable)
/// and the identity of hub and cluster, in upstream's order. Blank values count as absent.
pub fn choose(
    flag: Option<&str>,
    agent_name_file: Option<(&Path, &str)>,
    hub_hash: &str,
    cluster_name: &str,
) -> (String, AgentIdSource) {
    if let Some(id) = flag.map(str::trim).filter(|s| !s.is_empty()) {
        return (id.to_string(), AgentIdSource::Flag);
    }
    if let Some((path, content)) = agent_name_file
        && let id = content.trim()
        && !id.is_empty()
    {
        return (
            id.to_string(),
            AgentIdSource::AgentNameFile(path.to_path_buf()),
        );
    }
    (
        agent::config::generated_agent_id(hub_hash, cluster_name),
        AgentIdSource::Generated,
    )
}

/// Reads `<dir>/agent-name`; `None` when it is absent or unreadable (then the ID is generated,
/// as upstream does; an unreadable file is logged).
pub fn read_agent_name_file(dir: &Path) -> Option<(PathBuf, String)> {
    if dir.as_os_str().is_empty() {
        return None;
    }
    let path = dir.join(AGENT_NAME_FILE);
    match std::fs::read_to_string(&path) {
        Ok(content) => Some((path, content)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the agent-name file cannot be read; the agent ID is generated");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HUB: &str = "0123abcd";

    #[test]
    fn the_flag_wins_over_the_file() {
        let file = Path::new("/spoke/hub-kubeconfig/agent-name");
        let (id, from) = choose(Some("a1"), Some((file, "from-file")), HUB, "c1");
        assert_eq!((id.as_str(), from), ("a1", AgentIdSource::Flag));
    }

    #[test]
    fn the_file_is_used_without_the_flag_and_its_newline_dropped() {
        let file = Path::new("/spoke/hub-kubeconfig/agent-name");
        let (id, from) = choose(Some(" "), Some((file, "xk2m9\n")), HUB, "c1");
        assert_eq!(id, "xk2m9");
        assert_eq!(from, AgentIdSource::AgentNameFile(file.to_path_buf()));
    }

    #[test]
    fn without_both_the_id_is_generated_per_hub_and_cluster() {
        let file = Path::new("/d/agent-name");
        let (id, from) = choose(None, Some((file, "")), HUB, "c1");
        assert_eq!(from, AgentIdSource::Generated);
        assert_eq!(id.len(), 24);
        // Stable across restarts, different for another cluster or another hub, never the hub
        // hash that every agent of that hub shares.
        assert_eq!(choose(None, None, HUB, "c1").0, id);
        assert_ne!(choose(None, None, HUB, "c2").0, id);
        assert_ne!(choose(None, None, "other", "c1").0, id);
        assert_ne!(id, HUB);
    }

    #[test]
    fn the_file_is_read_from_the_directory() {
        let dir = std::env::temp_dir().join(format!("agent-id-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        assert_eq!(read_agent_name_file(&dir), None);
        std::fs::write(dir.join(AGENT_NAME_FILE), "agent-7").expect("write");
        let (path, content) = read_agent_name_file(&dir).expect("file found");
        assert_eq!(
            (path, content.as_str()),
            (dir.join(AGENT_NAME_FILE), "agent-7")
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
