//! The shape of a channel's endpoint as its service documents it ([`endpoint_problem`]): what `klaxon rules
//! check` warns of before the service refuses it.

use super::ChannelKind;

/// A Slack conversation id as the Web API's `chat.postMessage` and `chat.update` take it: `C…` (public
/// channel), `G…` (private channel, older workspaces) or `D…` (direct message), then 8 to 20 upper-case letters
/// and digits. Channel names (`#alerts`) are not ids: `chat.update` takes ids only, and a channel can be renamed.
pub fn is_slack_channel_id(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b'C' | b'G' | b'D'))
        && (9..=21).contains(&s.len())
        && bytes.all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
}

/// What is wrong with the shape of an endpoint the channel's service would refuse, with the fix; `None` when it
/// looks right. Only the channels whose endpoints have a documented shape are judged: a Discord webhook URL
/// (`https://discord.com/api/webhooks/<id>/<token>`), a Teams Workflows URL (https only), a PagerDuty Events
/// API v2 routing key (32 letters and digits) and a Slack endpoint (an incoming-webhook URL, or a channel id
/// for the Web API: [`is_slack_channel_id`]). The channel is still delivered to (the service has the last word):
/// `klaxon rules check` shows the problem.
pub fn endpoint_problem(kind: ChannelKind, endpoint: &str) -> Option<(String, String)> {
    let endpoint = endpoint.trim();
    match kind {
        ChannelKind::Discord => {
            let ok = url::Url::parse(endpoint).is_ok_and(|u| {
                let segments: Vec<&str> = u.path_segments().map(Iterator::collect).unwrap_or_default();
                // /api/webhooks/<id>/<token>, or /api/v<N>/webhooks/<id>/<token>
                let rest = match segments.as_slice() {
                    ["api", "webhooks", rest @ ..] => rest,
                    ["api", v, "webhooks", rest @ ..] if v.starts_with('v') => rest,
                    _ => &[][..],
                };
                matches!(u.scheme(), "http" | "https")
                    && rest.len() == 2
                    && !rest[0].is_empty()
                    && rest[0].bytes().all(|b| b.is_ascii_digit())
                    && !rest[1].is_empty()
            });
            (!ok).then(|| {
                (
                    "channel `discord` endpoint is not a Discord webhook URL \
                     (https://discord.com/api/webhooks/<id>/<token>)"
                        .to_owned(),
                    "copy the URL from the channel's Integrations → Webhooks → Copy Webhook URL".to_owned(),
                )
            })
        }
        ChannelKind::Teams => {
            // Teams itself is https only; plain http is for a local receiver (a test stub, a relay), which the
            // senders reach only with --allow-private-endpoints, as `test-notify` does.
            let ok = url::Url::parse(endpoint).is_ok_and(|u| match u.scheme() {
                "https" => u.host_str().is_some(),
                "http" => u.host().is_some_and(|h| local_host(&h)),
                _ => false,
            });
            (!ok).then(|| {
                (
                    "channel `teams` endpoint is not an https URL: Teams Workflows webhooks are https (plain http \
                     only to a loopback or private address)"
                        .to_owned(),
                    "create a Workflows webhook (\"Post to a channel when a webhook request is received\") and \
                     paste its https URL"
                        .to_owned(),
                )
            })
        }
        ChannelKind::Slack if !endpoint.contains("://") => (!is_slack_channel_id(endpoint)).then(|| {
            let name = endpoint.starts_with('#');
            (
                if name {
                    "channel `slack` endpoint is a channel name: the Slack Web API needs the channel's id \
                     (C0123ABCD)"
                        .to_owned()
                } else {
                    "channel `slack` endpoint is neither an incoming-webhook URL (https://hooks.slack.com/…) nor \
                     a channel id (C0123ABCD)"
                        .to_owned()
                },
                "in Slack, open the channel's details: its Channel ID is at the bottom of the About tab; invite \
                 the operator's bot to it (/invite @<bot>), or paste an incoming-webhook URL instead"
                    .to_owned(),
            )
        }),
        ChannelKind::Slack => url::Url::parse(endpoint)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
            .is_none()
            .then(|| {
                (
                    "channel `slack` endpoint is not an http(s) URL".to_owned(),
                    "paste the incoming-webhook URL (https://hooks.slack.com/services/…) or a channel id \
                     (C0123ABCD)"
                        .to_owned(),
                )
            }),
        ChannelKind::Pagerduty => {
            let ok = endpoint.len() == 32 && endpoint.bytes().all(|b| b.is_ascii_alphanumeric());
            (!ok).then(|| {
                (
                    "channel `pagerduty` endpoint is not an Events API v2 routing key (32 letters and digits)"
                        .to_owned(),
                    "copy the Integration Key of the service's Events API v2 integration".to_owned(),
                )
            })
        }
        _ => None,
    }
}

/// A loopback, private or link-local address, or `localhost`: a receiver on the operator's own network.
fn local_host(host: &url::Host<&str>) -> bool {
    match host {
        url::Host::Domain(d) => {
            d.eq_ignore_ascii_case("localhost") || d.to_ascii_lowercase().ends_with(".localhost")
        }
        url::Host::Ipv4(ip) => ip.is_loopback() || ip.is_private() || ip.is_link_local(),
        url::Host::Ipv6(ip) => {
            ip.is_loopback()
                || (ip.segments()[0] & 0xfe00) == 0xfc00
                || (ip.segments()[0] & 0xffc0) == 0xfe80
                || ip
                    .to_ipv4_mapped()
                    .is_some_and(|v4| v4.is_loopback() || v4.is_private())
        }
    }
}
