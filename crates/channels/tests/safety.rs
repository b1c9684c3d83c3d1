//! The default configuration refuses internal addresses, before any request is sent.

mod common;

use common::*;
use klaxon_channels::ChannelsConfig;
use klaxon_core::{ChannelKind, Reason};
use klaxon_testkit::HttpSink;

#[tokio::test]
async fn default_config_refuses_internal_addresses_without_sending() {
    let sink = HttpSink::start().await.expect("sink");
    let port = sink.addr().port();
    let ch = channels(ChannelsConfig {
        allow_private_endpoints: false,
        ..config(&sink.url(""))
    });
    let endpoints = [
        format!("http://127.0.0.1:{port}/h/{ENDPOINT_SECRET}"),
        // a name that resolves to loopback: refused by the vetting resolver
        format!("http://localhost:{port}/h/{ENDPOINT_SECRET}"),
        format!("http://[::ffff:127.0.0.1]:{port}/h"),
        format!("http://[::1]:{port}/h"),
        "http://10.1.2.3/h".to_owned(),
        "http://192.168.0.1/h".to_owned(),
        "http://169.254.169.254/latest/meta-data".to_owned(),
        "http://0.0.0.0/h".to_owned(),
        "http://[fe80::1]/h".to_owned(),
        // blocks of the IANA special-purpose registries the first hand-written checks missed (issue #22)
        "http://198.18.0.1/h".to_owned(),
        "http://192.0.0.170/h".to_owned(),
        "http://[64:ff9b:1::a00:1]/h".to_owned(),
        "http://[::ffff:0:7f00:1]/h".to_owned(),
        "http://[64:ff9b::7f00:1]/h".to_owned(),
    ];
    for endpoint in &endpoints {
        for channel in [
            ChannelKind::Webhook,
            ChannelKind::Slack,
            ChannelKind::Telegram,
            ChannelKind::Loop,
            ChannelKind::Discord,
            ChannelKind::Teams,
        ] {
            let t = task(channel, endpoint, Reason::New, &[("x", 1)]);
            let err = ch.deliver(&t).await.expect_err(endpoint);
            eprintln!("{err:?}");
            assert!(!err.is_transient(), "{channel} {endpoint}: {err:?}");
            assert!(err.reason().contains("refused"), "{err}");
            assert_secret_free(&err);
        }
    }
    // the Bot API base URL is checked too (here it is the loopback sink)
    let err = ch
        .deliver(&task(ChannelKind::Telegram, "12345", Reason::New, &[("x", 1)]))
        .await
        .expect_err("loopback telegram api");
    assert!(!err.is_transient() && err.reason().contains("refused"), "{err}");
    assert_secret_free(&err);
    // and so is the PagerDuty API URL (here the loopback sink as well)
    let err = ch
        .deliver(&task(
            ChannelKind::Pagerduty,
            "r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE",
            Reason::New,
            &[("x", 1)],
        ))
        .await
        .expect_err("loopback pagerduty api");
    assert!(!err.is_transient() && err.reason().contains("refused"), "{err}");
    assert!(
        !err.reason().contains("r3FPuDvNOTEDyQYCc7trBkymIFcy2NkE"),
        "{err}"
    );
    assert_eq!(sink.count(), 0, "no request reached the sink");
}

#[tokio::test]
async fn allow_private_endpoints_lets_loopback_through() {
    let sink = HttpSink::start().await.expect("sink");
    let ch = channels(config(&sink.url("")));
    let endpoint = format!("http://localhost:{}/h", sink.addr().port());
    ch.deliver(&task(ChannelKind::Webhook, &endpoint, Reason::New, &[("x", 1)]))
        .await
        .expect("delivered");
    assert_eq!(sink.count(), 1);
}
