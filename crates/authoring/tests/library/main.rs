//! The rule library and the converters against their sources: each entry on its fixtures, the
//! conversions against the original examples, and (ignored, needs a checkout) Argo CD's health
//! checks. One binary for these suites, so they link once.

mod convert_seeds;
mod rule_library;
mod rule_library_argocd;
