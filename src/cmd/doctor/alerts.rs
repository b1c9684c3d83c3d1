//! The **alert slots** line: projects that could not open an alert lately (`klaxon_counter::Alerts`): every slot
//! open, or their alerts resolved by hand only holding their share. Such a project's firings are delivered, but
//! without reminders, escalation or resolve, so the line is a warning that names the fix.

use std::time::Duration;

use klaxon_counter::{Alerts, NotOpened, RedisHandle};

use super::{check, Check, Status};

/// How far back the line looks.
const SINCE: Duration = Duration::from_secs(24 * 3600);
/// The most projects named on the line.
const MAX_NAMED: usize = 5;

/// The line, from what Redis remembers (asked only when Redis answered the redis line).
pub(super) async fn alert_slots_check(redis: &RedisHandle, namespace: &str, timeout: Duration) -> Check {
    let alerts = Alerts::new(redis.clone(), namespace);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let since = now_ms.saturating_sub(SINCE.as_millis() as i64);
    let found = tokio::time::timeout(timeout, async {
        let full = alerts.full_projects(since, MAX_NAMED + 1).await?;
        let mut named = Vec::new();
        for (project, _) in full.iter().take(MAX_NAMED) {
            named.push((project.clone(), alerts.usage(project).await?));
        }
        Ok::<_, klaxon_counter::CounterError>((full.len(), named))
    })
    .await;
    let (count, named) = match found {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return check(Status::Warn, "alert slots", format!("could not be checked: {e}")),
        Err(_) => {
            return check(
                Status::Warn,
                "alert slots",
                format!(
                    "could not be checked: no answer within {}",
                    humantime::format_duration(timeout)
                ),
            )
        }
    };
    if count == 0 {
        return check(
            Status::Ok,
            "alert slots",
            format!(
                "no project ran out of alert slots in the last 24 h (each keeps {} alerts, at most {} of them \
                 open ones resolved by hand only)",
                alerts.limit(),
                alerts.by_hand_limit()
            ),
        );
    }
    let shown: Vec<String> = named
        .iter()
        .map(|(p, u)| {
            let now = match u.full(true) {
                Some(NotOpened::ProjectFull) => "all open now",
                Some(NotOpened::ByHandShare) => "by-hand share taken now",
                None => "room again now",
            };
            format!(
                "{} ({} open of {}, {} resolved by hand only; {now})",
                p.escape_debug(),
                u.open,
                u.limit,
                u.by_hand
            )
        })
        .collect();
    let more = if count > MAX_NAMED { ", …" } else { "" };
    check(
        Status::Warn,
        "alert slots",
        format!(
            "project(s) that could not open an alert in the last 24 h (firings delivered without reminders, \
             escalation or resolve; klaxon_alerts_not_opened_total): {}{more}; resolve alerts (`klaxon alerts \
             list --project P`), or give rules whose alerts are resolved by hand a resolveAfter",
            shown.join(", ")
        ),
    )
}
