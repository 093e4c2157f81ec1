//! A handler's response body on its way to the client: taken whole when the guest finished
//! it, else relayed from the guest's bounded channel and cut off when the guest fails or
//! the deadline passes.

use crate::supervise::lock;
use axum::body::Bytes;
use http_body_util::BodyExt as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use wasmtime_wasi_http::Error as HttpError;
use wasmtime_wasi_http::p2::body::HyperOutgoingBody;

/// The whole of a finished body, taken from its buffer without waiting; when it is not all
/// there, or it ends with trailers or an error, the body, with what was taken put back.
pub(super) fn drain(mut body: HyperOutgoingBody) -> Result<WholeBody, HyperOutgoingBody> {
    use std::task::{Context, Poll, Waker};
    let mut cx = Context::from_waker(Waker::noop());
    let mut data = std::collections::VecDeque::new();
    let last = loop {
        match http_body::Body::poll_frame(std::pin::Pin::new(&mut body), &mut cx) {
            Poll::Ready(None) => {
                let len = data.iter().map(|d: &Bytes| d.len() as u64).sum();
                return Ok(WholeBody { data, len });
            }
            Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                Ok(d) => data.push_back(d),
                Err(trailers) => break Some(Ok(trailers)),
            },
            Poll::Ready(Some(Err(e))) => break Some(Err(e)),
            Poll::Pending => break None,
        }
    };
    let frames = data
        .into_iter()
        .map(|d| Ok(http_body::Frame::data(d)))
        .chain(last)
        .collect();
    Err(Replay { frames, rest: body }.boxed_unsync())
}

/// A body all there, in the pieces the guest wrote: its length is known, so it goes with a
/// `content-length`.
pub(super) struct WholeBody {
    data: std::collections::VecDeque<Bytes>,
    /// The bytes left in `data`.
    len: u64,
}

impl http_body::Body for WholeBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        let next = self.data.pop_front();
        if let Some(d) = &next {
            self.len = self.len.saturating_sub(d.len() as u64);
        }
        std::task::Poll::Ready(next.map(|d| Ok(http_body::Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.len == 0
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.len)
    }
}

/// Frames taken from a body, then the rest of it.
struct Replay {
    frames: std::collections::VecDeque<Result<http_body::Frame<Bytes>, HttpError>>,
    rest: HyperOutgoingBody,
}

impl http_body::Body for Replay {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        match self.frames.pop_front() {
            Some(f) => std::task::Poll::Ready(Some(f)),
            None => http_body::Body::poll_frame(std::pin::Pin::new(&mut self.rest), cx),
        }
    }
}

/// Frames of a response body waiting between the guest and the client's connection.
const RELAY_FRAMES: usize = 8;

/// A guest's response body as a task on the WASI runtime relays it: the guest's writes
/// complete when the relay takes them, not when the client's connection (on a busy reactor
/// thread) gets to them. At most [`RELAY_FRAMES`] frames wait, so a slow client still slows
/// the guest.
struct Relay {
    frames: tokio::sync::mpsc::Receiver<Result<http_body::Frame<Bytes>, String>>,
    /// The task; aborting it drops the guest's body, so the guest's next write fails.
    _task: wasmtime_wasi::runtime::AbortOnDropJoinHandle<()>,
}

impl Relay {
    fn start(mut body: HyperOutgoingBody) -> Relay {
        let (tx, frames) = tokio::sync::mpsc::channel(RELAY_FRAMES);
        let task = wasmtime_wasi::runtime::spawn(async move {
            while let Some(frame) = body.frame().await {
                let failed = frame.is_err();
                if tx.send(frame.map_err(|e| e.to_string())).await.is_err() || failed {
                    break;
                }
            }
        });
        Relay {
            frames,
            _task: task,
        }
    }
}

/// A streamed response body as the client's connection and the worker share it.
struct Shared {
    /// The guest's body, relayed, until it ends or is cut off.
    body: Option<Relay>,
    /// Cut off: the client gets an error (the connection is aborted).
    cut: bool,
    /// The body fails where it ends, after what the guest wrote, if it wrote anything.
    bad_end: bool,
    /// The guest wrote a byte of the body (it has reached the client's side).
    wrote: bool,
    /// The task that last polled the body, woken when it is cut off.
    waker: Option<std::task::Waker>,
    /// When it is cut off if it has not ended by then.
    until: Instant,
    /// A task that cuts it off at `until`, started at the first poll.
    timer: Option<tokio::task::JoinHandle<()>>,
}

/// Cuts a streamed body off: its client sees the body fail, and the guest's next write to
/// it fails.
#[derive(Clone)]
pub(super) struct BodyCut(Arc<Mutex<Shared>>);

impl BodyCut {
    /// Makes the body fail where it ends: the guest's Store is about to go, and with it the
    /// guest's end of the body, which would otherwise end it as if finished.
    pub(super) fn end_badly(&self) {
        lock(&self.0).bad_end = true;
    }

    /// Cuts the body off now (what is buffered is dropped).
    fn cut(&self) {
        let (body, waker) = {
            let mut s = lock(&self.0);
            s.cut = true;
            (s.body.take(), s.waker.take())
        };
        drop(body);
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// A response body streaming from the guest to the client through the guest's bounded
/// channel: a slow client slows the guest's writes. It fails when cut off (the guest
/// failed or left it unfinished, or the deadline passed).
pub(super) struct StreamedBody(Arc<Mutex<Shared>>);

impl StreamedBody {
    pub(super) fn new(body: HyperOutgoingBody, until: Instant) -> (StreamedBody, BodyCut) {
        let shared = Arc::new(Mutex::new(Shared {
            body: Some(Relay::start(body)),
            cut: false,
            bad_end: false,
            wrote: false,
            waker: None,
            until,
            timer: None,
        }));
        (StreamedBody(shared.clone()), BodyCut(shared))
    }
}

impl Drop for StreamedBody {
    fn drop(&mut self) {
        let mut s = lock(&self.0);
        if let Some(t) = s.timer.take() {
            t.abort();
        }
        // The client went away: the guest's next write fails.
        s.body = None;
    }
}

/// The error a cut-off body fails with.
#[derive(Debug, thiserror::Error)]
#[error("the handler did not finish its response body")]
struct CutOff;

impl http_body::Body for StreamedBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        use std::task::Poll;
        let mut s = lock(&self.0);
        if s.cut {
            return Poll::Ready(Some(Err(Box::new(CutOff))));
        }
        if s.timer.is_none()
            && s.body.is_some()
            && let Ok(rt) = tokio::runtime::Handle::try_current()
        {
            // The deadline also holds when the client stops reading and nothing polls.
            let cut = BodyCut(self.0.clone());
            let until = tokio::time::Instant::from_std(s.until);
            s.timer = Some(rt.spawn(async move {
                tokio::time::sleep_until(until).await;
                cut.cut();
            }));
        }
        let Some(body) = s.body.as_mut() else {
            return Poll::Ready(None);
        };
        match body.frames.poll_recv(cx) {
            Poll::Ready(None) => {
                s.body = None;
                // A body cut after some of it was sent stays cut: the client must not take
                // a part for the whole. One the guest never wrote a byte of ends empty, as
                // under `wasmtime serve`: a handler that set its response and then failed
                // (a JavaScript handler that throws) answers with a clean, empty body.
                if s.bad_end && s.wrote {
                    s.cut = true;
                    return Poll::Ready(Some(Err(Box::new(CutOff))));
                }
                Poll::Ready(None)
            }
            Poll::Ready(Some(Err(e))) => {
                s.body = None;
                s.cut = true;
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(Some(Ok(frame))) => {
                if frame.data_ref().is_some_and(|d| !d.is_empty()) {
                    s.wrote = true;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Pending => {
                if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    s.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}
