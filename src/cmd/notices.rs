//! What `klaxon run|worker|sender` say once at start beyond "started": where the console is and what to do next,
//! and the deployment traps `klaxon doctor` also reports that a running process can see for itself (an evicting
//! Redis). Logged at info/warn on stderr, like everything a long-running process says.

use std::net::SocketAddr;
use std::time::Duration;

use klaxon_counter::RedisHandle;

/// How long the start-up Redis check may take.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// What Klaxon loses when Redis evicts its keys (shared with `klaxon doctor`).
pub const EVICTION_LOSES: &str =
    "window counters, first-seen marks, dedup leases and digest state can vanish \
     (alerts missed, late or sent twice); set maxmemory-policy noeviction";

/// The console's URL for a browser on this machine: an unspecified bind address (`0.0.0.0`, `[::]`) is reached
/// through loopback.
pub fn console_url(http_addr: SocketAddr) -> String {
    let ip = http_addr.ip();
    let host = match ip {
        std::net::IpAddr::V4(v4) if v4.is_unspecified() => "127.0.0.1".to_owned(),
        std::net::IpAddr::V6(v6) if v6.is_unspecified() => "[::1]".to_owned(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
        std::net::IpAddr::V4(v4) => v4.to_string(),
    };
    format!("http://{host}:{}/", http_addr.port())
}

/// Who the console and the API serve, as the API decides it (`klaxon_api`'s auth).
fn console_access(http_addr: SocketAddr, token_set: bool) -> &'static str {
    match (token_set, http_addr.ip().is_loopback()) {
        (true, _) => "bearer token KLAXON_API_TOKEN (the console asks for it once)",
        (false, true) => "loopback clients only (no KLAXON_API_TOKEN set)",
        (false, false) => {
            "loopback clients only: set KLAXON_API_TOKEN to open it from other machines (or through Docker's port mapping)"
        }
    }
}

/// The placeholder token of `docker-compose.yml`, which must not stay in use.
pub const PLACEHOLDER_TOKEN: &str = "change-me-before-use";

/// The start-up line that tells a newcomer where to look and what to run next.
pub fn console(http_addr: SocketAddr, token: Option<&str>) {
    tracing::info!(
        url = %console_url(http_addr),
        access = console_access(http_addr, token.is_some()),
        next = "klaxon doctor (checks every service and setting this process uses)",
        "console and HTTP API ready"
    );
    if token == Some(PLACEHOLDER_TOKEN) {
        tracing::warn!("KLAXON_API_TOKEN is docker-compose.yml's placeholder: anyone who read the file can use the API; set your own in .env");
    }
}

/// Warns once when Redis may evict Klaxon's keys (`maxmemory-policy` other than `noeviction` on the server or
/// on any cluster primary). Bounded by [`CHECK_TIMEOUT`]; a Redis that cannot say is noted at info.
pub async fn redis_eviction(redis: RedisHandle) {
    match tokio::time::timeout(CHECK_TIMEOUT, klaxon_counter::eviction_policies(&redis)).await {
        Ok(Ok(policies)) => {
            let evicting = policies.evicting();
            if evicting.is_empty() {
                return;
            }
            let nodes = evicting
                .iter()
                .map(|n| match &n.node {
                    Some(node) => format!("{node}: {}", n.policy),
                    None => n.policy.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ");
            tracing::warn!(
                maxmemory_policy = %nodes,
                "Redis may evict Klaxon's keys under memory pressure: {EVICTION_LOSES}"
            );
        }
        Ok(Err(e)) => tracing::info!(error = %e, "could not check Redis's maxmemory-policy"),
        Err(_) => tracing::info!("could not check Redis's maxmemory-policy: no answer within 5 s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_console_url_is_one_a_local_browser_can_open() {
        for (addr, want) in [
            ("127.0.0.1:9464", "http://127.0.0.1:9464/"),
            ("0.0.0.0:9464", "http://127.0.0.1:9464/"),
            ("[::]:80", "http://[::1]:80/"),
            ("[::1]:9464", "http://[::1]:9464/"),
            ("10.0.0.5:9000", "http://10.0.0.5:9000/"),
        ] {
            assert_eq!(console_url(addr.parse().expect("addr")), want, "{addr}");
        }
        assert!(console_access("0.0.0.0:1".parse().expect("addr"), false).contains("KLAXON_API_TOKEN"));
        assert!(console_access("127.0.0.1:1".parse().expect("addr"), false).starts_with("loopback"));
        assert!(console_access("0.0.0.0:1".parse().expect("addr"), true).starts_with("bearer"));
    }
}
