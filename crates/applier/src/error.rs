//! The error every applier operation returns.

/// Why a manifest could not be applied, read or deleted.
///
/// The `Display` text is meant for the `Applied` condition (`Failed to apply manifest: <error>`), so
/// API errors carry the server's reason and message verbatim.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The manifest itself is malformed (no kind, no name, bad metadata, ...).
    #[error("invalid manifest: {0}")]
    InvalidManifest(String),
    /// Discovery does not know the kind in that group version.
    #[error("no matches for kind \"{kind}\" in version \"{api_version}\"")]
    UnknownKind {
        /// The manifest's apiVersion.
        api_version: String,
        /// The manifest's kind.
        kind: String,
    },
    /// Discovery does not know the resource (plural) in that group version.
    #[error("the server does not serve resource \"{resource}\" in \"{group_version}\"")]
    UnknownResource {
        /// `group/version`, or `version` for the core group.
        group_version: String,
        /// The resource (plural).
        resource: String,
    },
    /// The API server refused the request.
    #[error("{verb} {target}: {reason}: {message}")]
    Api {
        /// What we tried: create, update, apply, patch, get, delete, discover.
        verb: &'static str,
        /// `Kind namespace/name` of the object.
        target: String,
        /// HTTP status code.
        code: u16,
        /// The server's machine-readable reason (e.g. `Invalid`, `Forbidden`, `Conflict`).
        reason: String,
        /// The server's message.
        message: String,
    },
    /// The request did not get an API answer (connection, TLS, decoding, ...).
    #[error("{verb} {target}: {source}")]
    Transport {
        /// What we tried.
        verb: &'static str,
        /// `Kind namespace/name` of the object.
        target: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// The write was refused before it was sent (the work's executor may not write the object);
    /// the message says why.
    #[error("{0}")]
    NotPermitted(String),
    /// The update strategy type is not one this agent knows.
    #[error("unsupported update strategy type \"{0}\"")]
    UnsupportedStrategy(String),
    /// An `ignoreFields` path cannot be understood.
    #[error("invalid ignoreFields path \"{path}\": {reason}")]
    InvalidIgnoreField {
        /// The path as written.
        path: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl From<work_semantics::InvalidManifest> for ApplyError {
    fn from(e: work_semantics::InvalidManifest) -> Self {
        ApplyError::InvalidManifest(e.0)
    }
}

impl ApplyError {
    /// True for a 409 from the API server: a stale resourceVersion, a failed delete precondition,
    /// or a server-side apply field conflict.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Api { code: 409, .. })
    }

    /// True when an `ignoreFields` path or jq expression cannot be used (reported with its own
    /// reason, `AppliedManifestSSAIgnoreFieldError`).
    pub fn is_ignore_field_error(&self) -> bool {
        matches!(self, Self::InvalidIgnoreField { .. })
    }

    /// True for a 404 from the API server.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Api { code: 404, .. })
    }

    /// True when retrying the same request later may succeed without any change to the manifest:
    /// transport errors, throttling, server errors, conflicts, and kinds not (yet) served.
    pub fn is_transient(&self) -> bool {
        match self {
            // A refused write is re-checked soon: a grant takes effect without an edit.
            Self::Transport { .. }
            | Self::UnknownKind { .. }
            | Self::UnknownResource { .. }
            | Self::NotPermitted(_) => true,
            Self::Api { code, .. } => *code == 409 || *code == 429 || *code >= 500,
            _ => false,
        }
    }

    /// Maps a client error, keeping the server's reason and message when there is one.
    pub(crate) fn from_kube(
        verb: &'static str,
        target: impl Into<String>,
        err: kube::Error,
    ) -> Self {
        match err {
            kube::Error::Api(status) => Self::Api {
                verb,
                target: target.into(),
                code: status.code,
                reason: if status.reason.is_empty() {
                    "Unknown".to_string()
                } else {
                    status.reason.clone()
                },
                message: status.message.clone(),
            },
            other => Self::Transport {
                verb,
                target: target.into(),
                source: other,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16, reason: &str, message: &str) -> ApplyError {
        let status = kube::core::Status::failure(message, reason).with_code(code);
        ApplyError::from_kube("create", "ConfigMap ns/a", kube::Error::Api(status.boxed()))
    }

    #[test]
    fn api_error_message_carries_server_reason_and_message() {
        let err = api_error(422, "Invalid", "ConfigMap \"a\" is invalid: data: bad");
        assert_eq!(
            err.to_string(),
            "create ConfigMap ns/a: Invalid: ConfigMap \"a\" is invalid: data: bad"
        );
        assert!(!err.is_conflict());
        assert!(!err.is_transient());
    }

    #[test]
    fn conflict_is_detected_by_code() {
        let err = api_error(409, "Conflict", "the object has been modified");
        assert!(err.is_conflict());
        assert!(err.is_transient());
        assert!(!err.is_not_found());
    }

    #[test]
    fn unknown_kind_reads_like_kubectl() {
        let err = ApplyError::UnknownKind {
            api_version: "example.com/v1".into(),
            kind: "Widget".into(),
        };
        assert_eq!(
            err.to_string(),
            "no matches for kind \"Widget\" in version \"example.com/v1\""
        );
    }
}
