//! A local HTTP server that records requests and answers from a script, standing in for Slack, Telegram and
//! webhook receivers.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// One recorded request.
#[derive(Debug, Clone)]
pub struct Request {
    /// HTTP method.
    pub method: String,
    /// Path and query.
    pub uri: String,
    /// Headers, lower-case names.
    pub headers: Vec<(String, String)>,
    /// Raw body.
    pub body: Bytes,
    /// When it arrived.
    pub at: Instant,
}

impl Request {
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The body as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// First header with this (lower-case) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    /// Status code.
    pub status: u16,
    /// Extra headers (e.g. `Retry-After`).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: String,
    /// Wait this long before answering.
    pub delay: Duration,
}

impl Reply {
    /// A reply with this status and an empty body.
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: Duration::ZERO,
        }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Sets the body.
    pub fn body(mut self, body: &str) -> Self {
        self.body = body.to_owned();
        self
    }

    /// Answers after `delay`.
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }
}

/// Which requests a routed reply answers.
type Matcher = Arc<dyn Fn(&Request) -> bool + Send + Sync>;

#[derive(Default)]
struct Inner {
    requests: Vec<Request>,
    routes: Vec<(Matcher, Reply)>,
    script: VecDeque<Reply>,
    default: Option<Reply>,
}

/// A recording HTTP server on 127.0.0.1 with a random port. Dropping it stops the server.
pub struct HttpSink {
    addr: SocketAddr,
    inner: Arc<Mutex<Inner>>,
    task: tokio::task::JoinHandle<()>,
}

async fn handle(
    State(inner): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let reply = {
        let mut g = inner.lock().unwrap_or_else(|p| p.into_inner());
        let request = Request {
            method: method.to_string(),
            uri: uri.to_string(),
            headers: headers
                .iter()
                .map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
                .collect(),
            body,
            at: Instant::now(),
        };
        let routed = g
            .routes
            .iter()
            .find(|(matches, _)| matches(&request))
            .map(|(_, reply)| reply.clone());
        g.requests.push(request);
        routed
            .or_else(|| g.script.pop_front())
            .or_else(|| g.default.clone())
            .unwrap_or_else(|| Reply::status(200).body("ok"))
    };
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let mut resp = (
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        reply.body,
    )
        .into_response();
    for (k, v) in reply.headers {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::from_bytes(k.as_bytes()),
            axum::http::HeaderValue::from_str(&v),
        ) {
            resp.headers_mut().insert(k, v);
        }
    }
    resp
}

impl HttpSink {
    /// Starts a sink that answers 200 `ok` unless scripted otherwise.
    pub async fn start() -> std::io::Result<Self> {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new().fallback(handle).with_state(inner.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(HttpSink { addr, inner, task })
    }

    /// `http://127.0.0.1:<port>` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Queues replies used, in order, for the next requests.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().script.extend(replies);
    }

    /// Answers every request for which `matches` is true with `reply`, before the script and the default (the
    /// first matching route wins): e.g. one webhook path, or one PagerDuty routing key in the body.
    pub fn route(&self, matches: impl Fn(&Request) -> bool + Send + Sync + 'static, reply: Reply) {
        self.lock().routes.push((Arc::new(matches), reply));
    }

    /// The reply used once the script is empty (default 200 `ok`).
    pub fn set_default(&self, reply: Reply) {
        self.lock().default = Some(reply);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.lock().requests.clone()
    }

    /// How many requests so far.
    pub fn count(&self) -> usize {
        self.lock().requests.len()
    }

    /// Waits until at least `n` requests arrived, up to `timeout`; returns them all.
    pub async fn wait_for_count(&self, n: usize, timeout: Duration) -> Vec<Request> {
        let deadline = Instant::now() + timeout;
        while self.count() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.requests()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for HttpSink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
