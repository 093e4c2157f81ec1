//! The exporter: a thread of its own that takes the finished spans from the queue every
//! `OTEL_BSP_SCHEDULE_DELAY`, or sooner when a batch is waiting, encodes them
//! (`otlp::request`) and sends them to the collector, one request per batch of at most
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` spans. It waits for each answer before the next (spans
//! closing meanwhile wait in the queue), on a small runtime of its own, so that an export
//! never waits for, or holds, the server's.
//!
//! **HTTP/protobuf**: `POST` of the request to the URL, `content-type:
//! application/x-protobuf`, a 2xx answer is success. **gRPC**: the unary call
//! `TraceService/Export` over HTTP/2 without TLS (prior knowledge), the request in gRPC's
//! framing, success when `grpc-status` is 0. Both carry `OTEL_EXPORTER_OTLP_HEADERS` and
//! give up after `OTEL_EXPORTER_OTLP_TIMEOUT`.
//!
//! A failed export, and spans dropped for a full queue, are logged as warnings, at most one
//! of each a minute (with what happened since the last one).

use super::otlp;
use super::spans::{Encoded, Queue};
use super::{Settings, TelemetryError};
use http_body_util::BodyExt as _;
use hyper::body::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the last export may take at exit.
pub(crate) const SHUTDOWN: Duration = Duration::from_secs(5);

/// The most of a collector's answer read.
const MAX_ANSWER: usize = 1 << 20;

/// The gRPC method spans are exported with.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

/// The running exporter thread.
pub(crate) struct Exporter {
    queue: Arc<Queue>,
    /// Says the thread has sent its last batch.
    done: mpsc::Receiver<()>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Exporter {
    /// Starts the thread that exports what `queue` collects, as `settings` say.
    pub fn start(settings: &Settings, queue: Arc<Queue>) -> Result<Exporter, TelemetryError> {
        let sender = Sender::new(settings)?;
        let resource = otlp::resource(&settings.resource);
        let delay = settings.batch.delay;
        let notes = settings.notes.clone();
        let (tell, done) = mpsc::channel();
        let thread = {
            let queue = queue.clone();
            std::thread::Builder::new()
                .name("otlp-export".into())
                .spawn(move || {
                    run(&queue, &sender, &resource, delay, notes);
                    let _ = tell.send(());
                })
                .map_err(|e| TelemetryError::Exporter(format!("starting its thread: {e}")))?
        };
        Ok(Exporter {
            queue,
            done,
            thread: Some(thread),
        })
    }

    /// Sends what waits and stops the thread, waiting for it at most [`SHUTDOWN`] and a
    /// little more (a thread still stuck then is left to end with the process).
    pub fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.queue.stop();
        if self
            .done
            .recv_timeout(SHUTDOWN + Duration::from_millis(500))
            .is_ok()
        {
            let _ = thread.join();
        } else {
            tracing::warn!("the last spans were not exported within {SHUTDOWN:?}");
        }
    }
}

/// The exporter thread's loop, until the queue says stop (after one last export).
fn run(queue: &Queue, sender: &Sender, resource: &[u8], delay: Duration, notes: Vec<String>) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!("no span is exported: starting the exporter's runtime: {e}");
            return;
        }
    };
    // Noted when the settings were read, logged once the log is surely set up.
    let mut notes = Some(notes);
    let mut taken: Vec<Encoded> = Vec::new();
    // The request's buffer, kept from one export to the next (a large buffer is mapped
    // afresh, page by page, each time it is allocated).
    let mut message = Vec::new();
    let mut warnings = Warnings::default();
    loop {
        let stopping = queue.take(&mut taken, Instant::now() + delay);
        for n in notes.take().into_iter().flatten() {
            tracing::warn!("{n}");
        }
        let deadline = stopping.then(|| Instant::now() + SHUTDOWN);
        let mut spans = taken.iter().flat_map(|e| otlp::spans(&e.bytes)).peekable();
        while spans.peek().is_some() {
            let batch: Vec<&[u8]> = spans.by_ref().take(queue.batch()).collect();
            otlp::request(&mut message, resource, batch.iter().copied());
            let timeout = deadline.map_or(sender.timeout, |d| {
                sender
                    .timeout
                    .min(d.saturating_duration_since(Instant::now()))
            });
            let body = Bytes::from(std::mem::take(&mut message));
            if let Err(e) = runtime.block_on(sender.send(body.clone(), timeout)) {
                warnings.failed(batch.len(), e);
            }
            // The buffer back, unless the client still holds the body.
            message = Vec::from(body);
        }
        drop(spans);
        for e in taken.drain(..) {
            queue.recycle(e.bytes);
        }
        warnings.dropped(queue.take_dropped(), queue.max());
        if stopping {
            warnings.report();
            return;
        }
    }
}

/// Sends encoded requests to the collector.
struct Sender {
    client: hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<Bytes>,
    >,
    uri: hyper::Uri,
    grpc: bool,
    /// `OTEL_EXPORTER_OTLP_HEADERS` and the content type.
    headers: HeaderMap,
    timeout: Duration,
}

impl Sender {
    fn new(s: &Settings) -> Result<Sender, TelemetryError> {
        use super::TelemetryProtocol;
        let bad =
            |e: String| TelemetryError::Setting(format!("the OTLP endpoint `{}`: {e}", s.url));
        let url: hyper::Uri = s.url.parse().map_err(|e| bad(format!("{e}")))?;
        let grpc = s.protocol == TelemetryProtocol::Grpc;
        let uri = if grpc {
            // gRPC calls a method at the collector's origin, whatever path the URL has.
            let mut parts = url.into_parts();
            parts.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static(GRPC_EXPORT));
            hyper::Uri::from_parts(parts).map_err(|e| bad(format!("{e}")))?
        } else {
            url
        };
        let mut headers = HeaderMap::new();
        for (k, v) in &s.headers {
            // Checked when the settings were read.
            if let (Ok(k), Ok(v)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                headers.insert(k, v);
            }
        }
        let content_type = if grpc {
            headers.insert("te", HeaderValue::from_static("trailers"));
            "application/grpc"
        } else {
            "application/x-protobuf"
        };
        headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .http2_only(grpc)
                .build_http();
        Ok(Sender {
            client,
            uri,
            grpc,
            headers,
            timeout: s.timeout,
        })
    }

    /// Sends one encoded `ExportTraceServiceRequest`, waiting at most `timeout`.
    async fn send(&self, message: Bytes, timeout: Duration) -> Result<(), String> {
        let body = if self.grpc {
            Bytes::from(grpc_frame(&message)?)
        } else {
            message
        };
        let mut request = hyper::Request::post(self.uri.clone())
            .body(http_body_util::Full::new(body))
            .map_err(|e| e.to_string())?;
        *request.headers_mut() = self.headers.clone();
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            let answer = http_body_util::Limited::new(body, MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("reading the collector's answer: {e}"))?;
            if !parts.status.is_success() {
                return Err(format!("the collector answered {}", parts.status));
            }
            if self.grpc {
                let trailers = answer.trailers();
                let field = |name: &str| {
                    parts
                        .headers
                        .get(name)
                        .or_else(|| trailers.and_then(|t| t.get(name)))
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                };
                match field("grpc-status").as_deref() {
                    Some("0") => {}
                    Some(code) => {
                        let message = field("grpc-message").unwrap_or_default();
                        return Err(format!(
                            "the collector answered gRPC status {code} {message}"
                        ));
                    }
                    None => return Err("the collector's answer has no gRPC status".into()),
                }
            }
            Ok(())
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(format!("the collector did not answer within {timeout:?}")),
        }
    }
}

/// `message` as gRPC frames it: not compressed (0), its length (4 bytes, big endian), it.
fn grpc_frame(message: &[u8]) -> Result<Vec<u8>, String> {
    let len = u32::try_from(message.len()).map_err(|_| "a batch over 4 GiB".to_string())?;
    let mut framed = Vec::with_capacity(message.len() + 5);
    framed.push(0);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(message);
    Ok(framed)
}

/// How often the same kind of trouble is logged.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Failed exports and dropped spans since the last warning.
#[derive(Default)]
struct Warnings {
    last: Option<Instant>,
    failed: u64,
    lost: u64,
    error: Option<String>,
    dropped: u64,
    max: usize,
}

impl Warnings {
    /// An export of `spans` spans failed with `error`.
    fn failed(&mut self, spans: usize, error: String) {
        self.failed += 1;
        self.lost += spans as u64;
        self.error = Some(error);
        self.maybe_report();
    }

    /// `n` spans were dropped for a queue full at `max`.
    fn dropped(&mut self, n: u64, max: usize) {
        self.dropped += n;
        self.max = max;
        self.maybe_report();
    }

    /// Reports if there is something to say and the last warning is a minute old.
    fn maybe_report(&mut self) {
        if self.last.is_some_and(|t| t.elapsed() < WARN_EVERY) {
            return;
        }
        self.report();
    }

    /// Logs what happened since the last warning.
    fn report(&mut self) {
        if let Some(e) = self.error.take() {
            tracing::warn!(
                "exporting spans failed: {e} ({} exports, {} spans lost since the last warning)",
                self.failed,
                self.lost
            );
            self.last = Some(Instant::now());
        }
        if self.dropped > 0 {
            tracing::warn!(
                "{} spans dropped: a thread had OTEL_BSP_MAX_QUEUE_SIZE ({}) waiting for export",
                self.dropped,
                self.max
            );
            self.last = Some(Instant::now());
        }
        self.failed = 0;
        self.lost = 0;
        self.dropped = 0;
    }
}
