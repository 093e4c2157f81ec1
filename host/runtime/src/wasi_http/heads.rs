//! A response's head: held back while the guest may still finish its body (then the
//! response goes whole), else sent [`HOLD`] later, its body streaming behind it.

use super::body::{BodyCut, StreamedBody};
use crate::http::Reply;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

/// The `response-outparam` of a request being handled: where its head goes, and what the
/// guest passed to `set`.
///
/// A response the guest sets is held back at first ([`Sent::Held`]). Most guests finish
/// their body and return at once: the response then goes whole, with its length, in one
/// hand-over to the client's connection. A guest still running [`HOLD`] later (it streams,
/// waits, or computes) gets its head sent then (by the request's task, `p2.rs`), and its
/// body streams behind it. The body's buffer holds [`BODY_WRITES`] writes: a guest that
/// writes more waits for the head to go.
pub(super) struct Outparam {
    pub(super) reply: Option<oneshot::Sender<Reply>>,
    pub(super) sent: Option<Sent>,
    /// The request's deadline, by which a streamed body is cut off.
    pub(super) until: Instant,
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

    /// Whether a response is held back.
    pub(super) fn held(&self) -> bool {
        matches!(self.sent, Some(Sent::Held(_)))
    }

    /// Sends the head of a response held back; its body streams behind it.
    pub(super) fn send_head(&mut self) {
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
    /// A response, with no channel to send it on (a request's task always has one).
    Unsendable,
    /// An error code instead of a response.
    Error(ErrorCode),
}

/// How long a response the guest set is held back while the guest runs on (it streams,
/// waits, or computes), before its head goes out and its body streams behind it.
pub(super) const HOLD: Duration = Duration::from_millis(1);
