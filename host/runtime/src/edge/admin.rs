//! The edge's own endpoints: `/metrics`, and `POST /admin/reload/{domain}` behind a token.

use super::Edge;
use crate::supervise::lock;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use std::time::{Duration, Instant};

/// The admin endpoint takes at most one reload per this long, whatever the domain: a
/// reload compiles a module, and a client that loops on it must not starve the routes.
pub const ADMIN_SPACING: Duration = Duration::from_millis(200);

pub(super) async fn metrics(State(edge): State<Edge>) -> Response {
    let dep = edge.inner.deployment.clone();
    let text = tokio::task::spawn_blocking(move || {
        // Core domains (plugins, drivers, other domains, generations not yet released) are
        // counted by the kernel; components and handlers here.
        let core = dep.kernel.memory_bytes();
        let mut total = core;
        for p in dep.plugins.values() {
            let current = p.current();
            let m = current.memory();
            dep.metrics.memory(&p.name, m);
            if current.core().is_none() {
                total = total.saturating_add(m);
            }
        }
        for (n, d) in &dep.domains {
            dep.metrics.memory(n, d.memory_bytes());
        }
        for (n, c) in &dep.components {
            let m = c.memory_size();
            dep.metrics.memory(n, m);
            total = total.saturating_add(m);
        }
        for (n, h) in &dep.handlers {
            let m = h.memory();
            dep.metrics.memory(n, m);
            total = total.saturating_add(m);
        }
        dep.metrics.totals(core, dep.kernel.segment_bytes(), total);
        dep.metrics.compilations(dep.kernel.compilations());
        dep.metrics.encode()
    })
    .await
    .unwrap_or_default();
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

pub(super) async fn reload(
    State(edge): State<Edge>,
    Path(domain): Path<String>,
    transport: Option<axum::Extension<crate::tls::Transport>>,
    headers: axum::http::HeaderMap,
) -> Response {
    let dep = &edge.inner.deployment;
    // `lrpc serve` says how its clients reach it; an embedder's router says nothing.
    if transport.is_some_and(|t| t.exposes_secrets()) {
        tracing::warn!("admin request refused: a token in clear on an address other hosts reach");
        return (
            StatusCode::FORBIDDEN,
            "the admin endpoint takes no token in plain HTTP on an address other machines can \
             reach: serve TLS (`[serve] tls-cert`, `tls-key`) or listen on loopback\n",
        )
            .into_response();
    }
    let authorization = headers
        .get(axum::http::header::AUTHORIZATION)
        .map(HeaderValue::as_bytes);
    if !dep
        .config
        .admin
        .as_ref()
        .is_some_and(|t| t.accepts(authorization))
    {
        return (
            StatusCode::UNAUTHORIZED,
            [(axum::http::header::WWW_AUTHENTICATE, "Bearer")],
            "the admin endpoint needs `authorization: Bearer TOKEN`\n",
        )
            .into_response();
    }
    {
        let mut next = lock(&edge.inner.admin_next);
        let now = Instant::now();
        if now < *next {
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(axum::http::header::RETRY_AFTER, "1")],
                "one reload at a time: try again shortly\n",
            )
                .into_response();
        }
        *next = now + ADMIN_SPACING;
    }
    let reload: Box<dyn FnOnce() -> Result<u64, crate::deploy::DeployError> + Send> =
        if let Some(p) = dep.plugins.get(&domain).cloned() {
            Box::new(move || p.reload())
        } else if let Some(h) = dep.handlers.get(&domain).cloned() {
            Box::new(move || h.reload())
        } else {
            return (StatusCode::NOT_FOUND, format!("no plugin `{domain}`\n")).into_response();
        };
    match tokio::task::spawn_blocking(reload).await {
        Ok(Ok(g)) => (
            StatusCode::OK,
            format!("reloaded {domain}: generation {g}\n"),
        )
            .into_response(),
        Ok(Err(e)) => (StatusCode::UNPROCESSABLE_ENTITY, format!("{e}\n")).into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "reload failed\n").into_response(),
    }
}
