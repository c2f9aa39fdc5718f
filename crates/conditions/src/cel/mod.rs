//! The CEL engine the rules run on: the environment with the Kubernetes libraries, cel-go
//! compatibility, compiling with a bounded cache, the cost of an expression and the metering of a
//! run against the manifest's budget, and the conversion of a live object (only the parts the
//! rules read) to CEL values. It knows nothing of conditions: the rules ([`crate::rules`]) and the
//! [`crate::Evaluator`] give its answers their meaning.

pub(crate) mod budget;
pub(crate) mod cache;
pub(crate) mod cel_env;
pub(crate) mod compat;
pub(crate) mod convert;
pub(crate) mod cost;
pub(crate) mod engine;
pub(crate) mod internal_names;
pub(crate) mod k8s_functions;
pub(crate) mod object_reads;
pub(crate) mod prepared;
pub(crate) mod projection;
#[cfg(test)]
mod projection_equivalence;
