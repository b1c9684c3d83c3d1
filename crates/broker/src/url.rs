//! AMQP URLs: `--amqp-url` is one URL or a comma-separated list of the nodes of one cluster, each checked before
//! anything connects ([`parse_urls`]). An [`AmqpUrl`] keeps lapin's parsed form inside this crate; its `Debug`
//! shows no password.

use crate::BrokerError;

/// One node's parsed AMQP URL (see [`parse_urls`]). `Debug` shows scheme, host, port and vhost, never the
/// user or password.
#[derive(Clone)]
pub struct AmqpUrl(pub(crate) lapin::uri::AMQPUri);

impl std::fmt::Debug for AmqpUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let u = &self.0;
        write!(
            f,
            "{:?}://{}:{}/{}",
            u.scheme, u.authority.host, u.authority.port, u.vhost
        )
    }
}

/// The node URLs of `url` (a comma-separated list of the nodes of one cluster, or one URL), each parsed, before
/// anything connects: [`BrokerError::InvalidUrl`] names the node (by position) that cannot be read.
pub fn parse_urls(url: &str) -> Result<Vec<AmqpUrl>, BrokerError> {
    let nodes = nodes(url);
    if nodes.is_empty() {
        return Err(BrokerError::InvalidUrl("no URL given".into()));
    }
    let many = nodes.len() > 1;
    nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            parse_url(node).map_err(|e| match (many, e) {
                (true, BrokerError::InvalidUrl(why)) => {
                    BrokerError::InvalidUrl(format!("node #{}: {why}", i + 1))
                }
                (_, e) => e,
            })
        })
        .collect()
}

/// The nodes of a comma-separated list, trimmed, empty ones skipped.
pub(crate) fn nodes(url: &str) -> Vec<&str> {
    url.split(',').map(str::trim).filter(|u| !u.is_empty()).collect()
}

/// One node's URL. lapin's parser quotes no part of the URL in its messages except the scheme, so its message
/// is kept (cut short); a URL without a scheme gets a hint instead of "relative URL without a base".
pub(crate) fn parse_url(url: &str) -> Result<AmqpUrl, BrokerError> {
    if !url.contains("://") {
        return Err(BrokerError::InvalidUrl(
            "not a URL: expected amqp://user:password@host:5672/vhost (or amqps://)".into(),
        ));
    }
    url.parse()
        .map(AmqpUrl)
        .map_err(|e: String| BrokerError::InvalidUrl(klaxon_core::text::one_line(&e, 200)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_no_credentials() {
        let urls =
            parse_urls("amqp://user:s3cret@rabbit-1:5672/%2f, amqp://user:s3cret@rabbit-2/v").expect("parse");
        let shown = format!("{urls:?}");
        assert!(!shown.contains("s3cret") && !shown.contains("user"), "{shown}");
        assert!(
            shown.contains("rabbit-1") && shown.contains("rabbit-2"),
            "{shown}"
        );
    }
}
