//! TTL garbage collection of completed ManifestWorks.
