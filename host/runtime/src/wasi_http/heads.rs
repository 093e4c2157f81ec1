//! A response's head: held back while the guest may still finish its body (then the
//! response goes whole), else sent by the watch thread a tick or two later, its body
//! streaming behind it.

use super::body::{BodyCut, StreamedBody};
use crate::http::Reply;
use crate::supervise::lock;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

/// The `response-outparam` of a request being handled: where its head goes, and what the
/// guest passed to `set`.
///
/// A response the guest sets is held back at first ([`Sent::Held`]). Most guests finish
/// their body and return at once: the response then goes whole, with its length, in one
/// hand-over to the client's connection. A guest still running [`HOLD_TICK`] or two later
/// (it streams, waits, or computes) gets its head sent by the [`watch`] thread, and its
/// body streams behind it. The body's buffer holds [`BODY_WRITES`] writes: a guest that
/// writes more waits for the head to go.
pub(super) struct Outparam {
    pub(super) reply: Option<oneshot::Sender<Reply>>,
    pub(super) sent: Option<Sent>,
    /// The request's deadline, by which a streamed body is cut off.
    pub(super) until: Instant,
    /// The watch thread saw the response held at one of its ticks already.
    pub(super) aged: bool,
}

impl Outparam {
    /// Takes what the guest passed to `response-outparam.set`: a response is held back (see
    /// above).
    pub(super) fn set(&mut self, v: Result<axum::http::Response<HyperOutgoingBody>, ErrorCode>) {
        self.sent = Some(match v {
            Err(code) => Sent::Error(code),
            Ok(_) if self.reply.is_none() => Sent::Unsendable,
            Ok(r) => Sent::Held(r),
        });
    }

    /// Sends the head of a response held back; its body streams behind it.
    fn send_head(&mut self) {
        if !matches!(self.sent, Some(Sent::Held(_))) {
            return;
        }
        if let (Some(Sent::Held(r)), Some(tx)) = (self.sent.take(), self.reply.take()) {
            let (parts, body) = r.into_parts();
            self.sent = Some(stream(tx, parts, body, self.until));
        }
    }
}

/// Sends a response's head through `tx`, its body streaming behind it until `until`.
pub(super) fn stream(
    tx: oneshot::Sender<Reply>,
    parts: axum::http::response::Parts,
    body: HyperOutgoingBody,
    until: Instant,
) -> Sent {
    let status = parts.status.as_u16();
    let (body, cut) = StreamedBody::new(body, until);
    // A client that went away drops the body: the guest's next write fails.
    let _ = tx.send(Reply::Streamed(axum::http::Response::from_parts(
        parts,
        axum::body::Body::new(body),
    )));
    Sent::Streaming(cut, status)
}

/// What the guest passed to `response-outparam.set`.
pub(super) enum Sent {
    /// A response held back (see [`Outparam`]).
    Held(axum::http::Response<HyperOutgoingBody>),
    /// A response sent whole; its status.
    Whole(u16),
    /// A response: its head went to the client, its body streams (cut off by the
    /// [`BodyCut`]); the status.
    Streaming(BodyCut, u16),
    /// A response, with no channel to send it on (a handler runs only on route workers,
    /// which always pass one).
    Unsendable,
    /// An error code instead of a response.
    Error(ErrorCode),
}

/// How often the [`watch`] thread looks at the responses held back. A response held at
/// two of its ticks has its head sent.
const HOLD_TICK: Duration = Duration::from_millis(1);

/// The responses held back, for the [`watch`] thread.
#[derive(Default)]
struct Held {
    list: Vec<std::sync::Weak<Mutex<Outparam>>>,
    /// The thread waits for a response to watch.
    idle: bool,
    /// The thread runs (it could be started).
    running: bool,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    list: Vec::new(),
    idle: false,
    running: false,
});
static HELD_WAKE: std::sync::Condvar = std::sync::Condvar::new();

/// Has the watch thread send the head of the response `o` holds if the guest is still
/// running one or two [`HOLD_TICK`]s from now. Without the thread, the head goes at once.
pub(super) fn watch(o: &Arc<Mutex<Outparam>>) {
    static START: std::sync::Once = std::sync::Once::new();
    START.call_once(|| {
        let started = std::thread::Builder::new()
            .name("lrpc-http-heads".into())
            .spawn(send_held_heads)
            .is_ok();
        lock(&HELD).running = started;
    });
    let mut held = lock(&HELD);
    if !held.running {
        drop(held);
        lock(o).send_head();
        return;
    }
    held.list.push(Arc::downgrade(o));
    if held.idle {
        held.idle = false;
        HELD_WAKE.notify_one();
    }
}

/// The watch thread: every [`HOLD_TICK`] while responses are held, sends the heads of those
/// it saw held at its last tick already.
fn send_held_heads() {
    loop {
        {
            let mut held = lock(&HELD);
            while held.list.is_empty() {
                held.idle = true;
                held = HELD_WAKE
                    .wait(held)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
            held.idle = false;
        }
        std::thread::sleep(HOLD_TICK);
        let list = std::mem::take(&mut lock(&HELD).list);
        let mut keep = Vec::new();
        for w in list {
            let Some(o) = w.upgrade() else { continue };
            let mut o = lock(&o);
            if !matches!(o.sent, Some(Sent::Held(_))) {
                continue;
            }
            if o.aged {
                o.send_head();
            } else {
                o.aged = true;
                drop(o);
                keep.push(w);
            }
        }
        if !keep.is_empty() {
            lock(&HELD).list.extend(keep);
        }
    }
}
