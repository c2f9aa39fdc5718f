//! Integration-test helpers: connect to the local control plane, namespaces, CRDs, waits.
