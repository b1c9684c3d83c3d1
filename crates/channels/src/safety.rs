//! Refusing deliveries to internal addresses (SSRF protection).
//!
//! Endpoints come from project settings, i.e. from users. Unless `allow_private_endpoints` is set, a request
//! may only reach a globally reachable address. The check is done where the address is used: IP-literal hosts
//! are checked before the request is built, host names by [`VettingResolver`], the HTTP client's DNS resolver.
//! The client connects only to the addresses the resolver returned, so a DNS answer that changes between a
//! check and the connect (DNS rebinding) cannot slip through. Proxies are disabled for the same reason, and
//! redirects are never followed. Direct notifications (`POST /api/v1/notifications`) are checked with the same
//! [`non_public_kind`] when they are accepted, and again by the client when they are delivered.
//!
//! What "globally reachable" means is not decided here: [`IPV4`] and [`IPV6`] are the IANA IPv4 and IPv6
//! Special-Purpose Address Registries (RFC 6890; <https://www.iana.org/assignments/iana-ipv4-special-registry>
//! and <https://www.iana.org/assignments/iana-ipv6-special-registry>), one row per registry entry with its
//! "Globally Reachable" column, plus the few blocks those registries leave to other documents (multicast,
//! deprecated site-local and IPv4-compatible IPv6). An address is judged by the most specific row that contains
//! it (the registries' own rule: `192.0.0.0/24` is not reachable "unless by virtue of a more specific
//! reservation" such as `192.0.0.9/32`); an address in no row is an ordinary, public one.
//!
//! IPv6 forms that carry an IPv4 address the connection really goes to are judged by that IPv4 address:
//! IPv4-mapped `::ffff:a.b.c.d` (a dual-stack socket connects to `a.b.c.d` itself), the NAT64 well-known prefix
//! `64:ff9b::/96` (the translator connects to the embedded address: `64:ff9b::10.0.0.1` is a private address
//! behind it) and 6to4 `2002:a.b.c.d::/48` (routed through `a.b.c.d`). The local-use NAT64 prefix
//! `64:ff9b:1::/48`, Teredo and the other forms whose registry row says not globally reachable (or "N/A") are
//! refused whatever they embed.
//!
//! The rows were written from the registries as published in 2024-2025 (the last additions: `3fff::/20`,
//! RFC 9637; `5f00::/16`, RFC 9602; `2001:1::3/128`, RFC 9665; `100:0:0:1::/64`, RFC 9780), not fetched at
//! build time: a registry update is a reviewed change to this table and its test.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// How the registry answers "is a datagram to this block forwardable beyond its administrative domain?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// "Globally Reachable: True": allowed.
    Global,
    /// "Globally Reachable: False" (or "N/A", or a block outside the registry that is never a unicast
    /// destination): refused.
    Local,
    /// The block embeds an IPv4 address the connection goes to: judged by that address.
    EmbeddedV4,
}

/// One row of the special-purpose registries.
#[derive(Debug, Clone, Copy)]
pub struct Row<A> {
    /// First address of the block.
    pub net: A,
    /// Prefix length.
    pub len: u8,
    /// How the block is judged.
    pub reach: Reach,
    /// The kind shown in errors ("… points to a {kind} address").
    pub kind: &'static str,
    /// The registry's name for the block and the RFC(s) it cites.
    pub source: &'static str,
}

const fn v4(
    [a, b, c, d]: [u8; 4],
    len: u8,
    reach: Reach,
    kind: &'static str,
    source: &'static str,
) -> Row<Ipv4Addr> {
    Row {
        net: Ipv4Addr::new(a, b, c, d),
        len,
        reach,
        kind,
        source,
    }
}

const fn v6(
    segments: [u16; 8],
    len: u8,
    reach: Reach,
    kind: &'static str,
    source: &'static str,
) -> Row<Ipv6Addr> {
    let [a, b, c, d, e, f, g, h] = segments;
    Row {
        net: Ipv6Addr::new(a, b, c, d, e, f, g, h),
        len,
        reach,
        kind,
        source,
    }
}

use Reach::{EmbeddedV4, Global, Local};

/// The IANA IPv4 Special-Purpose Address Registry, plus multicast (which has its own registry).
#[rustfmt::skip]
pub static IPV4: &[Row<Ipv4Addr>] = &[
    v4([0, 0, 0, 0], 8, Local, "\"this network\"", "\"This network\", RFC 791 section 3.2"),
    v4([0, 0, 0, 0], 32, Local, "unspecified", "\"This host on this network\", RFC 1122 section 3.2.1.3"),
    v4([10, 0, 0, 0], 8, Local, "private", "Private-Use, RFC 1918"),
    v4([100, 64, 0, 0], 10, Local, "shared (CGNAT)", "Shared Address Space, RFC 6598"),
    v4([127, 0, 0, 0], 8, Local, "loopback", "Loopback, RFC 1122 section 3.2.1.3"),
    v4([169, 254, 0, 0], 16, Local, "link-local", "Link Local, RFC 3927"),
    v4([172, 16, 0, 0], 12, Local, "private", "Private-Use, RFC 1918"),
    v4([192, 0, 0, 0], 24, Local, "IETF protocol assignment", "IETF Protocol Assignments, RFC 6890 section 2.1"),
    v4([192, 0, 0, 0], 29, Local, "IPv4 service continuity", "IPv4 Service Continuity Prefix, RFC 7335"),
    v4([192, 0, 0, 8], 32, Local, "dummy", "IPv4 dummy address, RFC 7600"),
    v4([192, 0, 0, 9], 32, Global, "PCP anycast", "Port Control Protocol Anycast, RFC 7723"),
    v4([192, 0, 0, 10], 32, Global, "TURN anycast", "Traversal Using Relays around NAT Anycast, RFC 8155"),
    v4([192, 0, 0, 170], 32, Local, "NAT64/DNS64 discovery", "NAT64/DNS64 Discovery, RFC 8880, RFC 7050 section 2.2"),
    v4([192, 0, 0, 171], 32, Local, "NAT64/DNS64 discovery", "NAT64/DNS64 Discovery, RFC 8880, RFC 7050 section 2.2"),
    v4([192, 0, 2, 0], 24, Local, "documentation", "Documentation (TEST-NET-1), RFC 5737"),
    v4([192, 31, 196, 0], 24, Global, "AS112", "AS112-v4, RFC 7535"),
    v4([192, 52, 193, 0], 24, Global, "AMT", "AMT, RFC 7450"),
    v4([192, 88, 99, 0], 24, Local, "deprecated 6to4 relay anycast", "Deprecated (6to4 Relay Anycast), RFC 7526"),
    v4([192, 88, 99, 2], 32, Global, "6a44 relay anycast", "6a44-relay anycast address, RFC 6751"),
    v4([192, 168, 0, 0], 16, Local, "private", "Private-Use, RFC 1918"),
    v4([192, 175, 48, 0], 24, Global, "AS112", "Direct Delegation AS112 Service, RFC 7534"),
    v4([198, 18, 0, 0], 15, Local, "benchmarking", "Benchmarking, RFC 2544"),
    v4([198, 51, 100, 0], 24, Local, "documentation", "Documentation (TEST-NET-2), RFC 5737"),
    v4([203, 0, 113, 0], 24, Local, "documentation", "Documentation (TEST-NET-3), RFC 5737"),
    // not in the special-purpose registry: the IPv4 Multicast Address Space Registry, RFC 5771
    v4([224, 0, 0, 0], 4, Local, "multicast", "Multicast, RFC 5771"),
    v4([240, 0, 0, 0], 4, Local, "reserved", "Reserved, RFC 1112 section 4"),
    v4([255, 255, 255, 255], 32, Local, "broadcast", "Limited Broadcast, RFC 8190, RFC 919 section 7"),
];

/// The IANA IPv6 Special-Purpose Address Registry, plus multicast, deprecated site-local and the deprecated
/// IPv4-compatible and IPv4-translated forms (RFC 4291, RFC 3879, RFC 2765), which it does not list.
#[rustfmt::skip]
pub static IPV6: &[Row<Ipv6Addr>] = &[
    v6([0, 0, 0, 0, 0, 0, 0, 1], 128, Local, "loopback", "Loopback Address, RFC 4291"),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 128, Local, "unspecified", "Unspecified Address, RFC 4291"),
    v6([0, 0, 0, 0, 0, 0, 0, 0], 96, Local, "IPv4-compatible (deprecated)", "IPv4-Compatible IPv6 Address (deprecated), RFC 4291 section 2.5.5.1"),
    v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96, EmbeddedV4, "IPv4-mapped", "IPv4-mapped Address, RFC 4291"),
    v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96, Local, "IPv4-translated", "IPv4-translated Address, RFC 2765 section 2.1"),
    v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96, EmbeddedV4, "NAT64", "IPv4-IPv6 Translat., RFC 6052"),
    v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48, Local, "local-use NAT64", "IPv4-IPv6 Translat., RFC 8215"),
    v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64, Local, "discard-only", "Discard-Only Address Block, RFC 6666"),
    v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64, Local, "dummy", "Dummy IPv6 Prefix, RFC 9780"),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23, Local, "IETF protocol assignment", "IETF Protocol Assignments, RFC 2928"),
    v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32, Local, "Teredo", "TEREDO, RFC 4380, RFC 8190 (globally reachable: N/A)"),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128, Global, "PCP anycast", "Port Control Protocol Anycast, RFC 7723"),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128, Global, "TURN anycast", "Traversal Using Relays around NAT Anycast, RFC 8155"),
    v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128, Global, "DNS-SD SRP anycast", "DNS-SD Service Registration Protocol Anycast, RFC 9665"),
    v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48, Local, "benchmarking", "Benchmarking, RFC 5180, RFC Errata 1752"),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, Global, "AMT", "AMT, RFC 7450"),
    v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48, Global, "AS112", "AS112-v6, RFC 7535"),
    v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28, Local, "deprecated ORCHID", "Deprecated (previously ORCHID), RFC 4843 (globally reachable: N/A)"),
    v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28, Global, "ORCHIDv2", "ORCHIDv2, RFC 7343"),
    v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28, Global, "drone remote ID", "Drone Remote ID Protocol Entity Tags (DETs) Prefix, RFC 9374"),
    v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32, Local, "documentation", "Documentation, RFC 3849"),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, EmbeddedV4, "6to4", "6to4, RFC 3056 (globally reachable: N/A; judged by the relay's IPv4 address)"),
    v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48, Global, "AS112", "Direct Delegation AS112 Service, RFC 7534"),
    v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20, Local, "documentation", "Documentation, RFC 9637"),
    v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, Local, "SRv6 SID", "Segment Routing (SRv6) SIDs, RFC 9602"),
    v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, Local, "private (unique local)", "Unique-Local, RFC 4193, RFC 8190"),
    v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, Local, "link-local", "Link-Local Unicast, RFC 4291"),
    // not in the special-purpose registry
    v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10, Local, "site-local (deprecated)", "Site-Local (deprecated), RFC 3879"),
    v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, Local, "multicast", "Multicast, RFC 4291 section 2.7"),
];

fn contains_v4(row: &Row<Ipv4Addr>, ip: Ipv4Addr) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(row.len)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(row.net) & mask
}

fn contains_v6(row: &Row<Ipv6Addr>, ip: Ipv6Addr) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(row.len)).unwrap_or(0);
    u128::from(ip) & mask == u128::from(row.net) & mask
}

/// The most specific IPv4 row containing `ip`.
pub fn row_v4(ip: Ipv4Addr) -> Option<&'static Row<Ipv4Addr>> {
    IPV4.iter().filter(|r| contains_v4(r, ip)).max_by_key(|r| r.len)
}

/// The most specific IPv6 row containing `ip`.
pub fn row_v6(ip: Ipv6Addr) -> Option<&'static Row<Ipv6Addr>> {
    IPV6.iter().filter(|r| contains_v6(r, ip)).max_by_key(|r| r.len)
}

/// Why an address is not allowed, or `None` when it is globally reachable.
pub fn non_public_kind(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_kind(v4),
        IpAddr::V6(v6) => v6_kind(v6),
    }
}

fn v4_kind(ip: Ipv4Addr) -> Option<&'static str> {
    let row = row_v4(ip)?;
    match row.reach {
        Global => None,
        // no IPv4 row embeds anything; judged as local to be safe if one ever does
        Local | EmbeddedV4 => Some(row.kind),
    }
}

fn v6_kind(ip: Ipv6Addr) -> Option<&'static str> {
    let row = row_v6(ip)?;
    match row.reach {
        Global => None,
        Local => Some(row.kind),
        EmbeddedV4 => v4_kind(embedded_v4(ip)),
    }
}

/// The IPv4 address an IPv4-mapped, NAT64 (`64:ff9b::/96`: the last 32 bits) or 6to4 (`2002::/16`: bits
/// 16-47) address carries.
fn embedded_v4(ip: Ipv6Addr) -> Ipv4Addr {
    let seg = ip.segments();
    let (hi, lo) = if seg[0] == 0x2002 {
        (seg[1], seg[2])
    } else {
        (seg[6], seg[7])
    };
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

    /// An address this row decides: inside the block and in no more specific row. Embedding rows get an
    /// address that carries 8.8.8.8 where they keep the IPv4 address.
    fn sample_v4(row: &Row<Ipv4Addr>) -> Ipv4Addr {
        let net = u32::from(row.net);
        let last = net | !u32::MAX.checked_shl(32 - u32::from(row.len)).unwrap_or(0);
        [net | 1, last.saturating_sub(1), last, net]
            .into_iter()
            .map(Ipv4Addr::from)
            .find(|ip| contains_v4(row, *ip) && row_v4(*ip).is_some_and(|r| std::ptr::eq(r, row)))
            .unwrap_or_else(|| panic!("no address decided by {}", row.source))
    }

    fn sample_v6(row: &Row<Ipv6Addr>) -> Ipv6Addr {
        let net = u128::from(row.net);
        if row.reach == EmbeddedV4 {
            let embedded = if row.net.segments()[0] == 0x2002 {
                0x0808_0808u128 << 80
            } else {
                0x0808_0808
            };
            return Ipv6Addr::from(net | embedded);
        }
        let last = net | !u128::MAX.checked_shl(128 - u32::from(row.len)).unwrap_or(0);
        [net | 1, last.saturating_sub(1), last, net]
            .into_iter()
            .map(Ipv6Addr::from)
            .find(|ip| contains_v6(row, *ip) && row_v6(*ip).is_some_and(|r| std::ptr::eq(r, row)))
            .unwrap_or_else(|| panic!("no address decided by {}", row.source))
    }

    /// `ip`, an address of `row`'s block, is looked up to `row` itself (no longer or other row wins).
    fn assert_decided_by<A: std::fmt::Display>(
        found: Option<&Row<A>>,
        row: &Row<A>,
        ip: impl std::fmt::Display,
    ) {
        let found = found.map(|r| r.source);
        assert_eq!(found, Some(row.source), "{ip} in {}/{}", row.net, row.len);
    }

    /// Every row, one verdict each: an address inside the block is judged by that row (globally reachable →
    /// allowed, otherwise refused with the row's kind), and an embedding row is judged by what it embeds.
    #[test]
    fn every_registry_row_decides_its_block() {
        for row in IPV4 {
            let ip = sample_v4(row);
            assert_decided_by(row_v4(ip), row, ip);
            let want = match row.reach {
                Global => None,
                Local | EmbeddedV4 => Some(row.kind),
            };
            assert_eq!(v4_kind(ip), want, "{ip}: {}", row.source);
            // the address just past the block is not in it
            let mask = u32::MAX.checked_shl(32 - u32::from(row.len)).unwrap_or(0);
            let past = (u32::from(row.net) | !mask).wrapping_add(1);
            assert!(
                !contains_v4(row, Ipv4Addr::from(past)) || row.len == 0,
                "{past} past {}/{}",
                row.net,
                row.len
            );
        }
        for row in IPV6 {
            let ip = sample_v6(row);
            assert_decided_by(row_v6(ip), row, ip);
            let want = match row.reach {
                Global => None,
                Local => Some(row.kind),
                // 8.8.8.8 inside: a public IPv4 address, allowed through the mapping/translator/relay
                EmbeddedV4 => None,
            };
            assert_eq!(v6_kind(ip), want, "{ip}: {}", row.source);
        }
    }

    /// The blocks the old hand-written checks missed (issue #22), and the classics.
    #[test]
    fn refuses_every_non_global_spelling() {
        let refused = [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("172.31.255.255", "private"),
            ("192.168.1.1", "private"),
            ("169.254.169.254", "link-local"),
            ("100.64.0.1", "shared (CGNAT)"),
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "\"this network\""),
            ("224.0.0.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("240.0.0.1", "reserved"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.254", "benchmarking"),
            ("192.0.0.1", "IPv4 service continuity"),
            ("192.0.0.8", "dummy"),
            ("192.0.0.100", "IETF protocol assignment"),
            ("192.0.0.170", "NAT64/DNS64 discovery"),
            ("192.0.2.10", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.9", "documentation"),
            ("192.88.99.1", "deprecated 6to4 relay anycast"),
            ("::1", "loopback"),
            ("::", "unspecified"),
            ("fe80::1", "link-local"),
            ("fc00::1", "private (unique local)"),
            ("fd12:3456::1", "private (unique local)"),
            ("fec0::1", "site-local (deprecated)"),
            ("ff02::1", "multicast"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "link-local"),
            ("::ffff:0.0.0.0", "unspecified"),
            ("::ffff:198.18.0.1", "benchmarking"),
            ("::ffff:0:7f00:1", "IPv4-translated"),
            ("::127.0.0.1", "IPv4-compatible (deprecated)"),
            ("::8.8.8.8", "IPv4-compatible (deprecated)"),
            ("64:ff9b::a00:1", "private"),
            ("64:ff9b::7f00:1", "loopback"),
            ("64:ff9b::c612:1", "benchmarking"),
            ("64:ff9b:1::808:808", "local-use NAT64"),
            ("64:ff9b:1:ffff::1", "local-use NAT64"),
            ("2002:c0a8:101::1", "private"),
            ("2002:7f00:1::", "loopback"),
            ("2001::1", "Teredo"),
            ("2001:2::1", "benchmarking"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("100::1", "discard-only"),
            ("5f00::1", "SRv6 SID"),
        ];
        for (ip, kind) in refused {
            let parsed: IpAddr = ip.parse().expect("ip");
            assert_eq!(
                non_public_kind(parsed),
                Some(kind),
                "{ip} should be refused as {kind}"
            );
        }
        let allowed = [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "198.20.0.1",
            "192.0.1.1",
            "149.154.167.220",
            "192.0.0.9",
            "2001:4860:4860::8888",
            "2a00:1450:4001::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:1::1",
        ];
        for ip in allowed {
            let parsed: IpAddr = ip.parse().expect("ip");
            assert_eq!(non_public_kind(parsed), None, "{ip} should be allowed");
        }
    }
}
