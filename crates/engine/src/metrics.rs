//! Prometheus metrics through the [`metrics`] facade. Each crate counts where the thing happens
//! (`metrics::counter!(name, "channel" => …).increment(1)`); this module installs the process's one
//! recorder ([`Metrics::install`]), describes every metric ([`DESCRIBED`], the HELP texts), registers the
//! unlabeled ones at 0 and renders `/metrics`. Names are `klaxon_<noun>_<verb>_total`; labels are low-cardinality
//! (channel, outcome, window, state, reason), never ids, titles or recipients.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

/// The kind of a metric.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Set to the current value.
    Gauge,
    /// Observations in buckets (`_bucket`, `_sum`, `_count`).
    Histogram,
}

/// One metric the process exports.
#[derive(Clone, Copy, Debug)]
pub struct Described {
    /// The exported name.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// Its label names, in the order they are printed; empty for an unlabeled metric (exported at 0 from the
    /// start).
    pub labels: &'static [&'static str],
    /// The HELP text.
    pub help: &'static str,
}

const fn counter(name: &'static str, labels: &'static [&'static str], help: &'static str) -> Described {
    Described {
        name,
        kind: Kind::Counter,
        labels,
        help,
    }
}

/// Events per processed batch.
pub const BATCH_SIZE: &str = "klaxon_batch_size";
/// Seconds from a batch's first delivery to its ack.
pub const BATCH_SECONDS: &str = "klaxon_batch_seconds";
/// 1 while the process can do its work.
pub const READY: &str = "klaxon_ready";

/// Every metric the process exports, with its HELP text (README.md's "## Metrics" table lists the same names).
pub const DESCRIBED: &[Described] = &[
    counter(
        "klaxon_digest_firings_total",
        &["channel"],
        "Firings buffered into a digest",
    ),
    counter(
        "klaxon_digests_published_total",
        &["channel"],
        "Digest notifications published",
    ),
    counter(
        "klaxon_quiet_held_total",
        &["channel", "what"],
        "Messages held by quiet hours (quietHours), by what: fired (a firing or a reminder), resolved",
    ),
    counter(
        "klaxon_quiet_released_total",
        &["channel"],
        "Quiet-hours releases published: one message per (rule, channel) when a quiet window ends",
    ),
    counter(
        "klaxon_rules_queries_total",
        &[],
        "MongoDB reads made by the rule cache",
    ),
    counter(
        "klaxon_rules_stale_served_total",
        &[],
        "Rule lookups answered with the last good rules because MongoDB failed",
    ),
    counter("klaxon_rules_load_errors_total", &[], "Failed rule loads"),
    counter(
        "klaxon_rules_skipped_total",
        &[],
        "Stored rules not evaluated because their project is over --max-rules-per-project (counted per load)",
    ),
    counter(
        "klaxon_mutes_skipped_total",
        &[],
        "Stored mutes not applied because their project is over --max-mutes-per-project (counted per read)",
    ),
    counter(
        "klaxon_events_consumed_total",
        &[],
        "Events taken from the events queue",
    ),
    counter(
        "klaxon_events_acked_total",
        &[],
        "Events acked after their batch's outcome was durable",
    ),
    counter(
        "klaxon_events_invalid_total",
        &[],
        "Events moved to the invalid queue",
    ),
    counter(
        "klaxon_events_unmatched_total",
        &["reason"],
        "Events that led to no evaluation: project_unknown, no_rules, rules_invalid, rules_disabled, no_channels",
    ),
    counter(
        "klaxon_rules_matched_total",
        &[],
        "Event and rule pairs that passed the filters",
    ),
    counter(
        "klaxon_thresholds_crossed_total",
        &["window"],
        "Rule firings (threshold crossings and first occurrences)",
    ),
    counter(
        "klaxon_firings_muted_total",
        &[],
        "Firings counted but not delivered because a mute matched",
    ),
    counter("klaxon_alerts_opened_total", &[], "Alerts opened by firings"),
    counter(
        "klaxon_alerts_resolved_total",
        &["by"],
        "Alerts resolved: by timeout (resolveAfter without events) or by hand",
    ),
    counter(
        "klaxon_alerts_not_opened_total",
        &["reason"],
        "Firings delivered without an alert: project_full (the project keeps as many alerts as it may, all open), \
         by_hand_share (alerts resolved by hand only hold half of the slots)",
    ),
    counter(
        "klaxon_alert_timers_total",
        &["outcome"],
        "Due alert timers by outcome: resolved, already_resolved, rescheduled, never, not_found, invalid",
    ),
    counter(
        "klaxon_no_events_timers_total",
        &["outcome"],
        "Due NO_EVENTS timers by outcome: fired, muted, rescheduled, stale, rule_gone, invalid",
    ),
    counter(
        "klaxon_no_events_seen_total",
        &[],
        "Batches' projects with a NO_EVENTS rule noted as seen",
    ),
    counter(
        "klaxon_no_events_timers_scheduled_total",
        &[],
        "NO_EVENTS timers scheduled by the workers",
    ),
    counter(
        "klaxon_alert_reminders_total",
        &["outcome"],
        "Due reminder timers (renotify) by outcome: sent, acknowledged, resolved, not_found (the last three end the chain)",
    ),
    counter(
        "klaxon_alert_escalations_total",
        &["outcome"],
        "Due escalation steps by outcome: sent, deferred (quiet hours), acknowledged, resolved, not_found, rule_gone (deleted or disabled since)",
    ),
    counter(
        "klaxon_notifications_published_total",
        &["channel"],
        "Notification tasks published to sender queues",
    ),
    counter(
        "klaxon_notifications_shadowed_total",
        &["channel"],
        "Notifications shadow mode recorded instead of publishing (--output shadow)",
    ),
    counter(
        "klaxon_alert_messages_not_sent_total",
        &["reason"],
        "Messages of an alert's life (resolved, acknowledged, reminder, escalation) not sent: hawk_output",
    ),
    counter(
        "klaxon_deliveries_total",
        &["channel", "outcome"],
        "Delivery attempts by channel and outcome",
    ),
    counter(
        "klaxon_notifications_dropped_total",
        &["channel", "reason"],
        "Reminders and escalation steps not sent, decided at send time: acknowledged, resolved, alert_gone, rule_gone, \
         rule_disabled, channel_removed, reminder_budget",
    ),
    counter("klaxon_redis_errors_total", &[], "Redis failures"),
    counter("klaxon_broker_errors_total", &[], "RabbitMQ failures"),
    counter(
        "klaxon_rules_errors_total",
        &[],
        "MongoDB failures while loading rules",
    ),
    counter("klaxon_rules_problems_total", &[], "Rule problems reported"),
    Described {
        name: BATCH_SIZE,
        kind: Kind::Histogram,
        labels: &[],
        help: "Events per processed batch",
    },
    Described {
        name: BATCH_SECONDS,
        kind: Kind::Histogram,
        labels: &[],
        help: "Seconds from a batch's first delivery to its ack",
    },
    Described {
        name: READY,
        kind: Kind::Gauge,
        labels: &[],
        help: "1 while the process can do its work",
    },
    Described {
        name: crate::consumers::FOREIGN_CONSUMERS,
        kind: Kind::Gauge,
        labels: &[],
        help: "Consumers of the events queue that are not registered Klaxon workers of this namespace (last count)",
    },
    Described {
        name: crate::consumers::SHARD_MESSAGES,
        kind: Kind::Gauge,
        labels: &["shard"],
        help: "Messages ready in each shard queue (--events-shards > 1), read by a passive declare every 10 s",
    },
    Described {
        name: crate::consumers::SHARD_CONSUMERS,
        kind: Kind::Gauge,
        labels: &["shard"],
        help: "Consumers of each shard queue (--events-shards > 1), read by a passive declare every 10 s",
    },
    counter(
        "klaxon_breaker_transitions_total",
        &["state"],
        "Circuit-breaker transitions by the state entered",
    ),
    counter(
        "klaxon_deliveries_parked_total",
        &["channel"],
        "Tasks parked in a delay queue (breaker open, rate limit, dedup lease)",
    ),
    counter(
        "klaxon_conversation_edits_total",
        &["channel", "outcome"],
        "Edits of an alert's firing message by its lifecycle messages (Discord, Telegram, Slack): edited, failed",
    ),
    counter(
        "klaxon_inbound_requests_total",
        &["integration", "outcome"],
        "Requests to the inbound integrations (PagerDuty, Slack, Telegram) by outcome: accepted, ignored, disabled, unsigned, bad_signature, stale, replayed, throttled, invalid, unknown_alert, foreign_project, unavailable",
    ),
    counter(
        "klaxon_trail_dropped_total",
        &[],
        "Delivery-trail records dropped (queue full)",
    ),
    counter(
        "klaxon_trail_errors_total",
        &[],
        "Delivery-trail inserts that failed",
    ),
];

/// `count` buckets from `start`, each `factor` times the previous (prometheus-client's `exponential_buckets`).
fn exponential_buckets(start: f64, factor: f64, count: u16) -> Vec<f64> {
    std::iter::successors(Some(start), |b| Some(b * factor))
        .take(usize::from(count))
        .collect()
}

/// The recorder with the histograms' buckets.
fn recorder() -> PrometheusRecorder {
    let builder = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Full(BATCH_SIZE.to_owned()),
            &exponential_buckets(1.0, 2.0, 12),
        )
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(BATCH_SECONDS.to_owned()),
                &exponential_buckets(0.0005, 2.0, 14),
            )
        });
    match builder {
        Ok(builder) => builder.build_recorder(),
        // Only empty bucket lists are refused, and these are not empty.
        Err(e) => {
            tracing::error!(error = %e, "metrics: histogram buckets refused");
            PrometheusBuilder::new().build_recorder()
        }
    }
}

/// Describes every metric and registers the unlabeled ones, so they are exported at 0 from the start.
fn describe_and_register() {
    for m in DESCRIBED {
        match m.kind {
            Kind::Counter => {
                metrics::describe_counter!(m.name, m.help);
                if m.labels.is_empty() {
                    metrics::counter!(m.name).absolute(0);
                }
            }
            Kind::Gauge => {
                metrics::describe_gauge!(m.name, m.help);
                if m.labels.is_empty() {
                    metrics::gauge!(m.name).set(0.0);
                }
            }
            Kind::Histogram => {
                metrics::describe_histogram!(m.name, m.help);
                let _ = metrics::histogram!(m.name);
            }
        }
    }
    // Every reason at 0 from the start, so an alert on its increase has a series to compare with.
    for reason in klaxon_core::Unevaluated::ALL {
        metrics::counter!("klaxon_events_unmatched_total", "reason" => reason.as_str()).absolute(0);
    }
    for by in ["timeout", "hand"] {
        metrics::counter!("klaxon_alerts_resolved_total", "by" => by).absolute(0);
    }
    for why in klaxon_counter::NotOpened::ALL {
        metrics::counter!("klaxon_alerts_not_opened_total", "reason" => why.as_str()).absolute(0);
    }
}

/// The process's metrics recorder: renders `/metrics` and sets the readiness gauge.
pub struct Metrics {
    handle: PrometheusHandle,
}

impl Metrics {
    /// Installs the process's recorder on first use (later calls return the same one, so a process or a test
    /// binary that starts two servers shares it).
    pub fn install() -> &'static Metrics {
        static INSTALLED: OnceLock<Metrics> = OnceLock::new();
        INSTALLED.get_or_init(|| {
            let recorder = recorder();
            let handle = recorder.handle();
            if let Err(e) = metrics::set_global_recorder(recorder) {
                tracing::warn!(error = %e, "metrics: another recorder is installed; /metrics will be empty");
            }
            describe_and_register();
            // Drains histogram samples even when nobody scrapes.
            let upkeep = handle.clone();
            let spawned = std::thread::Builder::new()
                .name("metrics-upkeep".into())
                .spawn(move || loop {
                    std::thread::sleep(Duration::from_secs(5));
                    upkeep.run_upkeep();
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "metrics: no upkeep thread (samples are drained at scrape time)");
            }
            Metrics { handle }
        })
    }

    /// Sets `klaxon_ready`.
    pub fn set_ready(&self, ready: bool) {
        metrics::gauge!(READY).set(if ready { 1.0 } else { 0.0 });
    }

    /// Prometheus text exposition.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

/// The value of one series in a Prometheus text exposition: `name` or `name{labels}` exactly as it is printed
/// (so `klaxon_events_acked_total` does not match `klaxon_events_acked_total_x`). `None` when absent. The one
/// reader of `/metrics` text for the bench and the tests.
pub fn series_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// The sum of every series whose line starts with `prefix` (e.g. `klaxon_deliveries_total{channel="webhook"`
/// over all outcomes).
pub fn series_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.trim().parse::<f64>().ok()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders what `record` counts, through a recorder of this test's own (the global one is shared).
    fn render(record: impl FnOnce()) -> String {
        let recorder = recorder();
        let handle = recorder.handle();
        metrics::with_local_recorder(&recorder, || {
            describe_and_register();
            record();
        });
        handle.render()
    }

    #[test]
    fn series_are_read_exactly_as_printed() {
        let text = render(|| {
            metrics::counter!("klaxon_events_acked_total").increment(7);
            for (channel, outcome) in [
                ("webhook", "sent"),
                ("webhook", "sent"),
                ("webhook", "dead"),
                ("slack", "sent"),
            ] {
                metrics::counter!("klaxon_deliveries_total", "channel" => channel, "outcome" => outcome)
                    .increment(1);
            }
        });
        let cases: &[(&str, Option<f64>)] = &[
            ("klaxon_events_acked_total", Some(7.0)),
            ("klaxon_events_acked", None),
            ("klaxon_events_invalid_total", Some(0.0)),
            ("klaxon_ready", Some(0.0)),
            ("klaxon_batch_size_count", Some(0.0)),
            (
                r#"klaxon_deliveries_total{channel="webhook",outcome="sent"}"#,
                Some(2.0),
            ),
            (r#"klaxon_deliveries_total{channel="email",outcome="sent"}"#, None),
            ("klaxon_no_such_total", None),
            (
                r#"klaxon_events_unmatched_total{reason="project_unknown"}"#,
                Some(0.0),
            ),
            (
                r#"klaxon_events_unmatched_total{reason="no_channels"}"#,
                Some(0.0),
            ),
        ];
        for (series, want) in cases {
            assert_eq!(series_value(&text, series), *want, "{series} in\n{text}");
        }
        assert_eq!(
            series_sum(&text, r#"klaxon_deliveries_total{channel="webhook""#),
            3.0
        );
        assert_eq!(series_sum(&text, "klaxon_deliveries_total{"), 4.0);
        assert_eq!(series_sum(&text, "klaxon_nothing"), 0.0);
    }

    #[test]
    fn histograms_keep_their_buckets() {
        let text = render(|| {
            metrics::histogram!(BATCH_SIZE).record(3.0);
            metrics::histogram!(BATCH_SECONDS).record(0.001);
        });
        for series in [
            r#"klaxon_batch_size_bucket{le="1"}"#,
            r#"klaxon_batch_size_bucket{le="4"}"#,
            r#"klaxon_batch_size_bucket{le="2048"}"#,
            r#"klaxon_batch_seconds_bucket{le="0.0005"}"#,
            r#"klaxon_batch_seconds_bucket{le="4.096"}"#,
            r#"klaxon_batch_seconds_bucket{le="+Inf"}"#,
        ] {
            assert!(series_value(&text, series).is_some(), "{series} in\n{text}");
        }
        assert_eq!(series_value(&text, "klaxon_batch_size_sum"), Some(3.0));
        assert_eq!(series_value(&text, "klaxon_batch_size_count"), Some(1.0));
        assert_eq!(
            series_value(&text, r#"klaxon_batch_size_bucket{le="2"}"#),
            Some(0.0)
        );
        assert!(text.contains("# HELP klaxon_batch_size Events per processed batch"));
    }
}
