//! Which address a request comes from: the TCP peer, or — only when that peer is a proxy listed in
//! `--trusted-proxies` (`KLAXON_TRUSTED_PROXIES`) — the address it forwarded in `X-Forwarded-For`.
//!
//! A proxy appends the address it received the request from to `X-Forwarded-For`, so the header reads
//! `client, proxy1, proxy2` and the TCP peer is the last proxy. Everything left of the entry our own proxy added
//! is what the client sent, and a client can send anything: the client is the **right-most** entry that is not
//! itself a trusted proxy. Nothing is read from the header when the peer is not trusted (the default: no proxy
//! is trusted), so a direct client cannot pick the address its wrong tokens are counted against.
//!
//! The resolved address is what the wrong-token throttle counts and what the "no `KLAXON_API_TOKEN`: loopback
//! clients only" rule looks at.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use axum::http::HeaderMap;

/// Most `X-Forwarded-For` entries read (from the right): a longer chain is not a chain of our proxies.
const MAX_HOPS: usize = 32;

/// One trusted address or network (`10.0.0.5`, `10.0.0.0/8`, `fd00::/8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    addr: IpAddr,
    prefix: u8,
}

impl Net {
    fn parse(s: &str) -> Result<Net, String> {
        let (a, p) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = a.trim().parse().map_err(|_| {
            format!("`{s}` is not an IP address or CIDR network (e.g. 10.0.0.5, 10.0.0.0/8, fd00::/8)")
        })?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            None => max,
            Some(p) => p
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("`{s}`: the prefix length must be 0 to {max}"))?,
        };
        Ok(Net {
            addr: normalize(addr),
            prefix: if normalize(addr) != addr {
                prefix.saturating_sub(96)
            } else {
                prefix
            },
        })
    }

    fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, normalize(ip)) {
            (IpAddr::V4(n), IpAddr::V4(a)) => masked(
                u128::from(u32::from(n)),
                u128::from(u32::from(a)),
                32,
                self.prefix,
            ),
            (IpAddr::V6(n), IpAddr::V6(a)) => masked(u128::from(n), u128::from(a), 128, self.prefix),
            _ => false,
        }
    }
}

/// Whether `a` and `b` (numbers of `bits` bits) agree on their first `prefix` bits.
fn masked(a: u128, b: u128, bits: u8, prefix: u8) -> bool {
    let host = u32::from(bits.saturating_sub(prefix));
    let mask = if host >= 128 { 0 } else { !0u128 << host };
    (a & mask) == (b & mask)
}

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.5`, what a dual-stack socket reports) as the IPv4 one.
fn normalize(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `--trusted-proxies`: the proxies whose `X-Forwarded-For` is believed. Default: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<Net>);

impl TrustedProxies {
    /// A comma-separated list of IP addresses and CIDR networks (empty: none).
    pub fn parse(list: &str) -> Result<Self, String> {
        list.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(Net::parse)
            .collect::<Result<Vec<_>, _>>()
            .map(TrustedProxies)
    }

    /// True when no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|n| n.contains(ip))
    }

    /// The client of a request that came from `peer` with `headers`: `peer` unless it is trusted; then the
    /// right-most `X-Forwarded-For` entry that is not trusted (the left-most one when all are; the last trusted
    /// hop when an entry is not an address).
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if !self.trusts(peer) {
            return peer;
        }
        let mut client = peer;
        let entries = headers
            .get_all("x-forwarded-for")
            .iter()
            .rev()
            .flat_map(|v| v.to_str().unwrap_or("").rsplit(','))
            .take(MAX_HOPS);
        for entry in entries {
            match forwarded_ip(entry) {
                Some(ip) => {
                    client = normalize(ip);
                    if !self.trusts(ip) {
                        break;
                    }
                }
                None => break,
            }
        }
        client
    }
}

impl std::str::FromStr for TrustedProxies {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        TrustedProxies::parse(s)
    }
}

/// One `X-Forwarded-For` entry: an address, also with a port (`192.0.2.1:4711`, `[2001:db8::1]:4711`).
fn forwarded_ip(entry: &str) -> Option<IpAddr> {
    let e = entry.trim();
    if let Ok(ip) = e.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Some(rest) = e.strip_prefix('[') {
        return rest
            .split_once(']')
            .and_then(|(a, _)| a.parse::<Ipv6Addr>().ok())
            .map(IpAddr::V6);
    }
    e.rsplit_once(':')
        .and_then(|(a, port)| port.parse::<u16>().ok().and(a.parse::<Ipv4Addr>().ok()))
        .map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).expect("value"));
        }
        h
    }

    #[test]
    fn parses_addresses_and_networks_and_refuses_the_rest() {
        let t =
            TrustedProxies::parse(" 10.0.0.5, 192.168.0.0/16 ,fd00::/8,::ffff:172.16.0.1").expect("valid");
        for yes in [
            "10.0.0.5",
            "192.168.44.1",
            "fd12::1",
            "172.16.0.1",
            "::ffff:10.0.0.5",
        ] {
            assert!(t.trusts(ip(yes)), "{yes}");
        }
        for no in ["10.0.0.6", "192.169.0.1", "fe80::1", "127.0.0.1"] {
            assert!(!t.trusts(ip(no)), "{no}");
        }
        assert!(TrustedProxies::parse("").expect("empty").is_empty());
        assert!(TrustedProxies::parse("0.0.0.0/0")
            .expect("all")
            .trusts(ip("203.0.113.9")));
        for bad in ["10.0.0.0/33", "fd00::/129", "example.com", "10.0.0.0/x", "10.0.0"] {
            let e = TrustedProxies::parse(bad).expect_err(bad);
            assert!(e.contains(bad.split('/').next().unwrap_or(bad)), "{e}");
        }
    }

    #[test]
    fn the_header_counts_only_from_a_trusted_peer_and_only_its_right_most_untrusted_entry() {
        let t = TrustedProxies::parse("127.0.0.1, 10.0.0.0/8").expect("valid");
        let peer = ip("127.0.0.1");
        // (peer, X-Forwarded-For values, client)
        let table: &[(&str, &[&str], &str)] = &[
            // not a trusted peer: the header is ignored
            ("203.0.113.7", &["198.51.100.1"], "203.0.113.7"),
            // trusted peer, no header: the peer
            ("127.0.0.1", &[], "127.0.0.1"),
            ("127.0.0.1", &["198.51.100.1"], "198.51.100.1"),
            // a client-supplied left part is not believed: the right-most untrusted entry wins
            ("127.0.0.1", &["6.6.6.6, 198.51.100.1"], "198.51.100.1"),
            (
                "127.0.0.1",
                &["6.6.6.6", "198.51.100.1, 10.1.2.3"],
                "198.51.100.1",
            ),
            // every entry trusted: the left-most
            ("127.0.0.1", &["10.0.0.9, 10.1.2.3"], "10.0.0.9"),
            // ports and IPv6
            ("127.0.0.1", &["198.51.100.1:4711"], "198.51.100.1"),
            ("127.0.0.1", &["[2001:db8::7]:443"], "2001:db8::7"),
            ("127.0.0.1", &["2001:db8::7"], "2001:db8::7"),
            // garbage where an address should be: the last trusted hop
            ("127.0.0.1", &["nonsense, 10.1.2.3"], "10.1.2.3"),
            ("127.0.0.1", &["unknown"], "127.0.0.1"),
        ];
        for (p, values, want) in table {
            assert_eq!(t.client(ip(p), &xff(values)), ip(want), "{p} {values:?}");
        }
        // nothing is trusted by default
        let none = TrustedProxies::default();
        assert_eq!(none.client(peer, &xff(&["198.51.100.1"])), peer);
    }
}
