use super::*;

#[test]
fn log_once_per_key_per_interval_with_bounded_memory() {
    let t0 = Instant::now();
    let s = |n: u64| t0 + Duration::from_secs(n);
    let log = LogOnce::new(Duration::from_secs(10), 2);
    // (key, seconds after t0, logged?)
    let cases = [
        ("a", 0, true),
        ("a", 1, false),
        ("b", 2, true),
        ("a", 9, false),
        // full (a, b) and nothing expired: a third key is counted, not logged
        ("c", 9, false),
        ("a", 10, true),
        // a's interval restarted at 10, b's (logged at 2) has passed: c takes b's place
        ("c", 12, true),
        ("b", 13, false),
        ("b", 22, true),
    ];
    for (key, at, want) in cases {
        assert_eq!(log.should_log(key, s(at)), want, "{key} at {at}s");
        assert!(log.len() <= 2);
    }
}

/// Captures what the text log format writes.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("capture").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Every internal event that logs tenant text (groups, ids from rules, tasks and timer messages, reasons
/// echoing a body, endpoints), fed hostile text in every such field: each writes exactly one line, and no
/// line carries a newline, carriage return or escape that would forge or hide another.
#[test]
fn no_internal_event_log_line_can_be_forged_by_tenant_text() {
    use klaxon_core::alert::{Alert, AlertChannel, AlertState};
    const H: &str =
        "x\nINFO klaxon_engine: FORGED\r\u{1b}[2K\u{1b}]8;;http://evil\u{7}\"q\" FORGED=1\u{85}end";
    let h = H.to_owned();
    let alert = Alert {
        id: h.clone(),
        project_id: h.clone(),
        project_name: Some(h.clone()),
        rule_id: h.clone(),
        group: h.clone(),
        title: h.clone(),
        state: AlertState::Firing,
        firing: h.clone(),
        fired_at_ms: 0,
        acknowledged_at_ms: None,
        acknowledged_by: Some(h.clone()),
        resolved_at_ms: None,
        resolved_by: Some(h.clone()),
        events: 1,
        last_event_at_ms: 0,
        resolve_after_ms: 0,
        channels: vec![AlertChannel::of_rule(ChannelKind::Webhook, H, None)],
        heard: Vec::new(),
        closes: Vec::new(),
    };
    let mut task = NotificationTask::for_alert(&alert, &alert.channels[0], klaxon_core::Reason::Resolved, 0);
    task.notification_id = h.clone();
    task.project_id = h.clone();
    task.rule_id = h.clone();
    task.min_period_s = 60;
    let timer = |what| crate::timer::Timer {
        project_id: h.clone(),
        alert_id: h.clone(),
        what,
    };
    let (resolve, remind) = (
        timer(crate::timer::TimerWhat::Resolve),
        timer(crate::timer::TimerWhat::Remind {
            number: 1,
            every_ms: 1,
            max: 2,
        }),
    );
    let silence = crate::timer::SilenceTimer {
        project_id: h.clone(),
        rule_id: h.clone(),
        due_ms: 0,
    };
    let error = klaxon_counter::CounterError::InvalidUrl(h.clone());
    let events: Vec<Box<dyn Fn() + '_>> = vec![
        Box::new(|| RuleFired { task: &task }.emit()),
        Box::new(|| {
            DigestPublished {
                task: &task,
                window_start_ms: 0,
            }
            .emit()
        }),
        Box::new(|| {
            QuietHeld {
                task: &task,
                entry: klaxon_counter::HeldEntry::Fired,
            }
            .emit()
        }),
        Box::new(|| {
            QuietReleased {
                task: &task,
                fired: 1,
                resolved: 1,
            }
            .emit()
        }),
        Box::new(|| EventInvalid { reason: &H, bytes: 1 }.emit()),
        Box::new(|| {
            EventsUnmatched {
                project: H,
                reason: Unevaluated::NoRules,
                events: 1,
                database: "hawk",
                log: true,
            }
            .emit()
        }),
        Box::new(|| NotificationShadowed { task: &task }.emit()),
        Box::new(|| {
            AlertMessageNotSent {
                task: &task,
                reason: NotSent::HawkOutput,
            }
            .emit()
        }),
        Box::new(|| FiringMuted { project: H, rule: H }.emit()),
        Box::new(|| {
            MutesSkipped {
                project: H,
                unread: 1,
                limit: 1,
                first: true,
            }
            .emit()
        }),
        Box::new(|| {
            MutesSkipped {
                project: H,
                unread: 1,
                limit: 1,
                first: false,
            }
            .emit()
        }),
        Box::new(|| AlertOpened { alert: &alert }.emit()),
        Box::new(|| {
            AlertNotOpened {
                project: H,
                rule: H,
                why: klaxon_counter::NotOpened::ProjectFull,
                limit: 1,
                log: true,
            }
            .emit()
        }),
        Box::new(|| {
            AlertNotOpened {
                project: H,
                rule: H,
                why: klaxon_counter::NotOpened::ByHandShare,
                limit: 1,
                log: true,
            }
            .emit()
        }),
        Box::new(|| {
            AlertResolved {
                alert: &alert,
                by: "timeout",
                channels: 1,
            }
            .emit()
        }),
        Box::new(|| {
            AlertTimer {
                outcome: "resolved",
                timer: Some(&resolve),
            }
            .emit()
        }),
        Box::new(|| {
            OnCallTimer {
                timer: &remind,
                outcome: "sent",
                channels: 1,
            }
            .emit()
        }),
        Box::new(|| {
            OnCallTimer {
                timer: &remind,
                outcome: "acknowledged",
                channels: 1,
            }
            .emit()
        }),
        Box::new(|| {
            Delivered {
                id: H,
                channel: ChannelKind::Webhook,
                attempts: 1,
            }
            .emit()
        }),
        Box::new(|| {
            NotificationDropped {
                task: &task,
                reason: klaxon_core::route::DropReason::Resolved,
            }
            .emit()
        }),
        Box::new(|| {
            DuplicateDropped {
                id: H,
                channel: ChannelKind::Webhook,
            }
            .emit()
        }),
        Box::new(|| {
            DeliveryParked {
                id: H,
                channel: ChannelKind::Webhook,
                why: "rate limit",
                wait: Duration::from_secs(1),
            }
            .emit()
        }),
        Box::new(|| {
            DeliveryRetried {
                id: H,
                channel: ChannelKind::Webhook,
                attempts: 1,
                wait: Duration::from_secs(1),
                reason: H,
            }
            .emit()
        }),
        Box::new(|| {
            DeadLettered {
                id: Some(H),
                channel: ChannelKind::Webhook,
                attempts: 1,
                reason: H,
            }
            .emit()
        }),
        Box::new(|| {
            DeadLettered {
                id: None,
                channel: ChannelKind::Webhook,
                attempts: 1,
                reason: H,
            }
            .emit()
        }),
        Box::new(|| {
            BreakerOpened {
                scope: "endpoint",
                target: H,
                probe: false,
            }
            .emit()
        }),
        Box::new(|| {
            BreakerClosed {
                scope: "endpoint",
                target: H,
            }
            .emit()
        }),
        Box::new(|| {
            ConversationNotKept {
                id: H,
                channel: ChannelKind::Webhook,
                error: &error,
            }
            .emit()
        }),
        Box::new(|| {
            NoEventsTimer {
                outcome: "fired",
                timer: Some(&silence),
            }
            .emit()
        }),
        Box::new(|| {
            NoEventsTimer {
                outcome: "stale",
                timer: Some(&silence),
            }
            .emit()
        }),
    ];
    let out = Captured::default();
    let writer = out.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .without_time()
        .with_writer(move || writer.clone())
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        for emit in &events {
            emit();
        }
    });
    let log = String::from_utf8(out.0.lock().expect("capture").clone()).expect("utf-8");
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), events.len(), "one line per event:\n{log}");
    for line in &lines {
        let level = line.trim_start().split(' ').next().unwrap_or("");
        assert!(
            ["DEBUG", "INFO", "WARN"].contains(&level) && line.contains(" klaxon_engine::internal_events: "),
            "a line that is not an event's: {line:?}"
        );
        assert!(
            !line.chars().any(|c| c.is_control()),
            "a control character in {line:?}"
        );
        assert!(
            line.contains("FORGED"),
            "the hostile text is shown, not dropped: {line:?}"
        );
    }
}
