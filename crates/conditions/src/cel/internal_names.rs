//! The names of the functions that our compile-time rewrites call ([`crate::cel::compat`], the
//! two-variable comprehension macros of [`crate::cel::k8s_functions`]). Each starts with `@`, which
//! no CEL identifier can, so no user expression calls them; the cost model
//! ([`crate::cel::cost`]) and the registrations name them from here.

/// Our implementation of `s.indexOf(t, offset)`.
pub(crate) const INDEX_OF_OFFSET: &str = "@indexOf";
/// Our implementation of `s.lastIndexOf(t, offset)`.
pub(crate) const LAST_INDEX_OF_OFFSET: &str = "@lastIndexOf";
/// Our implementation of `optional.ofNonZeroValue(x)`.
pub(crate) const OF_NON_ZERO_VALUE: &str = "@optional.ofNonZeroValue";
/// Our implementation of `s.format(list)`.
pub(crate) const FORMAT: &str = "@format";
/// Our implementation of `optional.unwrap(list)`.
pub(crate) const UNWRAP: &str = "@optional.unwrap";
/// Our implementation of `list.reverse()`.
pub(crate) const REVERSE: &str = "@reverse";
/// The internal function that turns a comprehension's range into its `[k, v]` pairs.
pub(crate) const PAIRS: &str = "@pairs";
/// The internal function that joins the maps `transformMap` and `transformMapEntry` build.
pub(crate) const MERGE_MAPS: &str = "@mergeMaps";
