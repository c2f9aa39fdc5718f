//! The Kubernetes CEL libraries users expect, written against cel 0.15's overload API:
//! `hasConditions` (OCM), list helpers, regex `find`/`findAll`, `quantity`, `url`, `ip`/`cidr`,
//! `semver` and `format`.

pub(crate) mod args;
pub(crate) mod cel_go;
pub(crate) mod comprehensions;
pub(crate) mod format;
pub(crate) mod ip;
pub(crate) mod lists;
pub(crate) mod quantity;
pub(crate) mod regex;
pub(crate) mod semver;
pub(crate) mod url;

use cel::common::types::{CelBool, CelString, DYN_TYPE, Kind};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

pub(crate) use args::{TypeValue, type_name, value_keeping_types};

/// The string form of a Kubernetes library value (an IP, a CIDR, a semver, a quantity, a URL,
/// a named format) or of a type value (its name), or `None` for any other opaque value.
pub(crate) fn opaque_text(o: &dyn cel::objects::Opaque) -> Option<String> {
    if let Some(v) = o.downcast_ref::<ip::Ip>() {
        Some(v.to_string())
    } else if let Some(v) = o.downcast_ref::<ip::Cidr>() {
        Some(v.to_string())
    } else if let Some(v) = o.downcast_ref::<semver::Semver>() {
        Some(v.to_string())
    } else if let Some(v) = o.downcast_ref::<quantity::Quantity>() {
        Some(v.to_string())
    } else if let Some(v) = o.downcast_ref::<url::Url>() {
        Some(v.as_str().to_string())
    } else if let Some(v) = o.downcast_ref::<TypeValue>() {
        Some(v.0.clone())
    } else {
        o.downcast_ref::<format::Format>()
            .map(|v| v.name().to_string())
    }
}

/// OCM's `hasConditions(status)`: true when `status` is a map whose `conditions` is a
/// non-empty list; false for anything else (never an error). It looks into the map in place:
/// converting `status` to a [`Value`] would copy all of it.
fn has_conditions_overload<'b, 'v>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let has = args.first().is_some_and(|status| {
        let status = status.as_ref();
        status.get_type().kind() == Kind::Map
            && status
                .as_indexer()
                .and_then(|map| map.get(&CelString::from("conditions")).ok())
                .is_some_and(|conditions| {
                    let conditions = conditions.as_ref();
                    conditions.get_type().kind() == Kind::List
                        && conditions
                            .as_sizer()
                            .is_some_and(|list| i64::from(list.size()) > 0)
                })
    });
    Ok(CowVal::owned(CelBool::from(has)))
}

/// Registers every function of this module on `env`.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(
        "hasConditions",
        "hasConditions(dyn)",
        vec![DYN_TYPE],
        has_conditions_overload,
    )?;
    // The library types can be named, as in Kubernetes: `type(ip("1.2.3.4")) == net.IP`.
    for name in [
        "net.IP",
        "net.CIDR",
        "kubernetes.Quantity",
        "kubernetes.URL",
        "kubernetes.Semver",
        "kubernetes.NamedFormat",
    ] {
        env.add_type(cel::common::types::Type::new_opaque_type(name))?;
    }
    lists::register(env)?;
    regex::register(env)?;
    quantity::register(env)?;
    url::register(env)?;
    ip::register(env)?;
    semver::register(env)?;
    format::register(env)?;
    cel_go::register(env)?;
    comprehensions::register(env)?;
    Ok(())
}
