//! Traces: the runtime's spans exported over OTLP (OpenTelemetry), and the W3C trace
//! context (`traceparent`, `tracestate`) carried in and out.
//!
//! **On or off.** Export is on when an endpoint is configured: the standard variables
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`, or `endpoint` in
//! the config's `[telemetry]` table. `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`
//! turn it off whatever else is set. When it is off no span is made for export, no context
//! is read or written, and the call path pays one relaxed load ([`on`]).
//!
//! **Settings.** The environment wins over the config, as in other OpenTelemetry software.
//! These variables are read: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the whole URL) or
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (a base URL: HTTP adds `/v1/traces`), plain `http://` only;
//! `OTEL_EXPORTER_OTLP_PROTOCOL` (or `..._TRACES_PROTOCOL`): `http/protobuf` (the default)
//! or `grpc`; `OTEL_SERVICE_NAME` (default `lrpc`) and `OTEL_RESOURCE_ATTRIBUTES`;
//! `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG` (`always_on`, `always_off`,
//! `traceidratio`, `parentbased_always_on` (the default), `parentbased_always_off`,
//! `parentbased_traceidratio`); `OTEL_EXPORTER_OTLP_HEADERS` and `..._TIMEOUT` (each also
//! as `..._TRACES_...`); `OTEL_BSP_SCHEDULE_DELAY`, `OTEL_BSP_MAX_QUEUE_SIZE` and
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (defaults 5000 ms, 2048, 512; the queue's size bounds
//! the spans waiting from each thread).
//!
//! **Spans** are `tracing` spans at debug level, which the export's layer takes whatever
//! `RUST_LOG` says (the log's own layer keeps its filter): the edge's `request` (route,
//! status), its `chain`, each plugin's `call` (made by the kernel: domain, procedure,
//! deadline, status), the `handler`, each `outgoing` request of a handler, and the remote
//! `remote call` and `remote serve` (`lrpc_remote::trace`). Their fields are the exported
//! spans' attributes; `otel.kind` names a span's kind instead.
//!
//! **The pipeline** is the runtime's own, made to cost little per span (`spans`): a layer
//! keeps a compact record per span in the span's extensions (ids, times, the sampling
//! decision, the fields already encoded as OTLP attributes), a closing sampled span is
//! encoded onto its thread's shelf (bounded: `OTEL_BSP_MAX_QUEUE_SIZE` spans a thread; a
//! span closing on a full shelf is dropped and counted), and a thread of its own (`export`)
//! takes every shelf's spans each `OTEL_BSP_SCHEDULE_DELAY` or when a shelf holds a batch,
//! wraps them in `ExportTraceServiceRequest`s, encoded by hand (`otlp`), and sends them
//! over HTTP/protobuf or gRPC. It replaced the `tracing-opentelemetry` bridge and the SDK's
//! batch processor, with which the edge kept 0.40 of its throughput with every trace
//! exported (`edge_chain3_traced_over_untraced_rps`); this kept about 0.75 on the same
//! 2-processor machine. The export's layer ([`TraceLayer`]) has no per-layer filter, so
//! that the registry does not look every span entered, left, recorded or closed up for it
//! (nor, in `lrpc serve`, for the log's layer on enter, exit and close). What is left per
//! span is `tracing-subscriber`'s registry (a slot, its parent's reference, the extensions'
//! lock), the record's fields encoded, its clock reads, and its bytes written onto the
//! thread's shelf.
//!
//! **Propagation.** A request's `traceparent` makes its span a child of the caller's; the
//! request the plugins see carries the request span's own `traceparent` (and the
//! `tracestate` that came), a handler's the handler span's, and a handler's outgoing
//! requests their own span's. Remote calls carry the context to the kernel serving them.
//! The context of an unsampled span goes on too, with its sampled flag clear, so that the
//! next hop follows the decision.

mod context;
mod export;
mod otlp;
mod sampler;
mod spans;

use crate::config::{TelemetryProtocol, TelemetrySpec};
use sampler::{Rule, Sampler};
use spans::{Queue, Record, SpanContext, Spans};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tracing::level_filters::LevelFilter;
use tracing::subscriber::Interest;
use tracing_subscriber::registry::LookupSpan as _;

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
    exporter: export::Exporter,
}

/// The export's `tracing` layer, for a subscriber built on the registry: put it over the
/// other layers (`registry().with(log).with(trace)`), and tell it what they take
/// ([`TraceLayer::over`]).
///
/// It is a layer without a per-layer filter (`Layer::with_filter`): it decides which spans
/// it takes by their callsite (the runtime's own, at debug level or above), so that the
/// registry does not ask it about every span entered, left, recorded or closed. For the
/// callsites it does not take, it says what the layers under it said, when it knows; else
/// that it may want them (`Interest::always`), which is right whatever they are, but makes
/// events disabled by a per-layer filter under it cost a check each time.
pub struct TraceLayer {
    spans: Spans,
    below: Option<Below>,
}

/// What the layers under the export's take.
struct Below {
    interest: Box<dyn Fn(&'static tracing::Metadata<'static>) -> Interest + Send + Sync>,
    hint: Option<LevelFilter>,
}

impl TraceLayer {
    /// The layer over layers that take what `filter` enables (the log's filter: a filter
    /// made from the same directives as theirs, which this one keeps).
    pub fn over(mut self, filter: tracing_subscriber::EnvFilter) -> TraceLayer {
        let hint = filter.max_level_hint();
        self.below = Some(Below {
            interest: Box::new(move |m| {
                tracing_subscriber::layer::Filter::<tracing_subscriber::Registry>::callsite_enabled(
                    &filter, m,
                )
            }),
            hint,
        });
        self
    }
}

impl<S> tracing_subscriber::Layer<S> for TraceLayer
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn register_callsite(&self, m: &'static tracing::Metadata<'static>) -> Interest {
        if spans::takes(m) {
            return Interest::always();
        }
        match &self.below {
            Some(below) => (below.interest)(m),
            None => Interest::always(),
        }
    }

    /// The log's most verbose level, and debug for the spans taken here; no hint when the
    /// layers under it are not known.
    fn max_level_hint(&self) -> Option<LevelFilter> {
        let hint = self.below.as_ref()?.hint?;
        Some(hint.max(LevelFilter::DEBUG))
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.spans.on_new_span(attrs, id, ctx);
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.spans.on_record(id, values, ctx);
    }

    fn on_close(&self, id: tracing::span::Id, ctx: tracing_subscriber::layer::Context<'_, S>) {
        self.spans.on_close(id, ctx);
    }
}

/// The settings that turn export on, resolved from the environment and the config.
#[derive(Debug, Clone, PartialEq)]
struct Settings {
    /// Where spans go: the whole URL over HTTP (`.../v1/traces`); over gRPC the
    /// collector's, whose origin is called.
    url: String,
    protocol: TelemetryProtocol,
    service_name: String,
    sampler: Sampler,
    batch: Batch,
    /// Headers sent with every export.
    headers: Vec<(String, String)>,
    /// Longest an export may take.
    timeout: Duration,
    /// The resource's attributes: `service.name` first, then `OTEL_RESOURCE_ATTRIBUTES`.
    resource: Vec<(String, String)>,
    /// Values not understood (and what is done instead), logged when export runs.
    notes: Vec<String>,
}

/// How spans are batched (the `OTEL_BSP_*` variables).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Batch {
    /// Longest a finished span waits for export (when no batch fills first).
    delay: Duration,
    /// The most spans waiting; more are dropped.
    max_queue: usize,
    /// The most spans in one export request.
    max_export: usize,
}

impl Default for Batch {
    /// OpenTelemetry's defaults.
    fn default() -> Batch {
        Batch {
            delay: Duration::from_millis(5000),
            max_queue: 2048,
            max_export: 512,
        }
    }
}

/// Longest an export may take unless `OTEL_EXPORTER_OTLP_TIMEOUT` says (OpenTelemetry's
/// default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

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
        let whole = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        let base =
            env("OTEL_EXPORTER_OTLP_ENDPOINT").or_else(|| spec.and_then(|s| s.endpoint.clone()));
        if whole.is_none() && base.is_none() {
            return Ok(None);
        }
        let protocol = match env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            Some(p) => p.trim().parse().map_err(TelemetryError::Setting)?,
            None => spec.and_then(|s| s.protocol).unwrap_or_default(),
        };
        let url = match (whole, base) {
            (Some(w), _) => w.trim().to_owned(),
            (None, Some(b)) => match protocol {
                TelemetryProtocol::HttpProtobuf => {
                    format!("{}/v1/traces", b.trim().trim_end_matches('/'))
                }
                TelemetryProtocol::Grpc => b.trim().to_owned(),
            },
            (None, None) => unreachable!("checked above"),
        };
        check_url(&url)?;
        let mut notes = Vec::new();
        let service_name = env("OTEL_SERVICE_NAME")
            .or_else(|| spec.and_then(|s| s.service_name.clone()))
            .unwrap_or_else(|| "lrpc".into());
        let sampler = match env("OTEL_TRACES_SAMPLER") {
            Some(name) => {
                let arg = env("OTEL_TRACES_SAMPLER_ARG");
                let (s, note) = Sampler::from_env(&name, arg.as_deref());
                notes.extend(note);
                s
            }
            None => match spec.and_then(|s| s.sample_ratio) {
                Some(r) => Sampler::parent_based(Rule::Ratio(r)),
                None => Sampler::default(),
            },
        };
        let batch = batch(&env, &mut notes);
        let mut headers = Vec::new();
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        ] {
            for (k, v) in pairs(name, env(name).as_deref(), &mut notes) {
                if hyper::header::HeaderName::from_bytes(k.as_bytes()).is_err()
                    || hyper::header::HeaderValue::from_str(&v).is_err()
                {
                    notes.push(format!(
                        "{name}: `{k}` is not a header this exporter can send"
                    ));
                    continue;
                }
                headers.retain(|(h, _): &(String, String)| !h.eq_ignore_ascii_case(&k));
                headers.push((k, v));
            }
        }
        let timeout = [
            "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ]
        .into_iter()
        .find_map(|name| Some((name, env(name)?)))
        .map_or(EXPORT_TIMEOUT, |(name, v)| {
            millis(name, &v, &mut notes).unwrap_or(EXPORT_TIMEOUT)
        });
        let mut resource = vec![("service.name".to_owned(), service_name.clone())];
        let attributes = env("OTEL_RESOURCE_ATTRIBUTES");
        for (k, v) in pairs(
            "OTEL_RESOURCE_ATTRIBUTES",
            attributes.as_deref(),
            &mut notes,
        ) {
            if k != "service.name" {
                resource.retain(|(r, _)| *r != k);
                resource.push((k, v));
            }
        }
        Ok(Some(Settings {
            url,
            protocol,
            service_name,
            sampler,
            batch,
            headers,
            timeout,
            resource,
            notes,
        }))
    }
}

/// Checks that `url` is one the exporter can send to: plain `http://`, with a host.
fn check_url(url: &str) -> Result<(), TelemetryError> {
    let bad = |why: &str| TelemetryError::Setting(format!("the OTLP endpoint `{url}`: {why}"));
    let uri: hyper::Uri = url.parse().map_err(|_| bad("not a URL"))?;
    if uri.scheme_str() != Some("http") {
        return Err(bad(
            "the exporter speaks plain `http://` only (put a local collector in front of one that needs TLS)",
        ));
    }
    if uri.authority().is_none() {
        return Err(bad("no host"));
    }
    Ok(())
}

/// The `OTEL_BSP_*` settings: OpenTelemetry's defaults where a variable is unset or not a
/// number; the batch at most the queue, both at least one span, the delay at least 1 ms.
fn batch(env: &impl Fn(&str) -> Option<String>, notes: &mut Vec<String>) -> Batch {
    let mut b = Batch::default();
    let mut count = |name: &str, default: usize| match env(name) {
        None => default,
        Some(v) => match v.trim().parse::<usize>() {
            Ok(n) => n.max(1),
            Err(_) => {
                notes.push(format!("{name} `{v}` is not a number: using {default}"));
                default
            }
        },
    };
    b.max_queue = count("OTEL_BSP_MAX_QUEUE_SIZE", b.max_queue);
    b.max_export = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", b.max_export).min(b.max_queue);
    if let Some(v) = env("OTEL_BSP_SCHEDULE_DELAY")
        && let Some(d) = millis("OTEL_BSP_SCHEDULE_DELAY", &v, notes)
    {
        b.delay = d.max(Duration::from_millis(1));
    }
    b
}

/// A number of milliseconds, or a note about `name` when `v` is none.
fn millis(name: &str, v: &str, notes: &mut Vec<String>) -> Option<Duration> {
    match v.trim().parse::<u64>() {
        Ok(ms) => Some(Duration::from_millis(ms)),
        Err(_) => {
            notes.push(format!(
                "{name} `{v}` is not a number of milliseconds: ignored"
            ));
            None
        }
    }
}

/// The `key=value` pairs of a list like `OTEL_EXPORTER_OTLP_HEADERS` (`name`: `value`),
/// comma separated, values percent-decoded; malformed entries are skipped with a note.
fn pairs(name: &str, value: Option<&str>, notes: &mut Vec<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in value
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
    {
        let parsed = entry
            .split_once('=')
            .map(|(k, v)| (k.trim(), v.trim()))
            .filter(|(k, _)| !k.is_empty())
            .and_then(|(k, v)| Some((k.to_owned(), percent_decoded(v)?)));
        match parsed {
            Some(p) => out.push(p),
            None => notes.push(format!("{name}: `{entry}` is not `key=value`: skipped")),
        }
    }
    out
}

/// `v` with its `%XX` escapes decoded; `None` when one is malformed or the result is not
/// UTF-8.
fn percent_decoded(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
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
        let queue = Arc::new(Queue::new(
            settings.batch.max_queue,
            settings.batch.max_export,
        ));
        let exporter = export::Exporter::start(&settings, queue.clone())?;
        // Spans only (events stay the log's), and only the runtime's own: the spans listed
        // in the module docs, at debug level whatever `RUST_LOG` says (`spans::takes`).
        let layer = TraceLayer {
            spans: Spans::new(queue, settings.sampler),
            below: None,
        };
        // A second install (an embedder's) keeps the first.
        let _ = lrpc_remote::trace::set_propagation(Box::new(Remote));
        ON.store(true, Ordering::Relaxed);
        Ok(Some((Telemetry { exporter }, layer)))
    }

    /// Exports the spans still waiting, then stops (at most a few seconds).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        ON.store(false, Ordering::Relaxed);
        self.exporter.stop();
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The context of `span`, or of its nearest ancestor the export took; `None` when there
/// is none (export off, or no such span).
fn context_at(span: &tracing::Span) -> Option<SpanContext> {
    span.with_subscriber(|(id, dispatch)| {
        let registry = dispatch.downcast_ref::<tracing_subscriber::Registry>()?;
        let at = registry.span(id)?;
        for s in at.scope() {
            let ext = s.extensions();
            if let Some(r) = ext.get::<Record>() {
                return Some(r.context());
            }
        }
        None
    })
    .flatten()
}

/// The trace context of `span` as header values: `traceparent`, and `tracestate` (empty
/// when there is none). `None` when the span has no context (export off, or a span the
/// export does not take, with no ancestor it does). An unsampled span's `traceparent`
/// says so (flags `00`).
pub fn context_of(span: &tracing::Span) -> Option<(String, String)> {
    let cx = context_at(span)?;
    let parent = context::traceparent(cx.trace, cx.id, cx.sampled);
    Some((parent, cx.state.as_deref().unwrap_or_default().to_owned()))
}

/// Makes `span` the child of the trace context in `traceparent` and `tracestate` (header
/// values as they came; a malformed one is ignored and the span starts a trace). Meant for
/// a span just made, before it is entered or has children.
pub fn adopt(span: &tracing::Span, traceparent: &[u8], tracestate: Option<&[u8]>) {
    let Some(remote) = context::parse_traceparent(traceparent) else {
        return;
    };
    let state = tracestate.and_then(context::tracestate);
    span.with_subscriber(|(id, dispatch)| {
        let Some(registry) = dispatch.downcast_ref::<tracing_subscriber::Registry>() else {
            return;
        };
        let Some(s) = registry.span(id) else {
            return;
        };
        let mut ext = s.extensions_mut();
        if let Some(r) = ext.get_mut::<Record>() {
            r.adopt(remote, state);
        }
    });
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
    Some(
        with_context(headers, &parent, &state)
            .into_iter()
            .map(|(n, v)| (n.to_owned(), v.to_vec()))
            .collect(),
    )
}

/// `headers` with `traceparent` in place of theirs, and `tracestate` too unless it is
/// empty (then theirs stays): [`carry_on`] without copying the headers, for a request
/// encoded at once.
pub fn with_context<'h, N: AsRef<str>, V: AsRef<[u8]>>(
    headers: &'h [(N, V)],
    traceparent: &'h str,
    tracestate: &'h str,
) -> Vec<(&'h str, &'h [u8])> {
    let mut out = Vec::with_capacity(headers.len() + 2);
    out.extend(
        headers
            .iter()
            .filter(|(n, _)| !n.as_ref().eq_ignore_ascii_case(TRACEPARENT))
            .filter(|(n, _)| tracestate.is_empty() || !n.as_ref().eq_ignore_ascii_case(TRACESTATE))
            .map(|(n, v)| (n.as_ref(), v.as_ref())),
    );
    out.push((TRACEPARENT, traceparent.as_bytes()));
    if !tracestate.is_empty() {
        out.push((TRACESTATE, tracestate.as_bytes()));
    }
    out
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
        assert_eq!(s.url, "http://collector:4318/v1/traces");
        assert_eq!(s.protocol, TelemetryProtocol::HttpProtobuf);
        assert_eq!(s.service_name, "lrpc");
        assert_eq!(s.sampler, Sampler::default());
        assert_eq!(s.batch, Batch::default());
        assert_eq!(s.timeout, EXPORT_TIMEOUT);
        // The environment's endpoint wins, and can be turned off.
        let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318/")]);
        let s = Settings::resolve(e, Some(&spec)).unwrap().unwrap();
        assert_eq!(s.url, "http://other:4318/v1/traces");
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://other:4318"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://third:4318/traces",
            ),
        ]);
        let s = Settings::resolve(e, Some(&spec)).unwrap().unwrap();
        assert_eq!(
            s.url, "http://third:4318/traces",
            "the signal's URL is taken whole"
        );
        // Plain HTTP only: the exporter has no TLS.
        let e = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "https://other:4318")]);
        let err = Settings::resolve(e, None).unwrap_err().to_string();
        assert!(err.contains("http://"), "{err}");
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
        assert_eq!(s.url, "http://collector:4317");
        assert_eq!(s.service_name, "edge");
        assert_eq!(s.sampler, Sampler::parent_based(Rule::Ratio(0.25)));
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_SERVICE_NAME", "front"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
        ]);
        let s = Settings::resolve(e, Some(&spec)).unwrap().unwrap();
        assert_eq!(s.protocol, TelemetryProtocol::HttpProtobuf);
        assert_eq!(s.service_name, "front");
        assert_eq!(s.resource[0], ("service.name".into(), "front".into()));
        assert_eq!(s.sampler.rule, Rule::On);
        assert!(!s.sampler.parent_based);
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

    #[test]
    fn batching_headers_timeout_and_resource_come_from_the_environment() {
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "1000"),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "5000"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api-key=secret%20one, x-team = edge,broken",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "API-Key=two"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            (
                "OTEL_RESOURCE_ATTRIBUTES",
                "service.name=no,deployment.environment=prod%2Ceu",
            ),
            ("OTEL_SERVICE_NAME", "edge"),
        ]);
        let s = Settings::resolve(e, None).unwrap().unwrap();
        assert_eq!(
            s.batch,
            Batch {
                delay: Duration::from_millis(100),
                max_queue: 1000,
                // At most the queue, as OpenTelemetry's SDK has it.
                max_export: 1000,
            }
        );
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(s.headers, pairs(&[("x-team", "edge"), ("API-Key", "two")]));
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(
            s.resource,
            pairs(&[
                ("service.name", "edge"),
                ("deployment.environment", "prod,eu")
            ])
        );
        assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
        assert!(s.notes[0].contains("broken"), "{:?}", s.notes);
        // What is not understood is noted and left at its default.
        let e = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_BSP_SCHEDULE_DELAY", "soon"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "-1"),
            ("OTEL_TRACES_SAMPLER", "xray"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1s"),
        ]);
        let s = Settings::resolve(e, None).unwrap().unwrap();
        assert_eq!(s.batch, Batch::default());
        assert_eq!(s.timeout, EXPORT_TIMEOUT);
        assert_eq!(s.sampler, Sampler::default());
        assert_eq!(s.notes.len(), 4, "{:?}", s.notes);
        assert_eq!(percent_decoded("a%2"), None);
        assert_eq!(percent_decoded("%e2%82%ac"), Some("\u{20ac}".into()));
    }

    #[test]
    fn the_export_takes_its_spans_and_the_log_keeps_its_own_filter() {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        /// What the log's layer is shown.
        #[derive(Clone, Default)]
        struct Seen(Arc<std::sync::Mutex<Vec<String>>>);
        impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Seen {
            fn on_new_span(
                &self,
                attrs: &tracing::span::Attributes<'_>,
                _: &tracing::span::Id,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                let name = attrs.metadata().name();
                self.0.lock().unwrap().push(format!("span {name}"));
            }
            fn on_event(
                &self,
                event: &tracing::Event<'_>,
                _: tracing_subscriber::layer::Context<'_, S>,
            ) {
                let level = event.metadata().level();
                self.0.lock().unwrap().push(format!("event {level}"));
            }
        }
        let seen = Seen::default();
        let queue = Arc::new(Queue::new(100, 100));
        let log = tracing_subscriber::EnvFilter::new("info");
        let trace = TraceLayer {
            spans: Spans::new(queue.clone(), Sampler::default()),
            below: None,
        }
        .over(tracing_subscriber::EnvFilter::new("info"));
        let subscriber = tracing_subscriber::registry()
            .with(seen.clone().with_filter(log))
            .with(trace);
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::debug_span!("request");
            span.in_scope(|| {
                tracing::info!("kept");
                tracing::debug!("not logged");
                drop(tracing::trace_span!("too fine"));
            });
        });
        // The log saw its event only; the export took the debug span only.
        assert_eq!(*seen.0.lock().unwrap(), ["event INFO"]);
        let mut taken = Vec::new();
        queue.take(&mut taken, std::time::Instant::now());
        assert_eq!(taken.iter().map(|e| e.count).sum::<usize>(), 1);
    }

    #[test]
    fn a_span_s_context_goes_out_and_a_caller_s_comes_in() {
        use tracing_subscriber::layer::SubscriberExt as _;
        let queue = Arc::new(Queue::new(100, 100));
        let subscriber =
            tracing_subscriber::registry().with(Spans::new(queue.clone(), Sampler::default()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::debug_span!("request");
            adopt(
                &span,
                b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
                Some(b"congo=t61rcWkgMzE"),
            );
            let (parent, state) = context_of(&span).expect("a context");
            assert!(
                parent.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
                "{parent}"
            );
            assert!(parent.ends_with("-01"), "{parent}");
            assert_ne!(&parent[36..52], "00f067aa0ba902b7", "the span's own id");
            assert_eq!(state, "congo=t61rcWkgMzE");
            // The child carries the trace and its state on, with its own id.
            let child = span.in_scope(|| {
                let child = tracing::debug_span!("handler");
                let (c, s) = context_of(&child).unwrap();
                assert_eq!(&c[..36], &parent[..36]);
                assert_ne!(c, parent);
                assert_eq!(s, state);
                // The current span is the remote calls' context.
                child.in_scope(|| {
                    use lrpc_remote::trace::Propagation as _;
                    assert_eq!(Remote.current().unwrap().traceparent, c);
                });
                c
            });
            let headers = [("traceparent", b"00-x".as_slice()), ("host", b"h")];
            let carried = carry_on(&headers, &span).unwrap();
            assert_eq!(
                carried,
                [
                    ("host".to_string(), b"h".to_vec()),
                    ("traceparent".into(), parent.clone().into_bytes()),
                    ("tracestate".into(), b"congo=t61rcWkgMzE".to_vec()),
                ]
            );
            // Malformed: ignored, the span keeps the trace it had.
            let fresh = tracing::debug_span!("request");
            let before = context_of(&fresh).unwrap();
            adopt(&fresh, b"00-zz", Some(b"a=b"));
            assert_eq!(context_of(&fresh).unwrap(), before);
            drop(child);
        });
    }
}
