//! Pure evaluation of ManifestWork condition rules (CEL and well-known) and condition aggregation.
