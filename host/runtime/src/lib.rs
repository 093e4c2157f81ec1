//! The runtime around the lrpc kernel: deployments described by a TOML config
//! ([`config`]), started and supervised ([`deploy`]), run once (`lrpc run`) or served over
//! HTTP by the edge server ([`edge`], `lrpc serve`; a chain may end in a `wasi:http`
//! component, [`wasi_http`]), with Prometheus metrics ([`metrics`]), traces exported over
//! OTLP ([`telemetry`]) and hot reload ([`reload`]). Clients may bind to exports of other kernels, and the deployment may serve
//! its exports to them ([`network`], over wRPC).
//!
//! The kernel (`lrpc`) needs none of this: it has no async runtime and no HTTP.
//!
//! # Embedding the edge server in an axum application
//!
//! ```no_run
//! use axum::{Router, routing::get};
//! use lrpc_runtime::{config::Config, deploy::Deployment, edge::Edge};
//! use std::sync::Arc;
//!
//! # async fn app() -> anyhow::Result<()> {
//! let config = Config::load("guests/apps/http-chain/lrpc.toml".as_ref())?;
//! let edge = Edge::start(Arc::new(Deployment::start(config)?))?;
//! // The application's own routes beside the plugin chains (and `/metrics`).
//! let app = Router::new()
//!     .route("/health", get(|| async { "ok" }))
//!     .merge(edge.router());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! edge.shutdown();
//! # Ok(())
//! # }
//! ```
//!
//! Without HTTP, [`edge::Edge::dispatch`] runs one request through a route's chain.
//!
//! The library has no `unsafe` code; the `lrpc` binary's `unsafe` blocks are listed in its own
//! docs (`src/main.rs`).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod body_rate;
pub mod config;
pub mod demo;
pub mod deploy;
pub mod edge;
pub mod http;
pub mod listener;
pub mod metrics;
pub mod network;
pub mod reload;
mod supervise;
pub mod telemetry;
pub mod template;
pub mod tls;
pub mod value;
pub mod wasi_http;

pub use lrpc_driver as driver;
