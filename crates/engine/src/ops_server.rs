//! The operations endpoint: `GET /metrics` (Prometheus text), `GET /healthz` (process alive) and `GET /readyz`
//! (200 only while every role of the process is connected and consuming).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// The named flags of [`Readiness`].
type Flags = Vec<(String, Arc<AtomicBool>)>;

/// Readiness of the roles running in this process: each sets its flag while it is able to work.
#[derive(Clone, Default)]
pub struct Readiness {
    flags: Arc<std::sync::Mutex<Flags>>,
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

    /// The roles that are not ready; empty = ready. No role at all is not ready.
    pub fn not_ready(&self) -> Vec<String> {
        let flags = self.flags.lock().unwrap_or_else(|p| p.into_inner());
        if flags.is_empty() {
            return vec!["starting".into()];
        }
        flags
            .iter()
            .filter(|(_, f)| !f.load(Ordering::Relaxed))
            .map(|(n, _)| n.clone())
            .collect()
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

/// Binds `addr` and serves until `shutdown`, with `extra` (the HTTP API) merged beside the operations routes.
/// Binding errors are returned at once so a bad `--http-addr` is a clear start-up error.
pub async fn serve(
    addr: SocketAddr,
    metrics: &'static Metrics,
    readiness: Readiness,
    extra: axum::Router,
    shutdown: CancellationToken,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let app = axum::Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(Ops { metrics, readiness })
        .merge(extra);
    Ok(tokio::spawn(async move {
        // The peer address lets the API serve loopback clients only when no token is set.
        let _ = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await;
    }))
}
