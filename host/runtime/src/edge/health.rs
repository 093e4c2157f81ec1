//! The probes, answered before any route sees the request and outside the routes' caps:
//! liveness (`[serve] health-path`, `/healthz` by default: 200 while the process serves) and
//! readiness (`ready-path`, `/readyz`: 200 when every plugin has a live instance and the
//! server is not draining, else 503 with the reason).

use super::Edge;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// Probes' answers are never cached on the way.
const NO_STORE: (header::HeaderName, HeaderValue) =
    (header::CACHE_CONTROL, HeaderValue::from_static("no-store"));

pub(super) async fn alive() -> Response {
    (StatusCode::OK, [NO_STORE], "ok\n").into_response()
}

pub(super) async fn ready(State(edge): State<Edge>) -> Response {
    match edge.unready() {
        None => (StatusCode::OK, [NO_STORE], "ready\n").into_response(),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [NO_STORE],
            format!("not ready: {why}\n"),
        )
            .into_response(),
    }
}
