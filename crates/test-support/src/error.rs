//! Errors of the harness helpers.

use std::path::PathBuf;

/// Why a harness operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A required environment variable is unset or empty.
    #[error("{var} is not set: {hint}")]
    MissingEnv {
        /// The variable's name.
        var: String,
        /// What to do about it.
        hint: String,
    },
    /// A kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The kubeconfig file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A kubeconfig lacks something the harness needs.
    #[error("kubeconfig {path}: {reason}")]
    KubeconfigContent {
        /// The kubeconfig file.
        path: PathBuf,
        /// What is missing.
        reason: String,
    },
    /// The API server answered with an error or could not be reached.
    #[error("{context}: {source}")]
    Kube {
        /// What the harness was doing.
        context: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
    /// A YAML document could not be parsed.
    #[error("invalid YAML: {0}")]
    Yaml(#[from] serde_norway::Error),
    /// A manifest lacks a field the harness needs (apiVersion, kind, metadata.name, ...).
    #[error("invalid manifest: {0}")]
    InvalidManifest(String),
    /// Reading or writing a file failed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A helper process (a broker) could not be set up.
    #[error("{0}")]
    Setup(String),
    /// A waited-for state was not reached in time.
    #[error(transparent)]
    TimedOut(#[from] crate::wait::TimedOut),
}

impl Error {
    /// Wraps a client error with what was being attempted.
    pub(crate) fn kube(context: impl Into<String>, source: kube::Error) -> Self {
        Error::Kube {
            context: context.into(),
            source,
        }
    }

    /// Wraps an I/O error with the path involved.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}
