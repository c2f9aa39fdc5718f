//! The API types: decoding, fixtures, the generated CRDs and JSON Schema. One binary for these
//! suites, so they link once; the property tests are `prop_decoding`.

mod crds;
mod decoding;
mod fixtures;
mod json_schema;
