//! A ManifestWork as the controller's watch store keeps it (see [`crate::stored`]).

use work_api::ManifestWork;

/// A stored ManifestWork: its metadata and its packed JSON.
pub type StoredWork = crate::stored::Stored<ManifestWork>;
