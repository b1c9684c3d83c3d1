//! What `klaxon doctor` and the console's open-alerts page say about the inbound integrations: each one on or off
//! (its secret set or not: never shown), and what a process counted of its requests
//! (`klaxon_inbound_requests_total{integration, outcome}`, read from that process's `/metrics` text).

use serde::Serialize;

use super::Integration;

/// The integrations, in the order they are shown.
const ALL: [Integration; 3] = [Integration::PagerDuty, Integration::Slack, Integration::Telegram];

/// One inbound integration's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InboundStatus {
    /// `pagerduty`, `slack`, `telegram`.
    pub integration: &'static str,
    /// Its route.
    pub path: String,
    /// The variable whose value turns it on.
    pub secret_variable: &'static str,
    /// Its secret is set (the value is never read out).
    pub enabled: bool,
    /// Its requests as a process counted them, when that process's metrics were read.
    pub counts: Option<InboundCounts>,
}

/// An integration's requests by what became of them (since its process started).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct InboundCounts {
    /// Verified and acted on.
    pub accepted: u64,
    /// Verified, nothing for Klaxon in it.
    pub ignored: u64,
    /// Refused: unsigned, bad signature, stale, replayed, throttled, invalid, unknown alert, foreign project.
    pub refused: u64,
    /// The refusals by outcome (only those that happened), by count, highest first.
    pub refused_by: Vec<(String, u64)>,
    /// Answered 404 while off.
    pub disabled: u64,
    /// Failed on our side (Redis or RabbitMQ down).
    pub unavailable: u64,
}

impl InboundCounts {
    /// `3 accepted, 2 refused (bad_signature 2), 0 ignored` (and the failures on our side, when any).
    pub fn summary(&self) -> String {
        let mut s = format!("{} accepted, {} refused", self.accepted, self.refused);
        if !self.refused_by.is_empty() {
            let by: Vec<String> = self.refused_by.iter().map(|(o, n)| format!("{o} {n}")).collect();
            s.push_str(&format!(" ({})", by.join(", ")));
        }
        s.push_str(&format!(", {} ignored", self.ignored));
        if self.unavailable > 0 {
            s.push_str(&format!(", {} failed on our side", self.unavailable));
        }
        if self.disabled > 0 {
            s.push_str(&format!(", {} while off", self.disabled));
        }
        s
    }
}

/// The labels of a Prometheus text line of `metric`: `metric{a="x",b="y"} 3` → ([("a","x"), ("b","y")], 3).
fn labelled(line: &str, metric: &str) -> Option<(Vec<(String, String)>, f64)> {
    let rest = line.strip_prefix(metric)?.strip_prefix('{')?;
    let (labels, value) = rest.rsplit_once("} ")?;
    let value: f64 = value.trim().parse().ok()?;
    let pairs = labels
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k.trim().to_owned(), v.trim().trim_matches('"').to_owned()))
        })
        .collect();
    Some((pairs, value))
}

/// What `metrics` (a `/metrics` text) counted of `integration`'s requests.
pub fn counts_in(metrics: &str, integration: &str) -> InboundCounts {
    let mut c = InboundCounts::default();
    for line in metrics.lines() {
        let Some((labels, value)) = labelled(line, "klaxon_inbound_requests_total") else {
            continue;
        };
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        if label("integration") != Some(integration) {
            continue;
        }
        let n = value.max(0.0) as u64;
        match label("outcome").unwrap_or_default() {
            "accepted" => c.accepted += n,
            "ignored" => c.ignored += n,
            "disabled" => c.disabled += n,
            "unavailable" => c.unavailable += n,
            other => {
                if n > 0 {
                    c.refused += n;
                    c.refused_by.push((other.to_owned(), n));
                }
            }
        }
    }
    c.refused_by
        .sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    c
}

/// Each integration's state: on when `secret(variable)` is a non-empty value (the value itself is only tested),
/// with the counts of `metrics` when given.
pub fn statuses(secret: impl Fn(&str) -> bool, metrics: Option<&str>) -> Vec<InboundStatus> {
    ALL.iter()
        .map(|i| InboundStatus {
            integration: i.as_str(),
            path: format!("/api/v1/integrations/{}", i.as_str()),
            secret_variable: i.secret_name(),
            enabled: secret(i.secret_name()),
            counts: metrics.map(|m| counts_in(m, i.as_str())),
        })
        .collect()
}

/// The states as this process has them: its secrets, its own counts.
pub(crate) fn of_process(api: &crate::Api) -> Vec<InboundStatus> {
    let metrics = klaxon_engine::metrics::Metrics::install().render();
    let on: Vec<&str> = ALL
        .iter()
        .filter(|i| i.secret(api).is_some())
        .map(|i| i.secret_name())
        .collect();
    statuses(|var| on.contains(&var), Some(&metrics))
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "\
# TYPE klaxon_inbound_requests_total counter
klaxon_inbound_requests_total{integration=\"slack\",outcome=\"accepted\"} 3
klaxon_inbound_requests_total{integration=\"slack\",outcome=\"bad_signature\"} 2
klaxon_inbound_requests_total{integration=\"slack\",outcome=\"stale\"} 1
klaxon_inbound_requests_total{integration=\"slack\",outcome=\"ignored\"} 4
klaxon_inbound_requests_total{integration=\"pagerduty\",outcome=\"replayed\"} 5
klaxon_inbound_requests_total{integration=\"telegram\",outcome=\"disabled\"} 1
klaxon_inbound_requests_total_x{integration=\"slack\",outcome=\"accepted\"} 99
klaxon_deliveries_total{channel=\"slack\",outcome=\"sent\"} 7
";

    #[test]
    fn counts_are_read_per_integration_and_outcome() {
        let slack = counts_in(METRICS, "slack");
        assert_eq!((slack.accepted, slack.refused, slack.ignored), (3, 3, 4));
        assert_eq!(
            slack.refused_by,
            [("bad_signature".to_owned(), 2), ("stale".to_owned(), 1)]
        );
        assert_eq!(
            slack.summary(),
            "3 accepted, 3 refused (bad_signature 2, stale 1), 4 ignored"
        );
        assert_eq!(counts_in(METRICS, "pagerduty").refused, 5);
        let tg = counts_in(METRICS, "telegram");
        assert_eq!((tg.refused, tg.disabled), (0, 1));
        assert_eq!(tg.summary(), "0 accepted, 0 refused, 0 ignored, 1 while off");
        assert_eq!(counts_in("", "slack"), InboundCounts::default());
    }

    #[test]
    fn statuses_say_on_or_off_by_the_variable_only() {
        let got = statuses(|v| v == "KLAXON_SLACK_SIGNING_SECRET", None);
        let shown: Vec<(&str, bool)> = got.iter().map(|s| (s.integration, s.enabled)).collect();
        assert_eq!(
            shown,
            [("pagerduty", false), ("slack", true), ("telegram", false)]
        );
        assert_eq!(got[1].path, "/api/v1/integrations/slack");
        assert!(got.iter().all(|s| s.counts.is_none()));
    }
}
