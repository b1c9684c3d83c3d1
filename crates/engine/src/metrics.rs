//! Prometheus metrics. Names are `klaxon_<noun>_<verb>_total`; labels are low-cardinality (channel, outcome,
//! window), never ids, titles or recipients.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// Label set with a channel and an outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelOutcome {
    /// email, telegram, slack, webhook.
    pub channel: String,
    /// sent, retried, dead, ….
    pub outcome: String,
}

/// Label set with one channel.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ChannelLabel {
    /// email, telegram, slack, webhook.
    pub channel: String,
}

/// Label set with a window kind.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WindowLabel {
    /// fixed, sliding, first_seen.
    pub window: String,
}

/// Label set of a breaker transition.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BreakerLabel {
    /// The state entered: open or closed.
    pub state: String,
}

/// A function run before each scrape.
pub type ScrapeHook = Box<dyn Fn(&Metrics) + Send + Sync>;

/// Every metric the engine exports.
pub struct Metrics {
    registry: Registry,
    scrape_hooks: std::sync::Mutex<Vec<ScrapeHook>>,
    /// Firings buffered into a digest (channels with `minPeriod > 0`).
    pub digest_firings: Family<ChannelLabel, Counter>,
    /// Digest notifications published (one per flushed window).
    pub digests_published: Family<ChannelLabel, Counter>,
    /// MongoDB reads made by the rule cache (synced from the cache at scrape time).
    pub rules_queries: Counter,
    /// Lookups answered with stale rules because MongoDB failed (synced at scrape time).
    pub rules_stale_served: Counter,
    /// Failed rule loads (synced at scrape time).
    pub rules_load_errors: Counter,
    /// Events taken from the events queue.
    pub events_consumed: Counter,
    /// Events acked: their batch's outcome (counted, tasks published, or set aside) is durable.
    pub events_acked: Counter,
    /// Events moved to `<ns>.events.invalid`.
    pub events_invalid: Counter,
    /// (event, rule) pairs that passed the rule's filters.
    pub rules_matched: Counter,
    /// Threshold crossings (and first occurrences) that fired a rule.
    pub thresholds_crossed: Family<WindowLabel, Counter>,
    /// Notification tasks published to the sender queues.
    pub notifications_published: Family<ChannelLabel, Counter>,
    /// Firings counted but not delivered because a mute matched.
    pub firings_muted: Counter,
    /// Delivery attempts by outcome.
    pub deliveries: Family<ChannelOutcome, Counter>,
    /// Redis failures.
    pub redis_errors: Counter,
    /// RabbitMQ failures.
    pub broker_errors: Counter,
    /// MongoDB failures while loading rules.
    pub rules_errors: Counter,
    /// Rule problems reported (unusable rules or parts).
    pub rules_problems: Counter,
    /// Events per processed batch.
    pub batch_size: Histogram,
    /// Seconds from a batch's first delivery to its ack.
    pub batch_seconds: Histogram,
    /// 1 while the process can do its work.
    pub ready: Gauge,
    /// Circuit-breaker transitions by the state entered.
    pub breaker_transitions: Family<BreakerLabel, Counter>,
    /// Tasks parked in a delay queue (breaker open, rate limit, dedup lease held elsewhere), by channel.
    pub deliveries_parked: Family<ChannelLabel, Counter>,
    /// Delivery-trail records dropped because the writer's queue was full.
    pub trail_dropped: Counter,
    /// Delivery-trail inserts that failed.
    pub trail_errors: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("klaxon");
        let m = Metrics {
            events_consumed: Counter::default(),
            events_acked: Counter::default(),
            events_invalid: Counter::default(),
            rules_matched: Counter::default(),
            thresholds_crossed: Family::default(),
            notifications_published: Family::default(),
            firings_muted: Counter::default(),
            deliveries: Family::default(),
            redis_errors: Counter::default(),
            broker_errors: Counter::default(),
            rules_errors: Counter::default(),
            rules_problems: Counter::default(),
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 12)),
            batch_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            ready: Gauge::default(),
            breaker_transitions: Family::default(),
            deliveries_parked: Family::default(),
            trail_dropped: Counter::default(),
            trail_errors: Counter::default(),
            registry: Registry::default(),
            scrape_hooks: std::sync::Mutex::new(Vec::new()),
            digest_firings: Family::default(),
            digests_published: Family::default(),
            rules_queries: Counter::default(),
            rules_stale_served: Counter::default(),
            rules_load_errors: Counter::default(),
        };
        registry.register(
            "digest_firings",
            "Firings buffered into a digest",
            m.digest_firings.clone(),
        );
        registry.register(
            "digests_published",
            "Digest notifications published",
            m.digests_published.clone(),
        );
        registry.register(
            "rules_queries",
            "MongoDB reads made by the rule cache",
            m.rules_queries.clone(),
        );
        registry.register(
            "rules_stale_served",
            "Rule lookups answered with the last good rules because MongoDB failed",
            m.rules_stale_served.clone(),
        );
        registry.register(
            "rules_load_errors",
            "Failed rule loads",
            m.rules_load_errors.clone(),
        );
        // prometheus-client appends `_total` to counters itself.
        registry.register(
            "events_consumed",
            "Events taken from the events queue",
            m.events_consumed.clone(),
        );
        registry.register(
            "events_acked",
            "Events acked after their batch's outcome was durable",
            m.events_acked.clone(),
        );
        registry.register(
            "events_invalid",
            "Events moved to the invalid queue",
            m.events_invalid.clone(),
        );
        registry.register(
            "rules_matched",
            "Event and rule pairs that passed the filters",
            m.rules_matched.clone(),
        );
        registry.register(
            "thresholds_crossed",
            "Rule firings (threshold crossings and first occurrences)",
            m.thresholds_crossed.clone(),
        );
        registry.register(
            "firings_muted",
            "Firings counted but not delivered because a mute matched",
            m.firings_muted.clone(),
        );
        registry.register(
            "notifications_published",
            "Notification tasks published to sender queues",
            m.notifications_published.clone(),
        );
        registry.register(
            "deliveries",
            "Delivery attempts by channel and outcome",
            m.deliveries.clone(),
        );
        registry.register("redis_errors", "Redis failures", m.redis_errors.clone());
        registry.register("broker_errors", "RabbitMQ failures", m.broker_errors.clone());
        registry.register(
            "rules_errors",
            "MongoDB failures while loading rules",
            m.rules_errors.clone(),
        );
        registry.register(
            "rules_problems",
            "Rule problems reported",
            m.rules_problems.clone(),
        );
        registry.register("batch_size", "Events per processed batch", m.batch_size.clone());
        registry.register(
            "batch_seconds",
            "Seconds from a batch's first delivery to its ack",
            m.batch_seconds.clone(),
        );
        registry.register("ready", "1 while the process can do its work", m.ready.clone());
        registry.register(
            "breaker_transitions",
            "Circuit-breaker transitions by the state entered",
            m.breaker_transitions.clone(),
        );
        registry.register(
            "deliveries_parked",
            "Tasks parked in a delay queue (breaker open, rate limit, dedup lease)",
            m.deliveries_parked.clone(),
        );
        registry.register(
            "trail_dropped",
            "Delivery-trail records dropped (queue full)",
            m.trail_dropped.clone(),
        );
        registry.register(
            "trail_errors",
            "Delivery-trail inserts that failed",
            m.trail_errors.clone(),
        );
        Metrics { registry, ..m }
    }

    /// Registers a function run before every scrape, to copy counters kept elsewhere (e.g. the rule cache's)
    /// into the registry.
    pub fn add_scrape_hook(&self, hook: ScrapeHook) {
        self.scrape_hooks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(hook);
    }

    /// Raises `counter` to `total` (counters only go up; a smaller total is ignored).
    pub fn sync_counter(counter: &Counter, total: u64) {
        let now = counter.get();
        if total > now {
            counter.inc_by(total - now);
        }
    }

    /// Prometheus text exposition.
    pub fn encode(&self) -> String {
        for hook in self.scrape_hooks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            hook(self);
        }
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }

    /// Counts one breaker transition.
    pub fn breaker(&self, state: &str) {
        self.breaker_transitions
            .get_or_create(&BreakerLabel {
                state: state.to_owned(),
            })
            .inc();
    }

    /// Counts one parked task.
    pub fn parked(&self, channel: &str) {
        self.deliveries_parked
            .get_or_create(&ChannelLabel {
                channel: channel.to_owned(),
            })
            .inc();
    }

    /// Counts one event of a per-channel family.
    pub fn channel(family: &Family<ChannelLabel, Counter>, channel: klaxon_core::ChannelKind) {
        family
            .get_or_create(&ChannelLabel {
                channel: channel.as_str().to_owned(),
            })
            .inc();
    }

    /// Counts one delivery outcome.
    pub fn delivery(&self, channel: &str, outcome: &str) {
        self.deliveries
            .get_or_create(&ChannelOutcome {
                channel: channel.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
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

    #[test]
    fn series_are_read_exactly_as_printed() {
        let m = Metrics::new();
        m.events_acked.inc_by(7);
        m.delivery("webhook", "sent");
        m.delivery("webhook", "sent");
        m.delivery("webhook", "dead");
        m.delivery("slack", "sent");
        let text = m.encode();
        let cases: &[(&str, Option<f64>)] = &[
            ("klaxon_events_acked_total", Some(7.0)),
            ("klaxon_events_acked", None),
            ("klaxon_events_invalid_total", Some(0.0)),
            (
                r#"klaxon_deliveries_total{channel="webhook",outcome="sent"}"#,
                Some(2.0),
            ),
            (r#"klaxon_deliveries_total{channel="email",outcome="sent"}"#, None),
            ("klaxon_no_such_total", None),
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
}
