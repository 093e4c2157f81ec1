//! The export's `tracing` layer: a compact record per span, and the bounded shelves the
//! finished ones wait on for the exporter.
//!
//! A new span gets its ids, its start time (one clock read) and the sampling decision at
//! once, and its fields are encoded as OTLP attributes as they are recorded
//! ([`otlp::attribute`]: the key is the field's static name; numbers and booleans are
//! written as they are, text is copied once, into a buffer the thread reuses). The record
//! lives in the span's extensions (one allocation, the registry's) until the span closes;
//! a sampled one is then encoded as an OTLP `Span` onto its thread's shelf, an unsampled
//! one is dropped. Nothing is sent per span, nothing is shared between threads per span
//! (each thread has its shelf, whose lock only the exporter takes besides), and what a
//! thread allocates it frees: the exporter takes each shelf's bytes at once
//! ([`Queue::take`]).

use super::otlp::{self, Value};
use super::sampler::Sampler;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// OTLP's span kinds (`Span.SpanKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
    Producer = 4,
    Consumer = 5,
}

impl Kind {
    /// The kind a span's `otel.kind` field names (`server`, `client`, ...); internal for
    /// any other value.
    fn named(v: &str) -> Kind {
        let v = v.trim();
        [
            ("server", Kind::Server),
            ("client", Kind::Client),
            ("producer", Kind::Producer),
            ("consumer", Kind::Consumer),
        ]
        .into_iter()
        .find_map(|(name, kind)| v.eq_ignore_ascii_case(name).then_some(kind))
        .unwrap_or(Kind::Internal)
    }
}

/// The field that names a span's kind rather than an attribute of it (as
/// `tracing-opentelemetry` reads it).
const KIND_FIELD: &str = "otel.kind";

/// One span: what the export sends of it.
#[derive(Debug)]
pub(crate) struct Record {
    /// The trace, never 0.
    pub trace: u128,
    /// The span, never 0.
    pub id: u64,
    /// The parent span, 0 for a root.
    pub parent: u64,
    /// Whether the parent is another process's (adopted from a `traceparent`).
    pub remote_parent: bool,
    /// Whether the trace is sampled: the span is exported, and its context says so.
    pub sampled: bool,
    /// Whether fields are recorded: when sampled, and for a root, whose decision may still
    /// change when it adopts a remote parent.
    recording: bool,
    pub kind: Kind,
    /// The span's name (its callsite's, static).
    pub name: &'static str,
    /// Start and end, in nanoseconds since the Unix epoch.
    pub start: u64,
    pub end: u64,
    /// The `tracestate` that came with the trace, shared with the span's descendants.
    pub state: Option<Arc<str>>,
    /// The recorded fields, encoded as the `attributes` of an OTLP `Span`.
    pub attributes: Vec<u8>,
    /// The sampler that decided, to decide again when the span adopts a remote parent.
    sampler: Sampler,
}

/// Room for a typical span's fields, so that recording them seldom grows the buffer.
const ATTRIBUTES: usize = 160;

/// The most attribute buffers a thread keeps for its next spans.
const SPARE_BUFFERS: usize = 64;

thread_local! {
    /// Attribute buffers of the thread's closed spans, for its next ones.
    static SPARE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty attribute buffer: a closed span's, or a new one.
fn spare_buffer() -> Vec<u8> {
    SPARE
        .try_with(|s| s.try_borrow_mut().ok()?.pop())
        .ok()
        .flatten()
        .unwrap_or_else(|| Vec::with_capacity(ATTRIBUTES))
}

/// Keeps `buf` for a next span of this thread (unless the thread keeps enough).
fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() == 0 || buf.capacity() > 4 * ATTRIBUTES {
        return;
    }
    buf.clear();
    let _ = SPARE.try_with(|s| {
        if let Ok(mut s) = s.try_borrow_mut()
            && s.len() < SPARE_BUFFERS
        {
            s.push(buf);
        }
    });
}

/// What a span passes on to its children.
#[derive(Debug, Clone)]
pub(crate) struct SpanContext {
    pub trace: u128,
    pub id: u64,
    pub sampled: bool,
    pub state: Option<Arc<str>>,
}

impl Record {
    /// A new span named `name`, the child of `parent` (a local span) or a root, decided by
    /// `sampler`.
    fn new(name: &'static str, parent: Option<SpanContext>, sampler: Sampler) -> Record {
        let (trace, parent_id, decided, state) = match parent {
            Some(p) => (p.trace, p.id, Some(p.sampled), p.state),
            None => (random_trace(), 0, None, None),
        };
        let sampled = sampler.keeps(trace, decided);
        let recording = sampled || decided.is_none();
        Record {
            trace,
            id: random_id(),
            parent: parent_id,
            remote_parent: false,
            sampled,
            recording,
            kind: Kind::Internal,
            name,
            start: now(),
            end: 0,
            state,
            attributes: if recording {
                spare_buffer()
            } else {
                Vec::new()
            },
            sampler,
        }
    }

    /// The context the span's children and its outgoing requests carry.
    pub fn context(&self) -> SpanContext {
        SpanContext {
            trace: self.trace,
            id: self.id,
            sampled: self.sampled,
            state: self.state.clone(),
        }
    }

    /// Makes the span the child of `remote`, another process's span, with the trace state
    /// `state`, and decides again whether it is sampled. Meant for a span that has no
    /// children yet; fields it had before were kept only if it was recording (a root).
    pub fn adopt(&mut self, remote: super::context::Remote, state: Option<Arc<str>>) {
        self.trace = remote.trace;
        self.parent = remote.span;
        self.remote_parent = true;
        self.state = state;
        self.sampled = self.sampler.keeps(remote.trace, Some(remote.sampled));
        self.recording = self.sampled;
    }

    /// A record made by hand, for the encoder's tests.
    #[cfg(test)]
    pub fn for_test(name: &'static str, trace: u128, id: u64, parent: u64) -> Record {
        Record {
            trace,
            id,
            parent,
            remote_parent: false,
            sampled: true,
            recording: true,
            kind: Kind::Internal,
            name,
            start: 0,
            end: 0,
            state: None,
            attributes: Vec::new(),
            sampler: Sampler::default(),
        }
    }
}

/// Records a span's fields into its record's attributes.
struct Fields<'r>(&'r mut Record);

thread_local! {
    /// Where `Debug` and `Display` fields are formatted before they are encoded.
    static TEXT: RefCell<String> = const { RefCell::new(String::new()) };
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == KIND_FIELD {
            self.0.kind = Kind::named(value);
            return;
        }
        otlp::attribute(&mut self.0.attributes, field.name(), Value::Str(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        otlp::attribute(&mut self.0.attributes, field.name(), Value::I64(value));
    }

    /// As an integer when it fits OTLP's `int64`, else as text.
    fn record_u64(&mut self, field: &Field, value: u64) {
        match i64::try_from(value) {
            Ok(v) => self.record_i64(field, v),
            Err(_) => self.record_debug(field, &value),
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        otlp::attribute(&mut self.0.attributes, field.name(), Value::Bool(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        otlp::attribute(&mut self.0.attributes, field.name(), Value::F64(value));
    }

    /// Formatted into a buffer of the thread's (a fresh one if a `Debug` implementation
    /// records a span's field itself).
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        TEXT.with(|t| match t.try_borrow_mut() {
            Ok(mut text) => {
                text.clear();
                let _ = write!(text, "{value:?}");
                self.record_str(field, &text);
            }
            Err(_) => self.record_str(field, &format!("{value:?}")),
        });
    }
}

/// The export's layer: a [`Record`] per span it takes ([`takes`]), queued when the span
/// closes if sampled. It has no per-layer filter: it looks at a new span's callsite itself,
/// and has nothing to do when a span is entered or left.
pub(crate) struct Spans {
    queue: Arc<Queue>,
    sampler: Sampler,
}

impl Spans {
    pub fn new(queue: Arc<Queue>, sampler: Sampler) -> Spans {
        Spans { queue, sampler }
    }
}

/// Whether the export takes spans of `m`'s callsite: the runtime's own (`lrpc*` targets),
/// at debug level or above, whatever the log's filter says. Events stay the log's.
pub(crate) fn takes(m: &tracing::Metadata<'_>) -> bool {
    m.is_span() && *m.level() <= tracing::Level::DEBUG && m.target().starts_with("lrpc")
}

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if !takes(attrs.metadata()) {
            return;
        }
        let Some(span) = ctx.span(id) else {
            return;
        };
        // The nearest ancestor the export took (a span between, which it did not, is
        // skipped).
        let parent = span
            .scope()
            .skip(1)
            .find_map(|p| p.extensions().get::<Record>().map(Record::context));
        let mut record = Record::new(attrs.metadata().name(), parent, self.sampler);
        if record.recording {
            attrs.record(&mut Fields(&mut record));
        }
        span.extensions_mut().insert(record);
    }

    fn on_record(&self, id: &Id, values: &tracing::span::Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut ext = span.extensions_mut();
        if let Some(r) = ext.get_mut::<Record>()
            && r.recording
        {
            values.record(&mut Fields(r));
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(mut r) = span.extensions_mut().remove::<Record>() else {
            return;
        };
        if r.sampled {
            r.end = now();
            self.queue.push(&r);
        }
        give_back(std::mem::take(&mut r.attributes));
    }
}

/// Finished spans waiting for export, encoded, on one shelf per thread that closes spans:
/// at most `max` on each (a span closing on a full shelf is dropped and counted). The
/// exporter is woken when a shelf holds `batch`.
pub(crate) struct Queue {
    /// Tells this queue's shelves from another's (a test may run several).
    id: usize,
    shelves: Mutex<Vec<Arc<Shelf>>>,
    /// Set when a shelf holds a batch; the exporter clears it when it takes them.
    full: AtomicBool,
    wake: Mutex<()>,
    ready: Condvar,
    max: usize,
    batch: usize,
    dropped: AtomicU64,
    stopping: AtomicBool,
    /// Shelves' buffers the exporter is done with, for the shelves to fill again: a large
    /// buffer allocated afresh is mapped page by page as a thread writes it.
    spare: Mutex<Vec<Vec<u8>>>,
}

/// The most buffers [`Queue::recycle`] keeps.
const SPARE_SHELVES: usize = 32;

/// The largest buffer [`Queue::recycle`] keeps.
const SPARE_SHELF_BYTES: usize = 8 << 20;

/// One thread's finished spans.
#[derive(Default)]
struct Shelf {
    spans: Mutex<Encoded>,
}

/// Spans encoded one after another, each as a `spans` field of an OTLP `ScopeSpans`.
#[derive(Default)]
pub(crate) struct Encoded {
    pub bytes: Vec<u8>,
    pub count: usize,
}

/// Tells queues apart.
static QUEUES: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// This thread's shelf, and the queue it belongs to.
    static SHELF: RefCell<Option<(usize, Arc<Shelf>)>> = const { RefCell::new(None) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Queue {
    /// An empty queue of at most `max` spans a thread (at least one), waking the exporter
    /// at `batch`.
    pub fn new(max: usize, batch: usize) -> Queue {
        let max = max.max(1);
        Queue {
            id: QUEUES.fetch_add(1, Ordering::Relaxed),
            shelves: Mutex::new(Vec::new()),
            full: AtomicBool::new(false),
            wake: Mutex::new(()),
            ready: Condvar::new(),
            max,
            batch: batch.clamp(1, max),
            dropped: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            spare: Mutex::new(Vec::new()),
        }
    }

    /// Keeps `bytes`, a shelf's the exporter has sent, for a shelf to fill again.
    pub fn recycle(&self, mut bytes: Vec<u8>) {
        if bytes.capacity() == 0 || bytes.capacity() > SPARE_SHELF_BYTES {
            return;
        }
        bytes.clear();
        let mut spare = lock(&self.spare);
        if spare.len() < SPARE_SHELVES {
            spare.push(bytes);
        }
    }

    /// The most spans an export request carries.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The most spans that wait on a thread's shelf.
    pub fn max(&self) -> usize {
        self.max
    }

    /// This thread's shelf, made (and listed) on its first span.
    fn shelf(&self) -> Arc<Shelf> {
        let mine = |s: &Option<(usize, Arc<Shelf>)>| {
            s.as_ref()
                .filter(|(id, _)| *id == self.id)
                .map(|(_, s)| s.clone())
        };
        let known = SHELF.try_with(|s| s.try_borrow().ok().and_then(|s| mine(&s)));
        if let Ok(Some(shelf)) = known {
            return shelf;
        }
        let shelf = Arc::new(Shelf::default());
        lock(&self.shelves).push(shelf.clone());
        let _ = SHELF.try_with(|s| {
            if let Ok(mut s) = s.try_borrow_mut() {
                *s = Some((self.id, shelf.clone()));
            }
        });
        shelf
    }

    /// Encodes a finished span onto this thread's shelf, or drops (and counts) it when the
    /// shelf is full.
    fn push(&self, r: &Record) {
        let shelf = self.shelf();
        let mut spans = lock(&shelf.spans);
        if spans.count >= self.max {
            drop(spans);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        otlp::span(&mut spans.bytes, r);
        spans.count += 1;
        let full = spans.count == self.batch;
        drop(spans);
        if full {
            self.full.store(true, Ordering::Relaxed);
            let _wake = lock(&self.wake);
            self.ready.notify_one();
        }
    }

    /// Waits until a shelf holds a batch, `until` passes or the export stops; then takes
    /// every shelf's spans into `into`. Whether the export is stopping.
    pub fn take(&self, into: &mut Vec<Encoded>, until: Instant) -> bool {
        let mut wake = lock(&self.wake);
        let stopping = loop {
            let stopping = self.stopping.load(Ordering::Relaxed);
            let now = Instant::now();
            if stopping || self.full.swap(false, Ordering::Relaxed) || now >= until {
                break stopping;
            }
            wake = self
                .ready
                .wait_timeout(wake, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        };
        drop(wake);
        let mut shelves = lock(&self.shelves);
        // A shelf only the list holds is an ended thread's, once it is empty.
        shelves.retain(|s| Arc::strong_count(s) > 1 || lock(&s.spans).count > 0);
        let mut spare = lock(&self.spare);
        for shelf in shelves.iter() {
            let mut spans = lock(&shelf.spans);
            if spans.count > 0 {
                let room = spans.bytes.capacity();
                let bytes = spare.pop().unwrap_or_else(|| Vec::with_capacity(room));
                into.push(std::mem::replace(&mut *spans, Encoded { bytes, count: 0 }));
            }
        }
        drop(spare);
        stopping
    }

    /// The spans dropped for a full shelf since the last call.
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }

    /// Tells the exporter to send what waits and stop.
    pub fn stop(&self) {
        // Set under the lock, so that an exporter about to wait sees it.
        let _wake = lock(&self.wake);
        self.stopping.store(true, Ordering::Relaxed);
        self.ready.notify_all();
    }
}

/// Nanoseconds since the Unix epoch (0 for a clock before it).
fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

thread_local! {
    /// The thread's xorshift64* state, never 0.
    static RNG: Cell<u64> = Cell::new(seed());
}

/// A random, non-zero seed: the standard library's randomly keyed hasher (`RandomState`,
/// whose keys come from the system's random source) over the time and the thread.
fn seed() -> u64 {
    use std::hash::{BuildHasher as _, Hash as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now());
    std::thread::current().id().hash(&mut h);
    h.finish() | 1
}

/// The thread's next random number: xorshift64*, never 0 (its state is not 0, and the
/// multiplier is odd).
fn random() -> u64 {
    RNG.with(|s| {
        let mut x = s.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s.set(x);
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    })
}

/// A new span id.
fn random_id() -> u64 {
    random()
}

/// A new trace id.
fn random_trace() -> u128 {
    u128::from(random()) << 64 | u128::from(random())
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use prost::Message as _;
    use std::time::Duration;
    use tracing_subscriber::layer::SubscriberExt as _;

    /// Runs `f` with a subscriber of [`Spans`] alone (every span taken); the queue.
    fn traced(sampler: Sampler, max: usize, f: impl FnOnce()) -> Arc<Queue> {
        let queue = Arc::new(Queue::new(max, 512));
        let subscriber = tracing_subscriber::registry().with(Spans::new(queue.clone(), sampler));
        tracing::subscriber::with_default(subscriber, f);
        queue
    }

    /// The spans `q` holds, decoded.
    fn taken(q: &Queue) -> Vec<Span> {
        let mut v = Vec::new();
        q.take(&mut v, Instant::now());
        let mut out = Vec::new();
        for e in &v {
            let mut message = Vec::new();
            otlp::request(&mut message, &[], otlp::spans(&e.bytes));
            let decoded = ExportTraceServiceRequest::decode(message.as_slice()).expect("decodes");
            let spans: Vec<Span> = decoded
                .resource_spans
                .into_iter()
                .flat_map(|r| r.scope_spans)
                .flat_map(|s| s.spans)
                .collect();
            assert_eq!(spans.len(), e.count);
            out.extend(spans);
        }
        out
    }

    fn id(b: &[u8]) -> u64 {
        if b.is_empty() {
            return 0;
        }
        u64::from_be_bytes(b.try_into().unwrap())
    }

    fn attr(s: &Span, key: &str) -> Option<Any> {
        s.attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.clone()?.value)
    }

    #[test]
    fn children_share_the_trace_and_name_their_parent() {
        let q = traced(Sampler::default(), 100, || {
            let request = tracing::debug_span!("request", otel.kind = "server", route = "/api");
            request.in_scope(|| {
                let chain = tracing::debug_span!("chain", plugins = 3u64);
                chain.in_scope(|| {
                    let call = tracing::debug_span!("call", status = tracing::field::Empty);
                    call.record("status", tracing::field::display("ok"));
                });
                let explicit = tracing::debug_span!(parent: &chain, "late", big = u64::MAX);
                drop(explicit);
            });
        });
        let spans = taken(&q);
        let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["call", "late", "chain", "request"]);
        let [call, late, chain, request] = &spans[..] else {
            unreachable!()
        };
        assert!(
            spans
                .iter()
                .all(|s| s.trace_id == request.trace_id && s.flags & 1 == 1)
        );
        assert_eq!(id(&request.parent_span_id), 0);
        assert_eq!(request.kind, Kind::Server as i32);
        assert_eq!(chain.parent_span_id, request.span_id);
        assert_eq!(call.parent_span_id, chain.span_id);
        assert_eq!(late.parent_span_id, chain.span_id);
        assert!(request.start_time_unix_nano <= chain.start_time_unix_nano);
        assert!(chain.end_time_unix_nano <= request.end_time_unix_nano);
        let mut ids: Vec<u64> = spans.iter().map(|s| id(&s.span_id)).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 4);
        // The fields: a string, a number, text from `Display`, a u64 too large.
        assert_eq!(
            attr(request, "route"),
            Some(Any::StringValue("/api".into()))
        );
        assert_eq!(attr(request, "otel.kind"), None, "the kind is no attribute");
        assert_eq!(attr(chain, "plugins"), Some(Any::IntValue(3)));
        assert_eq!(attr(call, "status"), Some(Any::StringValue("ok".into())));
        assert_eq!(
            attr(late, "big"),
            Some(Any::StringValue(u64::MAX.to_string()))
        );
    }

    #[test]
    fn unsampled_traces_queue_nothing_and_a_full_queue_drops() {
        let q = traced(
            Sampler::parent_based(super::super::sampler::Rule::Off),
            100,
            || {
                let root = tracing::debug_span!("request");
                root.in_scope(|| drop(tracing::debug_span!("call", x = 1)));
            },
        );
        assert!(taken(&q).is_empty());
        let q = traced(Sampler::default(), 3, || {
            for _ in 0..5 {
                drop(tracing::debug_span!("call"));
            }
        });
        assert_eq!(taken(&q).len(), 3);
        assert_eq!(q.take_dropped(), 2);
        assert_eq!(q.take_dropped(), 0);
    }

    #[test]
    fn a_root_adopts_a_remote_parent_and_its_decision() {
        use super::super::context::Remote;
        let remote = Remote {
            trace: 0x4bf92f3577b34da6a3ce929d0e0e4736,
            span: 0x00f067aa0ba902b7,
            sampled: true,
        };
        let mut r = Record::new(
            "request",
            None,
            Sampler::parent_based(super::super::sampler::Rule::Off),
        );
        assert!(!r.sampled && r.recording);
        r.adopt(remote, Some("a=b".into()));
        assert!(r.sampled && r.remote_parent);
        assert_eq!((r.trace, r.parent), (remote.trace, remote.span));
        let child = Record::new("call", Some(r.context()), r.sampler);
        assert_eq!(child.state.as_deref(), Some("a=b"));
        assert!(child.sampled && !child.remote_parent);
        r.adopt(
            Remote {
                sampled: false,
                ..remote
            },
            None,
        );
        assert!(!r.sampled && !r.recording);
    }

    #[test]
    fn the_exporter_wakes_for_a_full_batch() {
        let q = Arc::new(Queue::new(10, 2));
        let waiter = {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut v = Vec::new();
                let stopping = q.take(&mut v, Instant::now() + Duration::from_secs(60));
                (v.iter().map(|e| e.count).sum::<usize>(), stopping)
            })
        };
        std::thread::sleep(Duration::from_millis(20));
        q.push(&Record::for_test("a", 1, 1, 0));
        q.push(&Record::for_test("b", 1, 2, 0));
        assert_eq!(waiter.join().unwrap(), (2, false));
        q.stop();
        let mut v = Vec::new();
        assert!(q.take(&mut v, Instant::now() + Duration::from_secs(60)));
        assert!(v.is_empty());
    }

    #[test]
    fn each_thread_has_its_shelf_and_ended_threads_theirs_until_taken() {
        let q = Arc::new(Queue::new(10, 10));
        q.push(&Record::for_test("here", 1, 1, 0));
        let there = q.clone();
        std::thread::spawn(move || there.push(&Record::for_test("there", 1, 2, 0)))
            .join()
            .unwrap();
        assert_eq!(lock(&q.shelves).len(), 2);
        let mut v = Vec::new();
        q.take(&mut v, Instant::now());
        assert_eq!(v.iter().map(|e| e.count).sum::<usize>(), 2);
        // The ended thread's shelf goes at the next take, this thread's stays.
        q.take(&mut Vec::new(), Instant::now());
        assert_eq!(lock(&q.shelves).len(), 1);
    }
}
