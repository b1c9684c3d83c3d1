//! Request guards in front of the API and the console: what a web page can make a browser send is refused before
//! authentication and before any handler runs.
//!
//! ```text
//!  request ──▶ Host allowed? ──no──▶ 421     (DNS rebinding)
//!          ──▶ POST/PUT/PATCH/DELETE from another site? ──yes──▶ 403   (cross-site request forgery)
//!          ──▶ auth ──▶ /api/v1 POST/PUT/PATCH: Content-Type application/json? ──no──▶ 415
//! ```
//!
//! - **Host.** A page of `attacker.example` whose DNS name is re-pointed at 127.0.0.1 after it loaded reads and
//!   writes Klaxon as if it were its own origin — but the browser still sends `Host: attacker.example`. Allowed:
//!   `localhost` and the loopback addresses, the bound address of `--http-addr` — every IP address when that is
//!   `0.0.0.0` or `[::]` (all of the machine's addresses are bound then; Kubernetes probes and scrapes come by pod
//!   IP) —, and the names and addresses of `--allowed-hosts` (`*.example.com` for every subdomain, `*` to turn the
//!   check off). The port is not part of the decision. (An IP literal is never a rebinding vector — rebinding
//!   needs a *name* — so the address rule is about predictability, not safety.)
//! - **Cross-site.** A page of another site can send simple requests (`fetch(…, {mode: "no-cors"})`, a form with
//!   `enctype="text/plain"`) without reading the answer. State-changing methods are refused when the browser
//!   says the request comes from elsewhere: `Sec-Fetch-Site: cross-site` or `same-site` (another port of the
//!   same host is the same *site*, so a local dev server's page is `same-site`), or — for a browser that does not
//!   send `Sec-Fetch-Site` — an `Origin` that is not the request's own (`null` included). A request with neither
//!   header is not from a browser (curl, scripts) and passes; the console's CSRF tokens and the API's
//!   `application/json` requirement still apply to it.
//! - **Content-Type.** `application/json` cannot be sent cross-site without a CORS preflight, which Klaxon never
//!   grants; every other type a form or a no-cors fetch can send is refused with 415.
//!
//! The decisions are pure functions of header values (table tests below); `lib.rs` and `console/mod.rs` render a
//! [`Refusal`] in their own formats (JSON, HTML page).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use axum::extract::Request;
use axum::http::{header, Method, StatusCode};

/// Longest piece of a header value quoted back in an error message.
const MAX_QUOTED: usize = 100;

/// The hosts the API and the console answer to: `localhost` and loopback addresses always, the bound address
/// ([`AllowedHosts::bound_to`]), and what `--allowed-hosts` lists.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AllowedHosts {
    /// `*`: no check.
    any: bool,
    /// Bound to `0.0.0.0` / `[::]`: every IP address.
    any_ip: bool,
    /// Addresses listed, and the bound one.
    ips: Vec<IpAddr>,
    /// Exact names, lower case, without a trailing dot.
    names: Vec<String>,
    /// `*.example.com` stored as `.example.com`: every name that ends with it.
    suffixes: Vec<String>,
}

impl AllowedHosts {
    /// Parses `--allowed-hosts`: comma-separated host names or IP addresses (no scheme, no port), `*.example.com`
    /// for every subdomain of `example.com` (not `example.com` itself), `*` for any. Empty entries are ignored.
    pub fn parse(list: &str) -> Result<Self, String> {
        let mut out = AllowedHosts::default();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if entry == "*" {
                out.any = true;
                continue;
            }
            let (wildcard, name) = match entry.strip_prefix("*.") {
                Some(rest) => (true, rest),
                None => (false, entry),
            };
            if name.contains("://") || name.contains('/') {
                return Err(format!(
                    "`{entry}` is not a host name: give the name alone, e.g. klaxon.example.com"
                ));
            }
            let ip = name
                .parse::<IpAddr>()
                .ok()
                .or_else(|| bracketed_ipv6(name).map(IpAddr::V6));
            if let Some(ip) = ip {
                if wildcard {
                    return Err(format!(
                        "`{entry}`: a wildcard takes a domain name, not an address"
                    ));
                }
                out = out.bound_to(ip);
                continue;
            }
            if name.contains(':') {
                return Err(format!(
                    "`{entry}`: give the host name without a port (every port of an allowed name is accepted)"
                ));
            }
            let Some(norm) = normalize_name(name) else {
                return Err(format!(
                    "`{entry}` is not a host name (letters, digits, `-`, `_` and dots; `*.example.com` for subdomains, `*` for any)"
                ));
            };
            if wildcard {
                if !norm.contains('.') {
                    return Err(format!(
                        "`{entry}` would match every name under a top-level domain: name a domain of your own (`*.example.com`), or `*` to turn the check off"
                    ));
                }
                out.suffixes.push(format!(".{norm}"));
            } else {
                out.names.push(norm);
            }
        }
        Ok(out)
    }

    /// Also allows the address the server is bound to: every IP address when it is unspecified (`0.0.0.0`,
    /// `[::]`).
    pub fn bound_to(mut self, ip: IpAddr) -> Self {
        let ip = ip.to_canonical();
        if ip.is_unspecified() {
            self.any_ip = true;
        } else if !self.ips.contains(&ip) {
            self.ips.push(ip);
        }
        self
    }

    /// Also allows `host` (a name or an address, as [`url::Url::host_str`] gives it): the host of `--public-url`,
    /// which action links point browsers at. A host that is not a valid name is ignored.
    pub fn allowing(mut self, host: &str) -> Self {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if let Ok(ip) = host.parse::<IpAddr>() {
            return self.bound_to(ip);
        }
        if let Some(norm) = normalize_name(host) {
            if !self.names.contains(&norm) {
                self.names.push(norm);
            }
        }
        self
    }

    /// True when a request with this `Host` (or request-target authority) may be served.
    pub fn allows(&self, authority: &str) -> bool {
        if self.any {
            return true;
        }
        match split_authority(authority) {
            None => false,
            Some((HostPart::Ip(ip), _)) => {
                let ip = ip.to_canonical();
                self.any_ip || ip.is_loopback() || self.ips.contains(&ip)
            }
            Some((HostPart::Name(n), _)) => {
                n == "localhost"
                    || self.names.contains(&n)
                    || self.suffixes.iter().any(|s| n.ends_with(s.as_str()))
            }
        }
    }

    /// True when every host passes (`*`).
    pub fn is_any(&self) -> bool {
        self.any
    }
}

/// The host of a `Host` header or an origin: an address or a (normalised) name.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPart {
    Ip(IpAddr),
    Name(String),
}

fn bracketed_ipv6(s: &str) -> Option<Ipv6Addr> {
    s.strip_prefix('[')?.strip_suffix(']')?.parse().ok()
}

/// A DNS name in lower case without its trailing dot, or None when it is not one.
fn normalize_name(s: &str) -> Option<String> {
    let s = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
    let ok = !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        });
    ok.then_some(s)
}

/// Splits `host[:port]` / `[v6][:port]` into its host and port; None when it is malformed.
fn split_authority(authority: &str) -> Option<(HostPart, Option<u16>)> {
    let a = authority.trim();
    let (host, port) = if a.starts_with('[') {
        let end = a.find(']')?;
        let ip = bracketed_ipv6(&a[..=end])?;
        (HostPart::Ip(IpAddr::V6(ip)), &a[end + 1..])
    } else {
        let (h, p) = match a.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (a, None),
        };
        let host = match h.parse::<Ipv4Addr>() {
            Ok(ip) => HostPart::Ip(IpAddr::V4(ip)),
            Err(_) => HostPart::Name(normalize_name(h)?),
        };
        (host, p.map_or("", |_| &a[h.len()..]))
    };
    let port = match port {
        "" | ":" => None,
        p => Some(p.strip_prefix(':')?.parse::<u16>().ok()?),
    };
    Some((host, port))
}

/// A request refused by a guard: the status and a message saying why and what to change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

/// A header value quoted in a message: cut, and only printable ASCII (the renderers escape it too).
fn quoted(v: &str) -> String {
    let mut s: String = v
        .chars()
        .take(MAX_QUOTED)
        .map(|c| if c.is_ascii_graphic() || c == ' ' { c } else { '?' })
        .collect();
    if v.chars().count() > MAX_QUOTED {
        s.push('…');
    }
    s
}

/// The Host decision for one request: every authority it names (the `Host` header, and the request target's when
/// it is in absolute form) must be allowed. A request that names none is not from a browser and passes.
fn check_host(hosts: &AllowedHosts, req: &Request) -> Result<(), Refusal> {
    let mut values = req.headers().get_all(header::HOST).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(Refusal {
            status: StatusCode::BAD_REQUEST,
            message: "more than one Host header".into(),
        });
    }
    let host = match first.map(|v| v.to_str()) {
        None => None,
        Some(Ok(v)) => Some(v),
        Some(Err(_)) => {
            return Err(Refusal {
                status: StatusCode::BAD_REQUEST,
                message: "the Host header is not ASCII".into(),
            })
        }
    };
    let target = req.uri().authority().map(|a| a.as_str());
    for authority in [host, target].into_iter().flatten() {
        if !hosts.allows(authority) {
            return Err(Refusal {
                status: StatusCode::MISDIRECTED_REQUEST,
                message: format!(
                    "this server does not answer to the host `{}`: if clients reach Klaxon by that name or address, add it to --allowed-hosts (KLAXON_ALLOWED_HOSTS); localhost, loopback addresses and the --http-addr address always work (the check stops DNS-rebinding attacks from web pages)",
                    quoted(authority)
                ),
            });
        }
    }
    Ok(())
}

/// Methods that change nothing; every other method is state-changing.
fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

/// Why a state-changing request with these headers is refused as coming from another site, or None.
///
/// `Sec-Fetch-Site` decides when a browser sent it (it cannot be set by a page, and it survives a
/// `Referrer-Policy: no-referrer`, under which browsers send `Origin: null` even on same-origin form posts);
/// otherwise `Origin` must be the request's own origin: the same host as `Host` and the same port (a `Host`
/// without a port means the default port of the origin's scheme, so `https://k.example.com` matches
/// `Host: k.example.com` behind a TLS proxy). Neither header: not a browser.
pub(crate) fn cross_site(
    host: Option<&str>,
    origin: Option<&str>,
    fetch_site: Option<&str>,
) -> Option<String> {
    match fetch_site.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        Some("same-origin") | Some("none") => return None,
        Some(site @ ("same-site" | "cross-site")) => {
            return Some(format!(
                "cross-site request refused: the browser says it comes from another {} page (Sec-Fetch-Site: {site}); use Klaxon's own pages, or a client that is not a browser",
                if site == "same-site" { "site's or port's" } else { "site's" }
            ));
        }
        // Absent, or a value this code does not know: decide on Origin.
        _ => {}
    }
    let origin = origin?.trim();
    let refuse = |why: String| {
        Some(format!(
            "cross-site request refused: {why}; behind a reverse proxy, pass the original Host header (nginx: `proxy_set_header Host $http_host;`)"
        ))
    };
    if origin.eq_ignore_ascii_case("null") {
        return refuse("the browser hides where it comes from (Origin: null)".into());
    }
    let Some((scheme, rest)) = origin.split_once("://") else {
        return refuse(format!("Origin `{}` is not an origin", quoted(origin)));
    };
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "http" => 80,
        "https" => 443,
        _ => return refuse(format!("Origin `{}` is not an http(s) origin", quoted(origin))),
    };
    let Some((o_host, o_port)) = split_authority(rest) else {
        return refuse(format!("Origin `{}` is not an origin", quoted(origin)));
    };
    let Some((h_host, h_port)) = host.and_then(split_authority) else {
        return refuse(format!("Origin `{}` with no usable Host header", quoted(origin)));
    };
    if o_host == h_host && o_port.unwrap_or(default_port) == h_port.unwrap_or(default_port) {
        None
    } else {
        refuse(format!(
            "Origin `{}` is not this server's origin (Host `{}`)",
            quoted(origin),
            quoted(host.unwrap_or_default())
        ))
    }
}

/// The guards every API and console request passes: Host, then (for state-changing methods) cross-site.
pub(crate) fn check(hosts: &AllowedHosts, req: &Request) -> Result<(), Refusal> {
    check_host(hosts, req)?;
    if is_safe(req.method()) {
        return Ok(());
    }
    let h = req.headers();
    let text = |name: header::HeaderName| h.get(name).map(|v| v.to_str().unwrap_or("\u{fffd}"));
    let host = text(header::HOST).or_else(|| req.uri().authority().map(|a| a.as_str()));
    match cross_site(
        host,
        text(header::ORIGIN),
        text(header::HeaderName::from_static("sec-fetch-site")),
    ) {
        None => Ok(()),
        Some(message) => Err(Refusal {
            status: StatusCode::FORBIDDEN,
            message,
        }),
    }
}

/// True for `application/json`, with or without parameters (`; charset=utf-8`), in any letter case.
pub(crate) fn is_json(content_type: Option<&str>) -> bool {
    content_type
        .and_then(|v| v.split(';').next())
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// The API's body check: a POST, PUT or PATCH under `/api/v1` must say `Content-Type: application/json` (an
/// empty body too: `POST …/dead/replay` with no body replays everything).
pub(crate) fn check_json(req: &Request) -> Result<(), Refusal> {
    if !matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH) {
        return Ok(());
    }
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("\u{fffd}"));
    if is_json(ct) {
        return Ok(());
    }
    Err(Refusal {
        status: StatusCode::UNSUPPORTED_MEDIA_TYPE,
        message: match ct {
            None => "the request has no Content-Type: send `Content-Type: application/json` (curl: -H 'Content-Type: application/json')".into(),
            Some(t) => format!(
                "Content-Type `{}` is not accepted: send `Content-Type: application/json` (curl: -H 'Content-Type: application/json')",
                quoted(t)
            ),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_public_urls_host_is_allowed() {
        let h = AllowedHosts::default().allowing("Klaxon.Example.com");
        assert!(h.allows("klaxon.example.com:443"));
        assert!(!h.allows("evil.example.com"));
        let h = AllowedHosts::default().allowing("[2001:db8::1]");
        assert!(h.allows("[2001:db8::1]:9464"));
        assert_eq!(
            AllowedHosts::default().allowing("not a host"),
            AllowedHosts::default()
        );
    }

    #[test]
    fn allowed_hosts_parse_and_refuse_with_a_reason() {
        let ok = [
            ("", AllowedHosts::default()),
            (
                " Klaxon.Example.com. , ,*.svc.cluster.local,203.0.113.9,[2001:db8::1],2001:db8::1,::ffff:192.0.2.1",
                AllowedHosts {
                    names: vec!["klaxon.example.com".into()],
                    suffixes: vec![".svc.cluster.local".into()],
                    ips: vec![ip("203.0.113.9"), ip("2001:db8::1"), ip("192.0.2.1")],
                    ..Default::default()
                },
            ),
            (
                "*,a",
                AllowedHosts {
                    any: true,
                    names: vec!["a".into()],
                    ..Default::default()
                },
            ),
            (
                "klaxon_metrics,0.0.0.0",
                AllowedHosts {
                    any_ip: true,
                    names: vec!["klaxon_metrics".into()],
                    ..Default::default()
                },
            ),
        ];
        for (spec, want) in ok {
            assert_eq!(AllowedHosts::parse(spec), Ok(want), "{spec:?}");
        }
        let bad = [
            ("https://k.example.com", "not a host name"),
            ("k.example.com/", "not a host name"),
            ("k.example.com:8443", "without a port"),
            ("*.com", "top-level domain"),
            ("*.127.0.0.1", "not an address"),
            ("exa mple.com", "not a host name"),
            ("a..b", "not a host name"),
            ("*", ""),
        ];
        for (spec, says) in bad {
            match AllowedHosts::parse(spec) {
                Err(e) => assert!(e.contains(says), "{spec:?}: {e}"),
                Ok(h) => assert!(spec == "*" && h.is_any(), "{spec:?} was accepted"),
            }
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn host_matching() {
        let hosts = AllowedHosts::parse("klaxon.example.com,*.svc.cluster.local,203.0.113.9")
            .expect("parse")
            .bound_to(ip("10.1.2.3"));
        let table = [
            // loopback names and addresses, any port
            ("localhost", true),
            ("LOCALHOST:9464", true),
            ("localhost.:9464", true),
            ("127.0.0.1:9464", true),
            ("127.0.0.1", true),
            ("127.1.2.3:9464", true),
            ("[::1]:9464", true),
            ("[::1]", true),
            ("[::ffff:127.0.0.1]:9464", true),
            // the bound address and the listed one; other addresses are not
            ("10.1.2.3:9464", true),
            ("203.0.113.9", true),
            ("[::ffff:10.1.2.3]", true),
            ("10.1.2.4:9464", false),
            ("0.0.0.0:9464", false),
            ("[fd00::5]:80", false),
            // configured names, any port; wildcards: subdomains at any depth, not the domain itself
            ("klaxon.example.com", true),
            ("Klaxon.Example.Com:443", true),
            ("a.svc.cluster.local:9464", true),
            ("x.y.svc.cluster.local", true),
            ("svc.cluster.local", false),
            ("evilsvc.cluster.local", false),
            // everything else
            ("attacker.example:9464", false),
            ("klaxon.example.com.attacker.example", false),
            ("localhost.attacker.example", false),
            ("127.0.0.1.nip.io:9464", false),
            ("2130706433:9464", false),
            ("", false),
            ("[::1", false),
            ("::1", false),
            ("localhost:99999", false),
            ("localhost:x", false),
            ("a b", false),
        ];
        for (authority, want) in table {
            assert_eq!(hosts.allows(authority), want, "{authority:?}");
        }
        let none = AllowedHosts::default();
        assert!(none.allows("localhost:1") && none.allows("127.0.0.1:9464"));
        assert!(!none.allows("klaxon.example.com") && !none.allows("192.168.1.5:9464"));
        // Bound to every address: every address passes (probes and scrapes by pod IP), names still do not.
        for unspecified in ["0.0.0.0", "::"] {
            let all = AllowedHosts::default().bound_to(ip(unspecified));
            assert!(
                all.allows("192.168.1.5:9464") && all.allows("[fd00::5]:9464"),
                "{unspecified}"
            );
            assert!(!all.allows("attacker.example:9464"), "{unspecified}");
        }
        let any = AllowedHosts::parse("*").expect("parse");
        assert!(any.allows("attacker.example:9464") && any.allows("garbage host"));
    }

    #[test]
    fn cross_site_decision() {
        let h = Some("127.0.0.1:9464");
        type Row<'a> = (Option<&'a str>, Option<&'a str>, Option<&'a str>, bool);
        let table: [Row; 22] = [
            // (host, origin, sec-fetch-site, refused)
            // not a browser: curl, the CLI, scripts
            (h, None, None, false),
            // Sec-Fetch-Site decides when present: the console's own forms send `Origin: null` under
            // Referrer-Policy: no-referrer, with same-origin
            (h, Some("null"), Some("same-origin"), false),
            (h, Some("http://127.0.0.1:9464"), Some("same-origin"), false),
            (h, None, Some("none"), false),
            (h, None, Some("Same-Origin"), false),
            (h, Some("http://127.0.0.1:9464"), Some("cross-site"), true),
            // another port of the same host is the same site: a local dev server's page
            (h, Some("http://127.0.0.1:3000"), Some("same-site"), true),
            (h, None, Some("same-site"), true),
            // no Sec-Fetch-Site (older browsers): Origin must be this server's own
            (h, Some("http://127.0.0.1:9464"), None, false),
            (h, Some("http://127.0.0.1:3000"), None, true),
            (h, Some("http://localhost:9464"), None, true),
            (h, Some("https://attacker.example"), None, true),
            (h, Some("null"), None, true),
            (h, Some("garbage"), None, true),
            (h, Some("ftp://127.0.0.1:9464"), None, true),
            // an unknown Sec-Fetch-Site value: Origin decides
            (h, Some("http://127.0.0.1:9464"), Some("weird"), false),
            (h, Some("http://evil.example"), Some("weird"), true),
            // behind a TLS proxy that passes the original Host: default ports on both sides
            (Some("k.example.com"), Some("https://k.example.com"), None, false),
            (
                Some("k.example.com:443"),
                Some("https://K.example.com"),
                None,
                false,
            ),
            (
                Some("k.example.com"),
                Some("https://k.example.com:8443"),
                None,
                true,
            ),
            (Some("[::1]:9464"), Some("http://[::1]:9464"), None, false),
            // a browser always sends Host; an Origin without one is not trusted
            (None, Some("http://127.0.0.1:9464"), None, true),
        ];
        for (host, origin, site, refused) in table {
            let got = cross_site(host, origin, site);
            assert_eq!(got.is_some(), refused, "{host:?} {origin:?} {site:?}: {got:?}");
        }
        let why = cross_site(h, Some("http://localhost:3000"), None).expect("refused");
        assert!(
            why.contains("http://localhost:3000") && why.contains("proxy_set_header"),
            "{why}"
        );
    }

    #[test]
    fn content_type_is_json_or_refused() {
        for (ct, want) in [
            (Some("application/json"), true),
            (Some("application/json; charset=utf-8"), true),
            (Some("Application/JSON;charset=UTF-8"), true),
            (Some(" application/json "), true),
            (Some("text/plain"), false),
            (Some("text/plain; application/json"), false),
            (Some("application/x-www-form-urlencoded"), false),
            (Some("multipart/form-data; boundary=x"), false),
            (Some("application/jsonx"), false),
            (Some("application/merge-patch+json"), false),
            (Some(""), false),
            (None, false),
        ] {
            assert_eq!(is_json(ct), want, "{ct:?}");
        }
    }

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut b = Request::builder().method(method).uri("/api/v1/events");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(axum::body::Body::empty()).expect("request")
    }

    #[test]
    fn guards_on_whole_requests() {
        let hosts = AllowedHosts::default();
        let status = |r: Result<(), Refusal>| r.err().map(|r| r.status.as_u16());
        let table = [
            (Method::GET, vec![("host", "attacker.example:9464")], Some(421)),
            (
                Method::GET,
                vec![("host", "127.0.0.1:9464"), ("origin", "http://evil.example")],
                None,
            ),
            (
                Method::POST,
                vec![("host", "127.0.0.1:9464"), ("origin", "http://evil.example")],
                Some(403),
            ),
            (
                Method::DELETE,
                vec![("host", "127.0.0.1:9464"), ("sec-fetch-site", "cross-site")],
                Some(403),
            ),
            (
                Method::PUT,
                vec![("host", "localhost:9464"), ("sec-fetch-site", "same-origin")],
                None,
            ),
            (Method::POST, vec![("host", "127.0.0.1:9464")], None),
            (Method::POST, vec![], None),
            (Method::POST, vec![("host", "a"), ("host", "b")], Some(400)),
            (
                Method::POST,
                vec![("host", "attacker.example"), ("sec-fetch-site", "same-origin")],
                Some(421),
            ),
        ];
        for (method, headers, want) in table {
            let req = request(method.clone(), &headers);
            assert_eq!(status(check(&hosts, &req)), want, "{method} {headers:?}");
        }
        // an absolute-form request target is checked too
        let req = Request::builder()
            .uri("http://attacker.example:9464/api/v1/dead")
            .header("host", "127.0.0.1:9464")
            .body(axum::body::Body::empty())
            .expect("request");
        assert_eq!(status(check(&hosts, &req)), Some(421));

        for (method, ct, want) in [
            (Method::POST, Some("application/json"), None),
            (Method::POST, Some("text/plain"), Some(415)),
            (Method::PUT, None, Some(415)),
            (
                Method::PATCH,
                Some("application/x-www-form-urlencoded"),
                Some(415),
            ),
            (Method::DELETE, None, None),
            (Method::GET, Some("text/plain"), None),
        ] {
            let headers: Vec<(&str, &str)> = ct.map(|c| ("content-type", c)).into_iter().collect();
            let req = request(method.clone(), &headers);
            assert_eq!(status(check_json(&req)), want, "{method} {ct:?}");
        }
    }
}
