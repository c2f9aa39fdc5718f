//! Condition rules as the agent evaluates them: CEL rules, well-known rules, explanations and the
//! examples of the design documents. One binary for these suites, so they link once.

mod explain;
mod rules;
mod seeds;
mod well_known;
