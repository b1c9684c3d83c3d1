//! Refusing deliveries to internal addresses (SSRF protection).
//!
//! Endpoints come from project settings, i.e. from users. Unless `allow_private_endpoints` is set, a request
//! may only reach a globally routable address. The check is done where the address is used: IP-literal hosts
//! are checked before the request is built, host names by [`VettingResolver`], the HTTP client's DNS resolver.
//! The client connects only to the addresses the resolver returned, so a DNS answer that changes between a
//! check and the connect (DNS rebinding) cannot slip through. Proxies are disabled for the same reason, and
//! redirects are never followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Why an address is not allowed, or `None` when it is globally routable.
pub fn non_public_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = ip.octets();
    if ip.is_unspecified() || a == 0 {
        Some("unspecified")
    } else if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (CGNAT)")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() || a >= 240 {
        Some("reserved")
    } else {
        None
    }
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let seg = ip.segments();
    if ip.is_unspecified() {
        return Some("unspecified");
    }
    if ip.is_loopback() {
        return Some("loopback");
    }
    // Addresses that embed an IPv4 address are judged by it: IPv4-mapped ::ffff:a.b.c.d, the deprecated
    // IPv4-compatible ::a.b.c.d, NAT64 64:ff9b::/96 and 6to4 2002::/16.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return v4_kind(v4);
    }
    if seg[..6] == [0; 6] || seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return v4_kind(embedded_v4(seg[6], seg[7]));
    }
    if seg[0] == 0x2002 {
        return v4_kind(embedded_v4(seg[1], seg[2]));
    }
    if seg[0] & 0xff00 == 0xff00 {
        Some("multicast")
    } else if seg[0] & 0xffc0 == 0xfe80 {
        Some("link-local")
    } else if seg[0] & 0xffc0 == 0xfec0 {
        Some("site-local")
    } else if seg[0] & 0xfe00 == 0xfc00 {
        Some("private (unique local)")
    } else {
        None
    }
}

/// The IPv4 address held in two 16-bit segments of an IPv6 address.
fn embedded_v4(hi: u16, lo: u16) -> Ipv4Addr {
    Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))
}

/// The error the resolver returns for a refused name; the delivery code finds it in reqwest's error chain and
/// classifies the failure as permanent.
#[derive(Debug, thiserror::Error)]
#[error("endpoint resolves to a non-public address ({kind}); refused (allow_private_endpoints is off)")]
pub struct RefusedAddress {
    /// Which kind of address.
    pub kind: &'static str,
}

/// A DNS resolver that drops nothing silently: if any resolved address is not public, the whole name is
/// refused (a mix of public and private answers is a classic rebinding set-up).
#[derive(Debug, Default, Clone, Copy)]
pub struct VettingResolver {
    /// Skip the check (tests, private deployments).
    pub allow_private: bool,
}

impl Resolve for VettingResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let addrs: Vec<SocketAddr> = tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            if !allow_private {
                if let Some(kind) = addrs.iter().find_map(|a| non_public_kind(a.ip())) {
                    return Err(Box::new(RefusedAddress { kind }) as Box<dyn std::error::Error + Send + Sync>);
                }
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_addresses() {
        let refused = [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a00:1",
            "2002:c0a8:101::1",
        ];
        for ip in refused {
            let ip: IpAddr = ip.parse().expect("ip");
            assert!(non_public_kind(ip).is_some(), "{ip} should be refused");
        }
        let allowed = [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "149.154.167.220",
            "2001:4860:4860::8888",
            "::ffff:8.8.8.8",
            "2002:808:808::1",
        ];
        for ip in allowed {
            let ip: IpAddr = ip.parse().expect("ip");
            assert_eq!(non_public_kind(ip), None, "{ip} should be allowed");
        }
    }
}
