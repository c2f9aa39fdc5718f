//! The CEL environment every expression is compiled and run in.

use std::sync::Arc;

use cel::{Context, DeclarationError, Env, extensions};

use crate::cel::{budget, k8s_functions};

/// The standard library, optional types, the strings, lists, math and encoders extensions,
/// the Kubernetes functions and the internal metering functions.
pub(crate) fn build() -> Result<Arc<Env>, DeclarationError> {
    let mut env = Env::stdlib();
    env.add_extension(extensions::strings)?;
    env.add_extension(extensions::lists)?;
    env.add_extension(extensions::math)?;
    env.add_extension(extensions::encoders)?;
    k8s_functions::register(&mut env)?;
    budget::register(&mut env)?;
    Ok(Arc::new(env))
}

/// A fresh root context over `env`.
pub(crate) fn context<'v>(env: &Arc<Env>) -> Context<'v, 'v> {
    Context::with_env(env.clone())
}
