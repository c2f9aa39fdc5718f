//! The topics of the MQTT config and upstream's substitution rules.

use regex::Regex;

use crate::Error;

/// `topics.*` of the MQTT config.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Topics {
    /// Where sources publish spec events (`…/<cluster|+>/sourceevents`).
    #[serde(default)]
    pub source_events: String,
    /// Where agents publish status events (`…/<cluster|+>/agentevents`).
    #[serde(default)]
    pub agent_events: String,
    /// Optional broadcast from sources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_broadcast: Option<String>,
    /// Optional broadcast from agents (spec resync requests to all sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_broadcast: Option<String>,
}

const ID: &str = r"([a-z0-9-]+|\+)";

fn event_topic_re(kind: &str) -> Result<Regex, Error> {
    Regex::new(&format!(
        r"^(\$share/[a-z0-9-]+/)?[a-z]+/{ID}/[a-z]+/{ID}/{kind}$"
    ))
    .map_err(|e| Error::config("topics", e))
}

/// Replaces the last `+` of `topic` with `with`.
fn replace_last_plus(topic: &str, with: &str) -> String {
    match topic.rfind('+') {
        Some(i) => format!("{}{with}{}", &topic[..i], &topic[i + 1..]),
        None => topic.to_string(),
    }
}

impl Topics {
    /// Checks the shapes upstream accepts; the error names the key.
    pub fn validate(&self) -> Result<(), Error> {
        if self.source_events.is_empty() {
            return Err(Error::config("topics.sourceEvents", "required"));
        }
        if self.agent_events.is_empty() {
            return Err(Error::config("topics.agentEvents", "required"));
        }
        if !event_topic_re("sourceevents")?.is_match(&self.source_events) {
            return Err(Error::config(
                "topics.sourceEvents",
                format!(
                    "{:?} is not <word>/<id|+>/<word>/<id|+>/sourceevents (ids: [a-z0-9-]+)",
                    self.source_events
                ),
            ));
        }
        if !event_topic_re("agentevents")?.is_match(&self.agent_events) {
            return Err(Error::config(
                "topics.agentEvents",
                format!(
                    "{:?} is not <word>/<id|+>/<word>/<id|+>/agentevents (ids: [a-z0-9-]+)",
                    self.agent_events
                ),
            ));
        }
        for (key, t) in [
            ("topics.sourceBroadcast", &self.source_broadcast),
            ("topics.agentBroadcast", &self.agent_broadcast),
        ] {
            if let Some(t) = t
                && (t.is_empty() || t.contains('#') && !t.ends_with('#'))
            {
                return Err(Error::config(key, format!("{t:?} is not a valid topic")));
            }
        }
        Ok(())
    }

    /// What the agent subscribes to: `sourceEvents` with its last `+` as the cluster, and the
    /// source broadcast when set.
    pub fn agent_subscriptions(&self, cluster: &str) -> Vec<String> {
        let mut out = vec![replace_last_plus(&self.source_events, cluster)];
        out.extend(self.source_broadcast.clone());
        out
    }

    /// Where the agent publishes a status (or a resync request for one source): `agentEvents`
    /// with the last `+` the cluster, then the next `+` the source from the topic's second segment.
    pub fn agent_publish(&self, cluster: &str) -> String {
        let with_cluster = replace_last_plus(&self.agent_events, cluster);
        let source = with_cluster
            .trim_start_matches("$share/")
            .split('/')
            .nth(1)
            .unwrap_or("+")
            .to_string();
        replace_last_plus(&with_cluster, &source)
    }

    /// Where a spec resync request to all sources goes: the agent broadcast when set.
    pub fn agent_resync_all(&self, cluster: &str) -> String {
        match &self.agent_broadcast {
            Some(b) => b.clone(),
            None => replace_last_plus(&self.agent_events, cluster),
        }
    }

    /// Whether the cluster name can appear in a topic at all.
    pub fn check_cluster(cluster: &str) -> Result<(), Error> {
        if cluster.is_empty()
            || !cluster
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(Error::config(
                "cluster",
                format!("{cluster:?} cannot appear in an MQTT topic ([a-z0-9-]+)"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn maestro(cluster: &str) -> Topics {
        Topics {
            source_events: format!("sources/maestro/consumers/{cluster}/sourceevents"),
            agent_events: format!("sources/maestro/consumers/{cluster}/agentevents"),
            ..Default::default()
        }
    }

    #[test]
    fn maestro_topics() {
        let t = maestro("cluster1");
        t.validate().expect("valid");
        assert_eq!(
            t.agent_subscriptions("cluster1"),
            vec!["sources/maestro/consumers/cluster1/sourceevents"]
        );
        assert_eq!(
            t.agent_publish("cluster1"),
            "sources/maestro/consumers/cluster1/agentevents"
        );
        assert_eq!(
            t.agent_resync_all("cluster1"),
            "sources/maestro/consumers/cluster1/agentevents"
        );
    }

    #[test]
    fn wildcards_are_substituted() {
        let t = Topics {
            source_events: "sources/+/clusters/+/sourceevents".into(),
            agent_events: "sources/+/clusters/+/agentevents".into(),
            source_broadcast: Some("sources/+/sourcebroadcast".into()),
            agent_broadcast: Some("clusters/+/agentbroadcast".into()),
        };
        t.validate().expect("valid");
        assert_eq!(
            t.agent_subscriptions("c1"),
            vec![
                "sources/+/clusters/c1/sourceevents".to_string(),
                "sources/+/sourcebroadcast".to_string()
            ]
        );
        assert_eq!(t.agent_publish("c1"), "sources/+/clusters/c1/agentevents");
        assert_eq!(t.agent_resync_all("c1"), "clusters/+/agentbroadcast");
    }

    #[test]
    fn errors_name_the_key() {
        let mut t = maestro("cluster1");
        t.source_events = "a/b".into();
        assert!(
            t.validate()
                .expect_err("bad")
                .to_string()
                .contains("topics.sourceEvents")
        );
        let mut t = maestro("cluster1");
        t.agent_events = String::new();
        assert!(
            t.validate()
                .expect_err("bad")
                .to_string()
                .contains("topics.agentEvents")
        );
        let mut t = maestro("Cluster.1");
        t.agent_events = "sources/maestro/consumers/c1/agentevents".into();
        assert!(t.validate().is_err());
        assert!(Topics::check_cluster("Cluster.1").is_err());
    }
}
