//! The one HTTP client every HTTP channel shares, and how its failures are classified.

use std::time::{Duration, SystemTime};

use klaxon_core::NotificationTask;
use url::{Host, Url};

use crate::error::{classify_status, parse_retry_after, tidy};
use crate::safety::{non_public_kind, RefusedAddress, VettingResolver};
use crate::{Delivered, DeliveryError};

/// How much of an error response we read, for the reason string.
const MAX_ERROR_BODY: usize = 4096;
/// How much of an answer we read when its body is parsed (Discord's `?wait=true` message, Telegram's `result`,
/// which echo the message we sent): more than the largest message either accepts, JSON-escaped.
pub(crate) const MAX_ANSWER_BODY: usize = 128 * 1024;

/// An HTTP answer, read and bounded.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) retry_after: Option<Duration>,
    pub(crate) body: String,
}

impl Answer {
    /// `Err` unless 2xx; `detail` is a secret-free snippet of the body.
    pub(crate) fn check(&self, what: &str, detail: &str) -> Result<(), DeliveryError> {
        match classify_status(self.status, self.retry_after, what, detail) {
            None => Ok(()),
            Some(e) => Err(e),
        }
    }

    /// [`Answer::check`] with a secret-free snippet of the body as the detail: for receivers that explain a
    /// failure in the body (Slack, Loop, webhooks, Hawk's notify-bot).
    pub(crate) fn check_body(&self, what: &str, secrets: &[&str]) -> Result<(), DeliveryError> {
        self.check(what, &body_detail(&self.body, secrets))
    }
}

/// How one request is made: its method, content type, extra headers and how much of the answer is read.
pub(crate) struct Request<'a> {
    pub(crate) method: reqwest::Method,
    pub(crate) content_type: &'a str,
    pub(crate) headers: &'a [(&'a str, String)],
    pub(crate) max_body: usize,
}

impl<'a> Request<'a> {
    /// A JSON request whose answer is parsed (read up to [`MAX_ANSWER_BODY`]).
    pub(crate) fn json(method: reqwest::Method) -> Self {
        Request {
            method,
            content_type: "application/json",
            headers: &[],
            max_body: MAX_ANSWER_BODY,
        }
    }
}

#[derive(Clone)]
pub(crate) struct Http {
    client: reqwest::Client,
    allow_private: bool,
}

impl Http {
    pub(crate) fn new(
        allow_private: bool,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .timeout(request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            // a proxy would resolve and connect on our behalf, around the address check
            .no_proxy()
            .dns_resolver(std::sync::Arc::new(VettingResolver { allow_private }))
            .user_agent(concat!("klaxon/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Http {
            client,
            allow_private,
        })
    }

    /// Refuses IP-literal hosts that are not public (names are vetted by the resolver, at connect time).
    pub(crate) fn vet_literal(&self, url: &Url, what: &str) -> Result<(), DeliveryError> {
        if self.allow_private {
            return Ok(());
        }
        let ip = match url.host() {
            Some(Host::Ipv4(ip)) => std::net::IpAddr::V4(ip),
            Some(Host::Ipv6(ip)) => std::net::IpAddr::V6(ip),
            Some(Host::Domain(_)) => return Ok(()),
            None => return Err(DeliveryError::permanent(format!("{what}: endpoint has no host"))),
        };
        match non_public_kind(ip) {
            None => Ok(()),
            Some(kind) => Err(DeliveryError::permanent(format!(
                "{what}: {}",
                RefusedAddress { kind }
            ))),
        }
    }

    /// POSTs `body` and reads the answer. `secrets` are scrubbed from any reason produced.
    pub(crate) async fn post(
        &self,
        url: &Url,
        content_type: &str,
        headers: &[(&str, String)],
        body: Vec<u8>,
        what: &str,
        secrets: &[&str],
    ) -> Result<Answer, DeliveryError> {
        let request = Request {
            method: reqwest::Method::POST,
            content_type,
            headers,
            max_body: MAX_ERROR_BODY,
        };
        self.send(url, request, body, what, secrets).await
    }

    /// Sends `body` as `request` says (method, content type, headers) and reads at most `request.max_body` of
    /// the answer: the one path every request takes, through the address check and the vetting resolver.
    pub(crate) async fn send(
        &self,
        url: &Url,
        request: Request<'_>,
        body: Vec<u8>,
        what: &str,
        secrets: &[&str],
    ) -> Result<Answer, DeliveryError> {
        let Request {
            method,
            content_type,
            headers,
            max_body,
        } = request;
        self.vet_literal(url, what)?;
        let mut req = self
            .client
            .request(method, url.clone())
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body);
        for (name, value) in headers {
            req = req.header(*name, value);
        }
        let mut resp = req.send().await.map_err(|e| classify_reqwest(e, what, secrets))?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let mut raw = Vec::new();
        // The body feeds the reason string (and, for answers we parse, a message id): read a bounded prefix, and
        // a failure to read it does not change the outcome the status already decided.
        while raw.len() < max_body {
            match resp.chunk().await {
                Ok(Some(chunk)) => raw.extend_from_slice(&chunk),
                Ok(None) | Err(_) => break,
            }
        }
        raw.truncate(max_body);
        Ok(Answer {
            status,
            retry_after,
            body: String::from_utf8_lossy(&raw).into_owned(),
        })
    }

    /// POSTs a JSON `body` and classifies the answer ([`Answer::check_body`]).
    pub(crate) async fn post_json(
        &self,
        url: &Url,
        headers: &[(&str, String)],
        body: Vec<u8>,
        what: &str,
        secrets: &[&str],
    ) -> Result<(), DeliveryError> {
        let answer = self
            .post(url, "application/json", headers, body, what, secrets)
            .await?;
        answer.check_body(what, secrets)
    }

    /// `task` as one JSON message to an incoming webhook whose URL is the whole endpoint (Slack, Loop): the
    /// endpoint is checked first, then `body` renders, then one POST; the endpoint (it is the secret) never
    /// reaches a reason.
    pub(crate) async fn post_json_to_endpoint(
        &self,
        task: &NotificationTask,
        body: impl FnOnce() -> Result<String, DeliveryError>,
    ) -> Result<Delivered, DeliveryError> {
        let (endpoint, channel) = (task.endpoint.as_str(), task.channel.as_str());
        let url = parse_http_endpoint(endpoint, channel)?;
        let what = label(channel, &url);
        let body = body()?;
        self.post_json(&url, &[], body.into_bytes(), &what, &[endpoint])
            .await?;
        Ok(Delivered::messages(1))
    }
}

/// Classifies a failed request. reqwest errors print the URL, which may carry a token: it is stripped first.
pub(crate) fn classify_reqwest(err: reqwest::Error, what: &str, secrets: &[&str]) -> DeliveryError {
    let err = err.without_url();
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
    let mut chain = Vec::new();
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<RefusedAddress>() {
            return DeliveryError::permanent(format!("{what}: {refused}"));
        }
        chain.push(e.to_string());
        source = e.source();
    }
    chain.dedup();
    let detail = tidy(&chain.join(": "), secrets);
    if err.is_timeout() {
        DeliveryError::transient(format!("{what}: timed out ({detail})"))
    } else if err.is_builder() {
        DeliveryError::permanent(format!("{what}: invalid request ({detail})"))
    } else if err.is_connect() {
        DeliveryError::transient(format!("{what}: connect error ({detail})"))
    } else {
        DeliveryError::transient(format!("{what}: request failed ({detail})"))
    }
}

/// Parses an HTTP(S) endpoint; anything else is a permanent error that never shows the endpoint itself.
pub(crate) fn parse_http_endpoint(raw: &str, channel: &str) -> Result<Url, DeliveryError> {
    let url = Url::parse(raw.trim())
        .map_err(|_| DeliveryError::permanent(format!("{channel}: endpoint is not a valid URL")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(DeliveryError::permanent(format!(
            "{channel}: endpoint scheme `{}` is not http(s)",
            tidy(url.scheme(), &[])
        )));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(DeliveryError::permanent(format!(
            "{channel}: endpoint has no host"
        )));
    }
    Ok(url)
}

/// `"<channel> <host>"`: names a destination in reasons without the secret parts of its URL.
pub(crate) fn label(channel: &str, url: &Url) -> String {
    format!(
        "{channel} {}",
        klaxon_core::text::one_line(url.host_str().unwrap_or("?"), 200)
    )
}

/// A short, secret-free snippet of an error body.
pub(crate) fn body_detail(body: &str, secrets: &[&str]) -> String {
    tidy(body, secrets)
}
