//! The task JSON's `reason`, as every earlier version wrote it: one flat object per variant tagged by `type`.
//! The strings below were captured from the build before `Reason` carried its own serde attributes (the
//! `ReasonJson` mirror); tasks already in the queues hold exactly these, so each must parse to its reason and
//! each reason must write them byte for byte.

use klaxon_core::kind::{Baseline, Spike, Window};
use klaxon_core::Reason;

#[test]
fn every_variant_reads_and_writes_the_wire_of_earlier_versions() {
    let spike = Spike {
        period_ms: 3_600_000,
        baseline_windows: 24,
        factor_milli: 5_000,
        threshold: 10,
    };
    let table = [
        (Reason::New, r#"{"type":"new"}"#),
        (
            Reason::Threshold {
                threshold: 100,
                period_ms: 60_000,
                window: Window::Sliding,
            },
            r#"{"type":"threshold","threshold":100,"periodMs":60000,"window":"sliding"}"#,
        ),
        (
            Reason::Threshold {
                threshold: 1,
                period_ms: 1000,
                window: Window::Fixed,
            },
            r#"{"type":"threshold","threshold":1,"periodMs":1000,"window":"fixed"}"#,
        ),
        (
            Reason::UniqueUsers {
                threshold: 3,
                period_ms: 5_000,
                window: Window::Fixed,
            },
            r#"{"type":"uniqueUsers","threshold":3,"periodMs":5000,"window":"fixed"}"#,
        ),
        (
            Reason::Spike {
                spike,
                baseline: Baseline {
                    sum: 48,
                    buckets: 24,
                    needed: 10,
                },
            },
            r#"{"type":"spike","periodMs":3600000,"baselineWindows":24,"factorMilli":5000,"threshold":10,"baselineSum":48,"baselineBuckets":24,"needed":10}"#,
        ),
        (
            Reason::Reappeared {
                quiet_period_ms: 604_800_000,
                last_seen_ms: Some(1_700_000_000_000),
            },
            r#"{"type":"reappeared","quietPeriodMs":604800000,"lastSeenMs":1700000000000}"#,
        ),
        (
            Reason::Reappeared {
                quiet_period_ms: 1000,
                last_seen_ms: None,
            },
            r#"{"type":"reappeared","quietPeriodMs":1000}"#,
        ),
        (
            Reason::NoEvents {
                quiet_period_ms: 3_600_000,
                last_event_ms: Some(1_700_000_000_000),
            },
            r#"{"type":"noEvents","quietPeriodMs":3600000,"lastEventMs":1700000000000}"#,
        ),
        (
            Reason::NoEvents {
                quiet_period_ms: 10_000,
                last_event_ms: None,
            },
            r#"{"type":"noEvents","quietPeriodMs":10000}"#,
        ),
        (
            Reason::Digest {
                min_period_s: 60,
                resolved: 0,
                more: Default::default(),
            },
            r#"{"type":"digest","minPeriodS":60}"#,
        ),
        (
            Reason::Digest {
                min_period_s: 300,
                resolved: 2,
                more: Default::default(),
            },
            r#"{"type":"digest","minPeriodS":300,"resolved":2}"#,
        ),
        (Reason::Direct, r#"{"type":"direct"}"#),
        (Reason::Resolved, r#"{"type":"resolved"}"#),
        (Reason::Acknowledged, r#"{"type":"acknowledged"}"#),
        (
            Reason::Reminder { number: 1, max: 3 },
            r#"{"type":"reminder","number":1,"max":3}"#,
        ),
        (
            Reason::Escalation { step: 2, steps: 5 },
            r#"{"type":"escalation","step":2,"steps":5}"#,
        ),
        (
            Reason::QuietHours {
                until_ms: 1_700_000_000_000,
                fired: 3,
                resolved: 1,
                more: Default::default(),
            },
            r#"{"type":"quietHours","untilMs":1700000000000,"fired":3,"resolved":1}"#,
        ),
        (
            Reason::QuietHours {
                until_ms: -5,
                fired: 0,
                resolved: 0,
                more: Default::default(),
            },
            r#"{"type":"quietHours","untilMs":-5,"fired":0,"resolved":0}"#,
        ),
    ];
    for (reason, json) in table {
        assert_eq!(serde_json::to_string(&reason).expect("json"), json, "{reason:?}");
        assert_eq!(
            serde_json::from_str::<Reason>(json).expect(json),
            reason,
            "{json}"
        );
    }
    // fields in another order, and a digest of an earlier version without `resolved`, still read
    let reordered = r#"{"needed":7,"baselineBuckets":3,"baselineSum":6,"threshold":10,"factorMilli":5000,
        "baselineWindows":24,"periodMs":3600000,"type":"spike"}"#;
    assert_eq!(
        serde_json::from_str::<Reason>(reordered).expect("reordered"),
        Reason::Spike {
            spike,
            baseline: Baseline {
                sum: 6,
                buckets: 3,
                needed: 7
            }
        }
    );
    // an unknown type is refused, not read as something else
    assert!(serde_json::from_str::<Reason>(r#"{"type":"nope"}"#).is_err());
}
