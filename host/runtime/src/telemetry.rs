//! Traces: the runtime's spans exported over OTLP (OpenTelemetry), and the W3C trace
//! context (`traceparent`, `tracestate`) carried in and out.
//!
//! **On or off.** Export is on when an endpoint is configured: the standard variables
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, or `endpoint` in
//! the config's `[telemetry]` table. `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`
//! turn it off whatever else is set. When it is off no span is made for export, no context
//! is read or written, and the call path pays one relaxed load ([`on`]).
//!
//! **Settings.** The environment wins over the config, as in other OpenTelemetry software:
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`) picks `http/protobuf` (the
//! default) or `grpc`; `OTEL_SERVICE_NAME` names the service (default `lrpc`);
//! `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` choose the sampler (default: a
//! sampled parent's decision, else every trace); `OTEL_EXPORTER_OTLP_HEADERS`, `..._TIMEOUT`
//! and the batch variables (`OTEL_BSP_SCHEDULE_DELAY`, ...) are read by the exporter itself.
//!
//! **Spans** are `tracing` spans at debug level, which the export's layer takes whatever
//! `RUST_LOG` says (the log's own layer keeps its filter): the edge's `request` (route,
//! status), its `chain`, each plugin's `call` (made by the kernel: domain, procedure,
//! deadline, status), the `handler`, each `outgoing` request of a handler, and the remote
//! `remote call` and `remote serve` (`lrpc_remote::trace`).
//!
//! **Propagation.** A request's `traceparent` makes its span a child of the caller's; the
//! request the plugins see carries the request span's own `traceparent` (and the
//! `tracestate` that came), a handler's the handler span's, and a handler's outgoing
//! requests their own span's. Remote calls carry the context to the kernel serving them.

use crate::config::{TelemetryProtocol, TelemetrySpec};
use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator as _};
use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

static ON: AtomicBool = AtomicBool::new(false);

/// Whether spans are exported (and trace context carried).
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// The W3C header that names a request's trace and parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header of vendors' trace state, carried along as it came.
pub const TRACESTATE: &str = "tracestate";

/// Why export could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// A setting has a value this build does not take.
    #[error("{0}")]
    Setting(String),
    /// The exporter could not be built.
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
}

/// Running export: flushes what is left and stops when dropped (or [`Telemetry::shutdown`]).
pub struct Telemetry {
    provider: SdkTracerProvider,
    /// The exporter's own runtime: its HTTP client and gRPC channel run there, so that an
    /// export never waits for (or holds) the server's reactor, and shutdown can still flush.
    runtime: Option<tokio::runtime::Runtime>,
}

/// The export's `tracing` layer, for a subscriber built on the registry.
pub type TraceLayer =
    Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;

/// The settings that turn export on, resolved from the environment and the config.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    /// The config's endpoint, used when no variable names one (a base URL, to which
    /// `/v1/traces` is added for HTTP).
    endpoint: Option<String>,
    protocol: TelemetryProtocol,
    service_name: String,
    /// The config's sampling ratio, when no variable chooses a sampler.
    ratio: Option<f64>,
}

/// Reads a variable, empty as unset.
fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

impl Settings {
    /// What `env` and `spec` say; `None` when export is off.
    fn resolve(
        env: impl Fn(&str) -> Option<String>,
        spec: Option<&TelemetrySpec>,
    ) -> Result<Option<Settings>, TelemetryError> {
        let yes = |v: Option<String>| v.is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        if yes(env("OTEL_SDK_DISABLED"))
            || env("OTEL_TRACES_EXPORTER").is_some_and(|e| e.trim() == "none")
        {
            return Ok(None);
        }
        let from_env = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
            || env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some();
        let endpoint = spec.and_then(|s| s.endpoint.clone());
        if !from_env && endpoint.is_none() {
            return Ok(None);
        }
        let protocol = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            Some(p) => p.trim().parse().map_err(TelemetryError::Setting)?,
            None => spec.and_then(|s| s.protocol).unwrap_or_default(),
        };
        let service_name = env("OTEL_SERVICE_NAME")
            .or_else(|| spec.and_then(|s| s.service_name.clone()))
            .unwrap_or_else(|| "lrpc".into());
        let ratio = match env("OTEL_TRACES_SAMPLER") {
            Some(_) => None,
            None => spec.and_then(|s| s.sample_ratio),
        };
        Ok(Some(Settings {
            endpoint: if from_env { None } else { endpoint },
            protocol,
            service_name,
            ratio,
        }))
    }
}

impl Telemetry {
    /// Starts export if the environment or `spec` (the config's `[telemetry]`) configures
    /// it: the running export and the layer that feeds it; `None` when it is off.
    pub fn start(
        spec: Option<&TelemetrySpec>,
    ) -> Result<Option<(Telemetry, TraceLayer)>, TelemetryError> {
        let Some(settings) = Settings::resolve(var, spec)? else {
            return Ok(None);
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()
            .map_err(|e| TelemetryError::Exporter(format!("starting its runtime: {e}")))?;
        let exporter = {
            // The gRPC channel starts its connection task on the runtime entered here.
            let _entered = runtime.enter();
            exporter(&settings, runtime.handle().clone())?
        };
        let mut provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(settings.service_name.clone())
                    .build(),
            );
        if let Some(r) = settings.ratio {
            use opentelemetry_sdk::trace::Sampler;
            provider = provider.with_sampler(Sampler::ParentBased(Box::new(
                Sampler::TraceIdRatioBased(r),
            )));
        }
        let provider = provider.build();
        let tracer = provider.tracer("lrpc");
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_threads(false)
            .with_location(false)
            .with_tracked_inactivity(false);
        // Spans only (events stay the log's), and only the runtime's own: the spans listed
        // in the module docs, at debug level whatever `RUST_LOG` says.
        // The level hint keeps trace-level callsites off whatever this filter says.
        let filter = tracing_subscriber::filter::filter_fn(|m| {
            m.is_span() && *m.level() <= tracing::Level::DEBUG && m.target().starts_with("lrpc")
        })
        .with_max_level_hint(tracing::level_filters::LevelFilter::DEBUG);
        let layer: TraceLayer = Box::new(tracing_subscriber::Layer::with_filter(layer, filter));
        // A second install (an embedder's) keeps the first.
        let _ = lrpc_remote::trace::set_propagation(Box::new(Remote));
        ON.store(true, Ordering::Relaxed);
        Ok(Some((
            Telemetry {
                provider,
                runtime: Some(runtime),
            },
            layer,
        )))
    }

    /// Exports the spans still waiting, then stops (at most a few seconds).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        ON.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN) {
            tracing::warn!("exporting the last spans: {e}");
        }
        runtime.shutdown_timeout(Duration::from_millis(100));
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// How long the last export may take at exit.
const SHUTDOWN: Duration = Duration::from_secs(5);

/// The span exporter the settings ask for; gRPC's is built on the entered runtime.
fn exporter(
    s: &Settings,
    runtime: tokio::runtime::Handle,
) -> Result<opentelemetry_otlp::SpanExporter, TelemetryError> {
    use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _};
    let built = match s.protocol {
        TelemetryProtocol::HttpProtobuf => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_http_client(ExportClient::new(runtime));
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(format!("{}/v1/traces", e.trim_end_matches('/')));
            }
            b.build()
        }
        TelemetryProtocol::Grpc => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_protocol(opentelemetry_otlp::Protocol::Grpc);
            if let Some(e) = &s.endpoint {
                b = b.with_endpoint(e.clone());
            }
            b.build()
        }
    };
    built.map_err(|e| TelemetryError::Exporter(e.to_string()))
}

/// The OTLP/HTTP exporter's client: hyper, on the export's runtime (the batch processor
/// waits for it on a thread of its own). Plain HTTP only.
#[derive(Debug)]
struct ExportClient {
    runtime: tokio::runtime::Handle,
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
}

/// Longest an export request may take, and the most of a collector's answer read.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_ANSWER: usize = 1 << 20;

impl ExportClient {
    fn new(runtime: tokio::runtime::Handle) -> ExportClient {
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http();
        ExportClient { runtime, client }
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for ExportClient {
    async fn send_bytes(
        &self,
        request: http::Request<bytes::Bytes>,
    ) -> Result<http::Response<bytes::Bytes>, opentelemetry_http::HttpError> {
        use http_body_util::BodyExt as _;
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let (parts, body) = request.into_parts();
            let request = http::Request::from_parts(parts, http_body_util::Full::new(body));
            let exchange = async {
                let response = client.request(request).await?;
                let (parts, body) = response.into_parts();
                let body = http_body_util::Limited::new(body, MAX_ANSWER)
                    .collect()
                    .await?
                    .to_bytes();
                Ok::<_, opentelemetry_http::HttpError>(http::Response::from_parts(parts, body))
            };
            match tokio::time::timeout(EXPORT_TIMEOUT, exchange).await {
                Ok(r) => r,
                Err(_) => Err("the collector did not answer in time".into()),
            }
        });
        sent.await?
    }
}

/// The trace context of `span` as header values: `traceparent`, and `tracestate` (empty
/// when there is none). `None` when the span is not recorded (export off, or not sampled
/// and so not worth a header).
pub fn context_of(span: &tracing::Span) -> Option<(String, String)> {
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    let mut h = Headers::default();
    TraceContextPropagator::new().inject_context(&cx, &mut h);
    Some((h.traceparent?, h.tracestate.unwrap_or_default()))
}

/// Makes `span` the child of the trace context in `traceparent` and `tracestate` (header
/// values as they came; a malformed one is ignored and the span starts a trace).
pub fn adopt(span: &tracing::Span, traceparent: &[u8], tracestate: Option<&[u8]>) {
    let text = |b: &[u8]| std::str::from_utf8(b).ok().map(str::to_owned);
    let h = Headers {
        traceparent: text(traceparent),
        tracestate: tracestate.and_then(text),
    };
    let cx = TraceContextPropagator::new().extract(&h);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// A carrier of the two W3C headers.
#[derive(Default)]
struct Headers {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl Injector for Headers {
    fn set(&mut self, key: &str, value: String) {
        match key {
            TRACEPARENT => self.traceparent = Some(value),
            TRACESTATE => self.tracestate = Some(value),
            _ => {}
        }
    }
}

impl Extractor for Headers {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            TRACEPARENT => self.traceparent.as_deref(),
            TRACESTATE => self.tracestate.as_deref(),
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec![TRACEPARENT, TRACESTATE]
    }
}

/// The remote bindings' propagation (`lrpc_remote::trace`): the current span's context
/// goes with a call; a served call's span is the child of the one that came.
struct Remote;

impl lrpc_remote::trace::Propagation for Remote {
    fn current(&self) -> Option<lrpc_remote::trace::TraceContext> {
        let (traceparent, tracestate) = context_of(&tracing::Span::current())?;
        Some(lrpc_remote::trace::TraceContext {
            traceparent,
            tracestate,
        })
    }

    fn adopt(&self, span: &tracing::Span, incoming: &lrpc_remote::trace::TraceContext) {
        let state = (!incoming.tracestate.is_empty()).then_some(incoming.tracestate.as_bytes());
        adopt(span, incoming.traceparent.as_bytes(), state);
    }
}

/// Replaces the `traceparent` in `headers` with `span`'s, and keeps or adds `tracestate`:
/// the headers a request carries on from a span. Unchanged when the span has no context.
pub fn carry_on<N: AsRef<str>, V: AsRef<[u8]>>(
    headers: &[(N, V)],
    span: &tracing::Span,
) -> Option<Vec<(String, Vec<u8>)>> {
    let (parent, state) = context_of(span)?;
    let mut out: Vec<(String, Vec<u8>)> = headers
        .iter()
        .filter(|(n, _)| !n.as_ref().eq_ignore_ascii_case(TRACEPARENT))
        .filter(|(n, _)| state.is_empty() || !n.as_ref().eq_ignore_ascii_case(TRACESTATE))
        .map(|(n, v)| (n.as_ref().to_owned(), v.as_ref().to_vec()))
        .collect();
    out.push((TRACEPARENT.into(), parent.into_bytes()));
    if !state.is_empty() {
        out.push((TRACESTATE.into(), state.into_bytes()));
    }
    Some(out)
}

/// The first value of header `name` in `headers`.
pub fn header<'h, N: AsRef<str>, V: AsRef<[u8]>>(
    headers: &'h [(N, V)],
    name: &str,
) -> Option<&'h [u8]> {
    headers
        .iter()
        .find(|(n, _)| n.as_ref().eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned().filter(|v| !v.is_empty())
    }

    #[test]
    fn export_is_off_unless_an_endpoint_is_set() {
        assert_eq!(Settings::resolve(env(&[]), None).unwrap(), None);
        let spec = TelemetrySpec {
            endpoint: Some("http://collector:4318".into()),
            ..TelemetrySpec::default()
        };
        let s = Settings::resolve(env(&[]), Some(&spec)).unwrap().unwrap();
        assert_eq!(s.endpoint.as_deref(), Some("http://collector:4318"));
        assert_eq!(s.protocol, TelemetryProtocol::HttpProtobuf);
        assert_eq!(s.service_name, "lrpc");
        // The environment's endpoint wins (the exporter reads it), and can be turned off.
        let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318")]);
        let s = Settings::resolve(e, Some(&spec)).unwrap().unwrap();
        assert_eq!(s.endpoint, None);
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318"),
            ("OTEL_SDK_DISABLED", "true"),
        ]);
        assert_eq!(Settings::resolve(e, None).unwrap(), None);
        let e = env(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://other:4318/v1/traces",
            ),
            ("OTEL_TRACES_EXPORTER", "none"),
        ]);
        assert_eq!(Settings::resolve(e, None).unwrap(), None);
    }

    #[test]
    fn protocol_service_and_sampler_come_from_the_environment_first() {
        let spec = TelemetrySpec {
            endpoint: Some("http://collector:4317".into()),
            protocol: Some(TelemetryProtocol::Grpc),
            service_name: Some("edge".into()),
            sample_ratio: Some(0.25),
        };
        let s = Settings::resolve(env(&[]), Some(&spec)).unwrap().unwrap();
        assert_eq!(s.protocol, TelemetryProtocol::Grpc);
        assert_eq!(s.service_name, "edge");
        assert_eq!(s.ratio, Some(0.25));
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "front"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
        ]);
        let s = Settings::resolve(e, Some(&spec)).unwrap().unwrap();
        assert_eq!(s.protocol, TelemetryProtocol::HttpProtobuf);
        assert_eq!(s.service_name, "front");
        assert_eq!(s.ratio, None);
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ]);
        let err = Settings::resolve(e, None).unwrap_err().to_string();
        assert!(err.contains("http/json"), "{err}");
    }

    #[test]
    fn the_carried_headers_name_the_span_once() {
        // Without export a span has no context: the headers stay as they are.
        let headers = [("traceparent", b"00-x".as_slice()), ("host", b"h")];
        assert_eq!(carry_on(&headers, &tracing::Span::none()), None);
        assert_eq!(header(&headers, "Host"), Some(b"h".as_slice()));
        assert_eq!(header(&headers, "tracestate"), None);
    }
}
