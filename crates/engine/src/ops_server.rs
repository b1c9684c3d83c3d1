//! The operations endpoint: `GET /metrics` (Prometheus text), `GET /healthz` (process alive) and `GET /readyz`
//! (200 only while every role of the process is connected and consuming), and the HTTP server that serves them
//! with the API beside them.
//!
//! The server is hyper's HTTP/1.1 connection driver under an accept loop of our own, so that a slow or idle
//! client cannot hold the process's connections ([`ServerLimits`]):
//!
//! ```text
//!  accept (one permit of max_connections; without one, new connections wait in the listen backlog)
//!    └─▶ connection task: the request head within header_timeout (from the connection's start or the previous
//!        answer: so an idle keep-alive connection is closed after it too); a write that moves nothing for
//!        write_timeout ends the connection; shutdown → finish the request in flight, close the others
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::{ConnectInfo, State};
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::metrics::Metrics;

/// The named flags of [`Readiness`].
type Flags = Vec<(String, Arc<AtomicBool>)>;

/// Readiness of the roles running in this process: each sets its flag while it is able to work.
#[derive(Clone, Default)]
pub struct Readiness {
    flags: Arc<std::sync::Mutex<Flags>>,
    /// The service start-up is waiting for (`redis at 127.0.0.1:6379`), named by `/readyz`.
    waiting: Arc<std::sync::Mutex<Option<String>>>,
}

impl Readiness {
    /// Registers a role (e.g. `worker`, `sender.slack`); it starts not ready.
    pub fn role(&self, name: &str) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        self.flags
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((name.to_owned(), flag.clone()));
        flag
    }

    /// Says what start-up is waiting for (a service and its address, credentials left out), until `None`.
    pub fn waiting_for(&self, what: Option<String>) {
        *self.waiting.lock().unwrap_or_else(|p| p.into_inner()) = what;
    }

    /// The roles that are not ready, after what start-up waits for (`waiting for redis at …`); empty = ready.
    /// No role at all is not ready (`starting`).
    pub fn not_ready(&self) -> Vec<String> {
        let waiting = self
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|w| format!("waiting for {w}"));
        let flags = self.flags.lock().unwrap_or_else(|p| p.into_inner());
        let mut out: Vec<String> = waiting.into_iter().collect();
        if flags.is_empty() && out.is_empty() {
            return vec!["starting".into()];
        }
        out.extend(
            flags
                .iter()
                .filter(|(_, f)| !f.load(Ordering::Relaxed))
                .map(|(n, _)| n.clone()),
        );
        out
    }
}

#[derive(Clone)]
struct Ops {
    metrics: &'static Metrics,
    readiness: Readiness,
}

async fn metrics_handler(State(ops): State<Ops>) -> impl IntoResponse {
    ops.metrics.set_ready(ops.readiness.not_ready().is_empty());
    // The exporter writes the Prometheus text format (not OpenMetrics: no `# EOF`).
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        ops.metrics.render(),
    )
}

async fn readyz(State(ops): State<Ops>) -> impl IntoResponse {
    let missing = ops.readiness.not_ready();
    if missing.is_empty() {
        (StatusCode::OK, "ready\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", missing.join(", ")),
        )
    }
}

/// Bounds of the HTTP server against slow and numerous clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    /// A request's head (request line and headers) must arrive within this time of the connection's start or of
    /// the previous answer on it; otherwise the connection is closed. An idle keep-alive connection is therefore
    /// closed after it too.
    pub header_timeout: Duration,
    /// Connections served at once; a further one waits in the listen backlog until one closes.
    pub max_connections: usize,
    /// A write that makes no progress for this long (a client that stopped reading its answer) ends the
    /// connection.
    pub write_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            header_timeout: Duration::from_secs(10),
            max_connections: 512,
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// Largest request head (request line and headers) a connection may send: bounds what `max_connections` slow clients
/// can pin (more: 431).
const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Binds `addr` and serves until `shutdown`, with `extra` (the HTTP API) merged beside the operations routes,
/// within `limits`. Binding errors are returned at once so a bad `--http-addr` is a clear start-up error. The
/// task ends once every connection has closed after `shutdown` (each finishes the request it is serving).
pub async fn serve(
    addr: SocketAddr,
    metrics: &'static Metrics,
    readiness: Readiness,
    extra: axum::Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let app = axum::Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(Ops { metrics, readiness })
        .merge(extra);
    Ok(tokio::spawn(accept_loop(listener, app, limits, shutdown)))
}

async fn accept_loop(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    let connections = TaskTracker::new();
    loop {
        // A permit first: at the cap, connections wait unaccepted (bounded by the kernel's backlog).
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => break,
            },
        };
        let (stream, peer) = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before it was accepted: wait a little
                    // instead of spinning.
                    tracing::debug!(error = %e, "accepting an HTTP connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let shutdown = shutdown.clone();
        connections.spawn(async move {
            serve_connection(stream, peer, app, limits, shutdown).await;
            drop(permit);
        });
    }
    // No more accepts (the listener closes); the open connections finish what they serve.
    drop(listener);
    connections.close();
    connections.wait().await;
}

/// After shutdown, how often a connection checks whether it still serves a request, and how many checks in a
/// row without one close it (a client still sending its request head has nothing to finish).
const SHUTDOWN_IDLE_CHECK: Duration = Duration::from_millis(100);
const SHUTDOWN_IDLE_CHECKS: u32 = 2;

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    limits: ServerLimits,
    shutdown: CancellationToken,
) {
    // Requests whose handler is running on this connection (the answer is written right after).
    let in_flight = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = in_flight.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let mut req = req.map(axum::body::Body::new);
        // The peer address lets the API serve loopback clients only when no token is set, and throttle per client.
        req.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        let counted = counted.clone();
        async move {
            counted.fetch_add(1, Ordering::Relaxed);
            let answer = app.oneshot(req).await;
            counted.fetch_sub(1, Ordering::Relaxed);
            answer
        }
    });
    let io = hyper_util::rt::TokioIo::new(StallGuard::new(stream, limits.write_timeout));
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_header_size(MAX_HEAD_BYTES);
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let outcome = tokio::select! {
        r = conn.as_mut() => Some(r),
        _ = shutdown.cancelled() => {
            // Finish the request being served (the caller bounds the wait); hyper closes an idle keep-alive
            // connection at once, and one still waiting for a request head is dropped after a few quiet checks.
            conn.as_mut().graceful_shutdown();
            let mut quiet = 0;
            loop {
                tokio::select! {
                    r = conn.as_mut() => break Some(r),
                    _ = tokio::time::sleep(SHUTDOWN_IDLE_CHECK) => {
                        quiet = if in_flight.load(Ordering::Relaxed) == 0 { quiet + 1 } else { 0 };
                        if quiet >= SHUTDOWN_IDLE_CHECKS {
                            break None;
                        }
                    }
                }
            }
        }
    };
    if let Some(Err(e)) = outcome {
        // Timeouts, resets and malformed requests: the client's business, not an error of the process.
        tracing::debug!(peer = %peer, error = %e, "HTTP connection ended");
    }
}

/// A connection whose writes fail with `TimedOut` after `limit` without progress, so a client that stops
/// reading cannot hold its connection (and its permit) forever. Reads pass through: the head has hyper's
/// timeout, bodies the handlers' timeout.
struct StallGuard<T> {
    inner: T,
    limit: Duration,
    /// Armed while a write is pending; reset whenever one makes progress.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<T> StallGuard<T> {
    fn new(inner: T, limit: Duration) -> Self {
        StallGuard {
            inner,
            limit,
            deadline: None,
        }
    }

    /// After a pending write: Ready(error) once the write has made no progress for `limit`.
    fn poll_stalled(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Error> {
        let limit = self.limit;
        let deadline = self
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("the client read nothing for {} s", limit.as_secs()),
            )),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<R>(&mut self, r: Poll<R>, cx: &mut Context<'_>) -> Poll<std::io::Result<R>> {
        match r {
            Poll::Ready(v) => {
                self.deadline = None;
                Poll::Ready(Ok(v))
            }
            Poll::Pending => self.poll_stalled(cx).map(Err),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Ready(Ok(n)) => self.progress(Poll::Ready(n), cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.progress(Poll::<usize>::Pending, cx),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Ready(Ok(())) => self.progress(Poll::Ready(()), cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.progress(Poll::<()>::Pending, cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Ready(Ok(())) => self.progress(Poll::Ready(()), cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.progress(Poll::<()>::Pending, cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(Ok(n)) => self.progress(Poll::Ready(n), cx),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.progress(Poll::<usize>::Pending, cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_write_the_peer_does_not_read_fails_after_the_limit_and_one_it_reads_does_not() {
        // A pipe with room for 64 bytes: the 65th waits until the other end reads.
        let (ours, _theirs) = tokio::io::duplex(64);
        let mut guarded = StallGuard::new(ours, Duration::from_millis(200));
        let big = vec![b'x'; 4096];
        let outcome = tokio::time::timeout(Duration::from_secs(10), guarded.write_all(&big)).await;
        let err = outcome
            .expect("the stall guard ended the write")
            .expect_err("a stalled write fails");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);

        // A reader that keeps reading, however slowly overall, never trips it.
        let (ours, mut theirs2) = tokio::io::duplex(64);
        let mut guarded = StallGuard::new(ours, Duration::from_millis(200));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0u8; 16];
            loop {
                match theirs2.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            got.len()
        });
        guarded.write_all(&big).await.expect("a reading peer");
        guarded.shutdown().await.expect("shutdown");
        drop(guarded);
        assert_eq!(reader.await.expect("join"), big.len());
    }
}
