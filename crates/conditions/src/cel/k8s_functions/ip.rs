//! The Kubernetes IP and CIDR libraries: `ip(string)`, `isIP(string)`, `ip.isCanonical(string)`,
//! `cidr(string)`, `isCIDR(string)`, `string(ip)`, `string(cidr)` and the members `family`,
//! `isUnspecified`, `isLoopback`, `isLinkLocalMulticast`, `isLinkLocalUnicast`,
//! `isGlobalUnicast` (IP) and `containsIP`, `containsCIDR`, `ip`, `masked`, `prefixLength`
//! (CIDR).
//!
//! Parsing is as strict as Kubernetes' (Go's `netip`): no IPv4 octets with leading zeros, no
//! IPv6 zones, and no IPv4-mapped IPv6 addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use cel::common::types::{DYN_TYPE, STRING_TYPE, Type};
use cel::objects::Opaque;
use cel::{DeclarationError, Env, ExecutionError, Value};

use super::args::{arity, string_arg, value_overload};

/// An IP address value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ip(pub(crate) IpAddr);

/// The CEL type names Kubernetes gives IP and CIDR values.
const IP_TYPE_NAME: &str = "net.IP";
const CIDR_TYPE_NAME: &str = "net.CIDR";

impl Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        IP_TYPE_NAME
    }
}

/// A CIDR value: the address as written and the prefix length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl std::fmt::Display for Ip {
    /// The canonical form, as `string(ip)` gives it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::fmt::Display for Cidr {
    /// The canonical form, as `string(cidr)` gives it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        CIDR_TYPE_NAME
    }
}

/// Parses an IP address as Kubernetes does.
pub(crate) fn parse_ip(s: &str) -> Result<IpAddr, String> {
    let bad =
        |why: &str| format!("IP Address {s:?} parse error during conversion from string: {why}");
    if s.contains('%') {
        return Err(bad("IPv6 zones are not allowed"));
    }
    let addr: IpAddr = s.parse().map_err(|_| bad("not an IP address"))?;
    if let IpAddr::V6(v6) = addr
        && v6.to_ipv4_mapped().is_some()
    {
        return Err(bad("IPv4-mapped IPv6 addresses are not allowed"));
    }
    Ok(addr)
}

impl Cidr {
    /// Parses `addr/len` as Kubernetes does.
    pub(crate) fn parse(s: &str) -> Result<Cidr, String> {
        let bad = |why: &str| {
            format!("network address {s:?} parse error during conversion from string: {why}")
        };
        let (addr, len) = s.split_once('/').ok_or_else(|| bad("missing '/'"))?;
        let addr = parse_ip(addr).map_err(|e| bad(&e))?;
        let digits_ok = !len.is_empty()
            && len.chars().all(|c| c.is_ascii_digit())
            && (len == "0" || !len.starts_with('0'));
        let prefix: u8 = len
            .parse()
            .ok()
            .filter(|_| digits_ok)
            .ok_or_else(|| bad("bad prefix length"))?;
        if prefix > bits(addr) {
            return Err(bad("prefix length out of range"));
        }
        Ok(Cidr { addr, prefix })
    }

    /// The network: the address with the host bits cleared.
    fn masked(self) -> Cidr {
        let addr = match self.addr {
            IpAddr::V4(a) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask))
            }
            IpAddr::V6(a) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask))
            }
        };
        Cidr { addr, ..self }
    }

    /// Whether `ip` is inside the network (never across families).
    fn contains(self, ip: IpAddr) -> bool {
        let family_matches = matches!(
            (self.addr, ip),
            (IpAddr::V4(_), IpAddr::V4(_)) | (IpAddr::V6(_), IpAddr::V6(_))
        );
        family_matches
            && Cidr {
                addr: ip,
                prefix: self.prefix,
            }
            .masked()
            .addr
                == self.masked().addr
    }
}

fn bits(addr: IpAddr) -> u8 {
    match addr {
        IpAddr::V4(_) => 32,
        IpAddr::V6(_) => 128,
    }
}

value_overload!(ip_overload, ip);
value_overload!(is_ip_overload, is_ip);
value_overload!(cidr_overload, cidr);
value_overload!(is_cidr_overload, is_cidr);
value_overload!(family_overload, family);
value_overload!(is_unspecified_overload, is_unspecified);
value_overload!(is_loopback_overload, is_loopback);
value_overload!(is_link_local_multicast_overload, is_link_local_multicast);
value_overload!(is_link_local_unicast_overload, is_link_local_unicast);
value_overload!(is_global_unicast_overload, is_global_unicast);
value_overload!(contains_ip_overload, contains_ip);
value_overload!(contains_cidr_overload, contains_cidr);
value_overload!(masked_overload, masked);
value_overload!(prefix_length_overload, prefix_length);
value_overload!(is_canonical_overload, is_canonical);
value_overload!(to_string_overload, to_string);

/// Registers the IP and CIDR functions.
pub(crate) fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload("ip", "ip(string)", vec![STRING_TYPE], ip_overload)?;
    env.add_overload("isIP", "isIP(string)", vec![STRING_TYPE], is_ip_overload)?;
    env.add_overload("cidr", "cidr(string)", vec![STRING_TYPE], cidr_overload)?;
    env.add_overload(
        "isCIDR",
        "isCIDR(string)",
        vec![STRING_TYPE],
        is_cidr_overload,
    )?;
    env.add_overload(
        "ip.isCanonical",
        "ip.isCanonical(string)",
        vec![STRING_TYPE],
        is_canonical_overload,
    )?;
    env.add_overload(
        "string",
        "string(net.IP)",
        vec![Type::new_opaque_type(IP_TYPE_NAME)],
        to_string_overload,
    )?;
    env.add_overload(
        "string",
        "string(net.CIDR)",
        vec![Type::new_opaque_type(CIDR_TYPE_NAME)],
        to_string_overload,
    )?;
    let members: [(&str, cel::common::functions::Function); 8] = [
        ("family", family_overload),
        ("isUnspecified", is_unspecified_overload),
        ("isLoopback", is_loopback_overload),
        ("isLinkLocalMulticast", is_link_local_multicast_overload),
        ("isLinkLocalUnicast", is_link_local_unicast_overload),
        ("isGlobalUnicast", is_global_unicast_overload),
        ("masked", masked_overload),
        ("prefixLength", prefix_length_overload),
    ];
    for (name, f) in members {
        env.add_member_overload(name, &format!("net.{name}"), DYN_TYPE, vec![], f)?;
    }
    env.add_member_overload(
        "containsIP",
        "net.containsIP",
        DYN_TYPE,
        vec![DYN_TYPE],
        contains_ip_overload,
    )?;
    env.add_member_overload(
        "containsCIDR",
        "net.containsCIDR",
        DYN_TYPE,
        vec![DYN_TYPE],
        contains_cidr_overload,
    )?;
    // `cidr.ip()`: the member form of `ip`, on a CIDR receiver.
    env.add_member_overload("ip", "net.cidr.ip", DYN_TYPE, vec![], ip_overload)?;
    Ok(())
}

fn opaque<T: Opaque + 'static>(v: T) -> Value {
    Value::Opaque(Arc::new(v))
}

fn function_error(function: &str, e: impl ToString) -> ExecutionError {
    ExecutionError::function_error(function, e.to_string())
}

/// `ip(string)`, and `cidr.ip()` (the address part of a CIDR).
fn ip(args: &[Value]) -> Result<Value, ExecutionError> {
    let [arg] = arity::<1>("ip", args)?;
    if let Value::Opaque(o) = arg
        && let Some(cidr) = o.downcast_ref::<Cidr>()
    {
        return Ok(opaque(Ip(cidr.addr)));
    }
    let addr = parse_ip(string_arg("ip", arg)?).map_err(|e| function_error("ip", e))?;
    Ok(opaque(Ip(addr)))
}

fn is_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("isIP", args)?;
    Ok(Value::Bool(parse_ip(string_arg("isIP", s)?).is_ok()))
}

fn cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("cidr", args)?;
    let cidr = Cidr::parse(string_arg("cidr", s)?).map_err(|e| function_error("cidr", e))?;
    Ok(opaque(cidr))
}

fn is_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("isCIDR", args)?;
    Ok(Value::Bool(Cidr::parse(string_arg("isCIDR", s)?).is_ok()))
}

/// `ip.isCanonical(s)`: whether `s` is already written as `string(ip(s))` would write it
/// (lowercase hex, longest zero run compressed); an error when `s` is no IP, as in Kubernetes.
fn is_canonical(args: &[Value]) -> Result<Value, ExecutionError> {
    let [s] = arity::<1>("ip.isCanonical", args)?;
    let s = string_arg("ip.isCanonical", s)?;
    let addr = parse_ip(s).map_err(|e| function_error("ip.isCanonical", e))?;
    Ok(Value::Bool(addr.to_string() == s))
}

/// `string(ip)` and `string(cidr)`: the canonical form (RFC 5952 for IPv6, as Go's `netip`
/// writes it); a CIDR keeps the address as written, host bits included.
fn to_string(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this] = arity::<1>("string", args)?;
    let text = match this {
        Value::Opaque(o) => match (o.downcast_ref::<Ip>(), o.downcast_ref::<Cidr>()) {
            (Some(ip), _) => Some(ip.to_string()),
            (_, Some(cidr)) => Some(cidr.to_string()),
            _ => None,
        },
        _ => None,
    };
    text.map(|t| Value::String(Arc::new(t)))
        .ok_or_else(|| function_error("string", "expected an IP or a CIDR"))
}

/// The IP receiver of a member function.
fn this_ip(function: &str, args: &[Value]) -> Result<IpAddr, ExecutionError> {
    let [this] = arity::<1>(function, args)?;
    as_ip(function, this)
}

/// An IP value, or a string parsed as one.
fn as_ip(function: &str, v: &Value) -> Result<IpAddr, ExecutionError> {
    match v {
        Value::Opaque(o) => o
            .downcast_ref::<Ip>()
            .map(|ip| ip.0)
            .ok_or_else(|| function_error(function, "expected an IP")),
        Value::String(s) => parse_ip(s).map_err(|e| function_error(function, e)),
        _ => Err(function_error(function, "expected an IP")),
    }
}

/// A CIDR value, or a string parsed as one.
fn as_cidr(function: &str, v: &Value) -> Result<Cidr, ExecutionError> {
    match v {
        Value::Opaque(o) => o
            .downcast_ref::<Cidr>()
            .copied()
            .ok_or_else(|| function_error(function, "expected a CIDR")),
        Value::String(s) => Cidr::parse(s).map_err(|e| function_error(function, e)),
        _ => Err(function_error(function, "expected a CIDR")),
    }
}

fn family(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(match this_ip("family", args)? {
        IpAddr::V4(_) => 4,
        IpAddr::V6(_) => 6,
    }))
}

fn is_unspecified(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        this_ip("isUnspecified", args)?.is_unspecified(),
    ))
}

fn is_loopback(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(this_ip("isLoopback", args)?.is_loopback()))
}

/// 224.0.0.0/24 and ff02::/16 (with any flags), as Go's `netip.Addr.IsLinkLocalMulticast`.
fn link_local_multicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.octets()[..3] == [224, 0, 0],
        IpAddr::V6(a) => a.segments()[0] & 0xff0f == 0xff02,
    }
}

/// 169.254.0.0/16 and fe80::/10.
fn link_local_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_multicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(link_local_multicast(this_ip(
        "isLinkLocalMulticast",
        args,
    )?)))
}

fn is_link_local_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(link_local_unicast(this_ip(
        "isLinkLocalUnicast",
        args,
    )?)))
}

/// Go's `netip.Addr.IsGlobalUnicast`: not unspecified, loopback, multicast, link-local unicast,
/// nor the IPv4 broadcast address (private ranges are global unicast).
fn is_global_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    let ip = this_ip("isGlobalUnicast", args)?;
    let broadcast = ip == IpAddr::V4(Ipv4Addr::BROADCAST);
    Ok(Value::Bool(
        !(ip.is_unspecified()
            || ip.is_loopback()
            || ip.is_multicast()
            || link_local_unicast(ip)
            || broadcast),
    ))
}

fn this_cidr(function: &str, args: &[Value]) -> Result<Cidr, ExecutionError> {
    let this = args
        .first()
        .ok_or_else(|| function_error(function, "missing receiver"))?;
    as_cidr(function, this)
}

fn contains_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, other] = arity::<2>("containsIP", args)?;
    let cidr = as_cidr("containsIP", this)?;
    Ok(Value::Bool(cidr.contains(as_ip("containsIP", other)?)))
}

fn contains_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    let [this, other] = arity::<2>("containsCIDR", args)?;
    let cidr = as_cidr("containsCIDR", this)?;
    let other = as_cidr("containsCIDR", other)?;
    Ok(Value::Bool(
        other.prefix >= cidr.prefix && cidr.contains(other.addr),
    ))
}

fn masked(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(opaque(this_cidr("masked", args)?.masked()))
}

fn prefix_length(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(i64::from(
        this_cidr("prefixLength", args)?.prefix,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_is_as_strict_as_kubernetes() {
        for ok in ["192.168.0.1", "::1", "2001:db8::68", "fe80::1", "0.0.0.0"] {
            assert!(parse_ip(ok).is_ok(), "{ok}");
        }
        for bad in [
            "192.168.0.01",
            "::ffff:192.168.0.1",
            "fe80::1%eth0",
            "1.2.3",
            "",
            "192.168.0.1/24",
        ] {
            assert!(parse_ip(bad).is_err(), "{bad}");
        }
        for ok in [
            "192.168.0.0/24",
            "192.168.0.1/24",
            "::1/128",
            "2001:db8::/32",
            "0.0.0.0/0",
        ] {
            assert!(Cidr::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "192.168.0.0/33",
            "192.168.0.0/024",
            "192.168.0.0",
            "::ffff:192.168.0.0/120",
            "192.168.0.0/-1",
            "2001:db8::/129",
        ] {
            assert!(Cidr::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn masking_and_containment_follow_netip() {
        let c = Cidr::parse("192.168.1.5/24").unwrap();
        assert_eq!(c.masked(), Cidr::parse("192.168.1.0/24").unwrap());
        assert!(c.contains("192.168.1.200".parse().unwrap()));
        assert!(!c.contains("192.168.2.1".parse().unwrap()));
        assert!(!c.contains("::1".parse().unwrap()));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains("10.0.0.1".parse().unwrap()));
        let v6 = Cidr::parse("2001:db8::/32").unwrap();
        assert!(v6.contains("2001:db8:1::1".parse().unwrap()));
    }

    #[test]
    fn address_classes_match_go() {
        let class = |s: &str| {
            let ip: IpAddr = s.parse().unwrap();
            (link_local_multicast(ip), link_local_unicast(ip))
        };
        assert_eq!(class("224.0.0.1"), (true, false));
        assert_eq!(class("ff02::1"), (true, false));
        assert_eq!(class("169.254.169.254"), (false, true));
        assert_eq!(class("fe80::1"), (false, true));
        assert_eq!(class("10.0.0.1"), (false, false));
    }
}
