//! Writes manifests to the spoke: Update, CreateOnly, ServerSideApply, ReadOnly.
