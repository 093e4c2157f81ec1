//! Sessions: many calls on one kept connection between two of our kernels.
//!
//! wRPC's TCP and Unix framing carries one invocation per connection (the end of each
//! direction's stream ends the call), so every call would pay a connect, an accept and a
//! close. Between two kernels of this crate a connection can instead carry a sequence of
//! calls. A client opens a session with an ordinary wRPC invocation of the function
//! `lrpc:remote/session@1` / `open` with empty parameters; our server answers it with one
//! wRPC result frame (one byte: the session protocol's version, 1) and keeps the connection. A server that is not ours (a
//! `wit-bindgen-wrpc` peer) has no such function and closes the connection: the client then
//! calls it in plain wRPC, one invocation per connection.
//!
//! On a session, calls follow each other, one at a time:
//!
//! ```text
//! request:  0x01, instance (LEB128 length, UTF-8), function (same), LEB128 length, parameters
//! reply:    0x00, LEB128 length, results       (the call returned)
//!           0x01                               (the call failed: refused, trapped, unknown)
//!           0x02, export (LEB128 length, UTF-8) (the caller is not on the export's allow list)
//! ```
//!
//! **Version 2** adds a request that carries the caller's trace context (`trace.rs`):
//!
//! ```text
//! request:  0x03, traceparent (LEB128 length, ASCII), tracestate (same), then as 0x01
//! ```
//!
//! A client opens a version 2 session with the function `open-2` instead of `open`; a server
//! of this version answers it with version 2 (`0x00, 0x01, 0x02`) and takes both kinds of
//! request. A version 1 server has no `open-2` and closes the connection: the client then
//! opens version 1 sessions with it (`open`), whose requests carry no context. A version 1
//! client opens with `open` and gets version 1, as before.
//!
//! Over TLS (`tls.rs`) the session is the same inside the TLS connection, which is kept
//! with the session: a kept session pays the handshake once.
//!
//! Parameters and results are in the component model's value encoding, exactly as in a wRPC
//! invocation, and the server checks the parameters the same way (`wire.rs`).

use std::io::{self, Read};
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt as _, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// The instance of the wRPC function that opens a session.
pub(crate) const SESSION_INSTANCE: &str = "lrpc:remote/session@1";
/// The function that opens a session.
pub(crate) const SESSION_FUNC: &str = "open";
/// The function that opens a version 2 session (requests may carry a trace context).
pub(crate) const SESSION_FUNC_2: &str = "open-2";
/// The server's answer to the opening invocation: a wRPC frame on the root path with one
/// byte, the session protocol's version.
pub(crate) const ACCEPT: [u8; 3] = [0x00, 0x01, 0x01];
/// The server's answer to `open-2`: version 2.
pub(crate) const ACCEPT_2: [u8; 3] = [0x00, 0x01, 0x02];
/// A request's first byte.
pub(crate) const REQUEST: u8 = 0x01;
/// A version 2 request's first byte: a trace context comes before the call.
pub const TRACED_REQUEST: u8 = 0x03;
/// A reply's first byte: the call returned, its results follow.
pub(crate) const RETURNED: u8 = 0x00;
/// A reply's first byte: the call failed.
pub(crate) const FAILED: u8 = 0x01;
/// A reply's first byte: the caller is not on the export's allow list; the export's name
/// follows.
pub(crate) const NOT_ALLOWED: u8 = 0x02;
/// Longest instance or function name accepted in a request.
pub const MAX_NAME: usize = 1024;

/// How long one side of a session keeps its thread awake for the other's next message, when
/// the last one came that fast (see [`spin_until_readable`]).
pub(crate) const SPIN: std::time::Duration = std::time::Duration::from_micros(100);

/// Whether the connection has bytes to read, or has ended, without waiting.
pub(crate) fn readable_now(fd: impl std::os::fd::AsFd) -> bool {
    let mut b = [0u8; 1];
    let peek = rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT;
    !matches!(
        rustix::net::recv(fd, &mut b, peek),
        Err(rustix::io::Errno::AGAIN)
    )
}

/// Keeps this thread awake for at most `limit` until the connection has bytes to read (a
/// peer that answered within microseconds last time likely does again): a thread that
/// sleeps and is woken costs more than that on a machine whose processors go idle.
pub(crate) fn spin_until_readable(fd: impl std::os::fd::AsFd, limit: std::time::Duration) {
    let start = std::time::Instant::now();
    while !readable_now(&fd) && start.elapsed() < limit {
        std::hint::spin_loop();
    }
}

/// A connection's reading half, boxed.
pub(crate) type BoxedRead = Pin<Box<dyn AsyncRead + Send + Sync>>;
/// A connection's writing half, boxed.
pub(crate) type BoxedWrite = Pin<Box<dyn AsyncWrite + Send + Sync>>;

/// A connection: TCP or Unix, or TLS over TCP (a server's or a client's side).
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    TlsServer(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    TlsClient(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl Stream {
    /// Whether the connection still looks usable: nothing to read (a closed or reset one
    /// reads its end or an error at once; a kept session never has unsolicited data).
    pub(crate) fn is_idle_and_open(&self) -> bool {
        let mut b = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let r = match self {
            Stream::Tcp(s) => socket2::SockRef::from(s).peek(&mut b),
            Stream::Unix(s) => socket2::SockRef::from(s).peek(&mut b),
            // Neither side sends anything between calls (no session tickets, see `tls.rs`):
            // a byte waiting is the peer's close.
            Stream::TlsServer(s) => socket2::SockRef::from(s.get_ref().0).peek(&mut b),
            Stream::TlsClient(s) => socket2::SockRef::from(s.get_ref().0).peek(&mut b),
        };
        matches!(r, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
    }
}

impl Stream {
    /// The connection's halves, boxed.
    pub(crate) fn into_split(self) -> (BoxedRead, BoxedWrite) {
        match self {
            Stream::Tcp(s) => {
                let (r, w) = s.into_split();
                (Box::pin(r), Box::pin(w))
            }
            Stream::Unix(s) => {
                let (r, w) = s.into_split();
                (Box::pin(r), Box::pin(w))
            }
            Stream::TlsServer(s) => {
                let (r, w) = tokio::io::split(*s);
                (Box::pin(r), Box::pin(w))
            }
            Stream::TlsClient(s) => {
                let (r, w) = tokio::io::split(*s);
                (Box::pin(r), Box::pin(w))
            }
        }
    }

    /// The connection as a blocking socket, for a thread of its own.
    pub(crate) fn into_blocking(self) -> io::Result<BlockingStream> {
        let s = match self {
            Stream::Tcp(s) => BlockingStream::Tcp(s.into_std()?),
            Stream::Unix(s) => BlockingStream::Unix(s.into_std()?),
            // The TLS state goes with the socket: what rustls holds (read and not yet
            // taken, or not yet written) stays in it.
            Stream::TlsServer(s) => {
                let (tcp, conn) = s.into_inner();
                let tcp = tcp.into_std()?;
                tcp.set_nonblocking(false)?;
                let socket = tcp.try_clone()?;
                return Ok(BlockingStream::Tls(std::sync::Arc::new(BlockingTls {
                    socket,
                    conn: std::sync::Mutex::new(rustls::StreamOwned::new(conn, tcp)),
                })));
            }
            Stream::TlsClient(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "a client's TLS connection is not served on a thread",
                ));
            }
        };
        match &s {
            BlockingStream::Tcp(t) => t.set_nonblocking(false)?,
            BlockingStream::Unix(u) => u.set_nonblocking(false)?,
            BlockingStream::Tls(_) => {}
        }
        Ok(s)
    }
}

/// A server's TLS connection served by a blocking thread: the TLS state with the socket, and
/// a second handle on the socket for its settings and for polling it.
pub(crate) struct BlockingTls {
    socket: std::net::TcpStream,
    conn: std::sync::Mutex<rustls::StreamOwned<rustls::ServerConnection, std::net::TcpStream>>,
}

/// A connection served by a blocking thread (the server's side of a session).
pub(crate) enum BlockingStream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
    /// Shared by the reading and the writing handle of the one thread that serves it.
    Tls(std::sync::Arc<BlockingTls>),
}

impl BlockingStream {
    pub(crate) fn try_clone(&self) -> io::Result<BlockingStream> {
        Ok(match self {
            BlockingStream::Tcp(s) => BlockingStream::Tcp(s.try_clone()?),
            BlockingStream::Unix(s) => BlockingStream::Unix(s.try_clone()?),
            BlockingStream::Tls(s) => BlockingStream::Tls(s.clone()),
        })
    }

    /// Sets how long one read and one write may wait.
    pub(crate) fn set_timeouts(&self, t: std::time::Duration) -> io::Result<()> {
        match self {
            BlockingStream::Tcp(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
            BlockingStream::Unix(s) => {
                s.set_read_timeout(Some(t))?;
                s.set_write_timeout(Some(t))
            }
            BlockingStream::Tls(s) => {
                s.socket.set_read_timeout(Some(t))?;
                s.socket.set_write_timeout(Some(t))
            }
        }
    }
}

impl std::os::fd::AsFd for BlockingStream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            BlockingStream::Tcp(s) => s.as_fd(),
            BlockingStream::Unix(s) => s.as_fd(),
            BlockingStream::Tls(s) => s.socket.as_fd(),
        }
    }
}

impl std::os::fd::AsFd for Stream {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
            Stream::TlsServer(s) => s.get_ref().0.as_fd(),
            Stream::TlsClient(s) => s.get_ref().0.as_fd(),
        }
    }
}

impl Read for BlockingStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            BlockingStream::Tcp(s) => s.read(buf),
            BlockingStream::Unix(s) => s.read(buf),
            BlockingStream::Tls(s) => lrpc_lock::lock(&s.conn).read(buf),
        }
    }
}

impl io::Write for BlockingStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            BlockingStream::Tcp(s) => s.write(buf),
            BlockingStream::Unix(s) => s.write(buf),
            BlockingStream::Tls(s) => io::Write::write(&mut *lrpc_lock::lock(&s.conn), buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            BlockingStream::Tls(s) => io::Write::flush(&mut *lrpc_lock::lock(&s.conn)),
            _ => Ok(()),
        }
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            Stream::TlsServer(s) => Pin::new(&mut **s).poll_read(cx, buf),
            Stream::TlsClient(s) => Pin::new(&mut **s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            Stream::TlsServer(s) => Pin::new(&mut **s).poll_write(cx, buf),
            Stream::TlsClient(s) => Pin::new(&mut **s).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_flush(cx),
            Stream::Unix(s) => Pin::new(s).poll_flush(cx),
            Stream::TlsServer(s) => Pin::new(&mut **s).poll_flush(cx),
            Stream::TlsClient(s) => Pin::new(&mut **s).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            Stream::TlsServer(s) => Pin::new(&mut **s).poll_shutdown(cx),
            Stream::TlsClient(s) => Pin::new(&mut **s).poll_shutdown(cx),
        }
    }
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// An unsigned LEB128 number of at most 32 bits, taken a byte at a time (the same decoder
/// for the client's async reads and the server's blocking ones).
#[derive(Default)]
pub struct Leb {
    v: u32,
    i: u32,
}

impl Leb {
    /// Takes the next byte; the number once it is complete.
    pub fn push(&mut self, b: u8) -> io::Result<Option<u32>> {
        let bits = u32::from(b & 0x7f);
        if self.i == 4 && bits > 0x0f {
            return Err(invalid("LEB128 number out of range"));
        }
        self.v |= bits << (7 * self.i);
        self.i += 1;
        if b & 0x80 == 0 {
            return Ok(Some(self.v));
        }
        if self.i == 5 {
            return Err(invalid("LEB128 number too long"));
        }
        Ok(None)
    }
}

/// Reads an unsigned LEB128 number of at most 32 bits.
pub async fn read_leb_u32(r: &mut (impl AsyncRead + Unpin)) -> io::Result<u32> {
    let mut leb = Leb::default();
    loop {
        if let Some(v) = leb.push(r.read_u8().await?)? {
            return Ok(v);
        }
    }
}

/// [`read_leb_u32`] from a blocking reader.
pub fn read_leb_u32_blocking(r: &mut impl Read) -> io::Result<u32> {
    let mut leb = Leb::default();
    loop {
        if let Some(v) = leb.push(read_u8(r)?)? {
            return Ok(v);
        }
    }
}

/// Reads one byte from a blocking reader.
pub(crate) fn read_u8(r: &mut impl Read) -> io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}

/// Reads a LEB128 length that must not exceed `limit`.
pub fn read_len(r: &mut impl Read, limit: usize) -> io::Result<usize> {
    let n =
        usize::try_from(read_leb_u32_blocking(r)?).map_err(|_| invalid("length out of range"))?;
    if n > limit {
        return Err(invalid("length over the limit"));
    }
    Ok(n)
}

/// Reads exactly `n` bytes (the caller has bounded `n`) into `buf`, replacing its contents.
/// The buffer grows with the bytes that arrive, not with the length announced.
pub async fn read_exact_into(
    r: &mut (impl AsyncRead + Unpin),
    buf: &mut Vec<u8>,
    n: usize,
) -> io::Result<()> {
    buf.clear();
    let got = (&mut *r).take(n as u64).read_to_end(buf).await?;
    check_len(got, n)
}

/// [`read_exact_into`] from a blocking reader.
pub fn read_exact_into_blocking(r: &mut impl Read, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
    buf.clear();
    let got = r.take(n as u64).read_to_end(buf)?;
    check_len(got, n)
}

fn check_len(got: usize, n: usize) -> io::Result<()> {
    if got != n {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Reads a name (LEB128 length at most [`MAX_NAME`], UTF-8) into `into`.
pub fn read_name(r: &mut impl Read, scratch: &mut Vec<u8>, into: &mut String) -> io::Result<()> {
    let n = read_len(r, MAX_NAME)?;
    read_exact_into_blocking(r, scratch, n)?;
    into.clear();
    into.push_str(std::str::from_utf8(scratch).map_err(|_| invalid("a name is not UTF-8"))?);
    Ok(())
}

/// Appends a name: LEB128 length, bytes.
pub fn put_name(buf: &mut Vec<u8>, name: &str) -> io::Result<()> {
    let n = u32::try_from(name.len()).map_err(|_| invalid("name too long"))?;
    crate::wire::put_uleb(buf, u64::from(n));
    buf.extend_from_slice(name.as_bytes());
    Ok(())
}

/// Appends a trace context: `traceparent` and `tracestate`, each as a name.
pub fn put_trace(buf: &mut Vec<u8>, cx: &crate::trace::TraceContext) -> io::Result<()> {
    put_name(buf, &cx.traceparent)?;
    put_name(buf, &cx.tracestate)
}

/// Reads a trace context (see [`put_trace`]): two names of at most
/// [`crate::trace::MAX_VALUE`] bytes each. `None` when they are not a context worth
/// carrying (the call goes on without one); an error when the bytes are not two names.
pub fn read_trace(
    r: &mut impl Read,
    scratch: &mut Vec<u8>,
) -> io::Result<Option<crate::trace::TraceContext>> {
    let mut cx = crate::trace::TraceContext::default();
    for v in [&mut cx.traceparent, &mut cx.tracestate] {
        let n = read_len(r, crate::trace::MAX_VALUE)?;
        read_exact_into_blocking(r, scratch, n)?;
        v.clear();
        v.push_str(
            std::str::from_utf8(scratch).map_err(|_| invalid("a trace value is not UTF-8"))?,
        );
    }
    Ok(cx.is_carriable().then_some(cx))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn leb128_round_trips_and_rejects_overlong_and_out_of_range() {
        for v in [0u32, 1, 127, 128, 300, 16_383, 16_384, u32::MAX] {
            let mut b = Vec::new();
            crate::wire::put_uleb(&mut b, u64::from(v));
            assert_eq!(read_leb_u32(&mut &b[..]).await.unwrap(), v);
        }
        let bad: [&[u8]; 3] = [
            &[0xff, 0xff, 0xff, 0xff, 0x1f],
            &[0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
            &[0x80],
        ];
        for b in bad {
            assert!(read_leb_u32(&mut &b[..]).await.is_err(), "{b:?}");
        }
        let mut b = Vec::new();
        crate::wire::put_uleb(&mut b, 11);
        assert!(read_len(&mut &b[..], 10).is_err());
        for v in [0u32, 300, u32::MAX] {
            let mut b = Vec::new();
            crate::wire::put_uleb(&mut b, u64::from(v));
            assert_eq!(read_leb_u32_blocking(&mut &b[..]).unwrap(), v);
        }
        for b in bad {
            assert!(read_leb_u32_blocking(&mut &b[..]).is_err(), "{b:?}");
        }
    }

    #[test]
    fn a_trace_context_round_trips_and_is_bounded() {
        let cx = crate::trace::TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: "congo=t61rcWkgMzE".into(),
        };
        let mut b = Vec::new();
        put_trace(&mut b, &cx).unwrap();
        b.push(0xaa);
        let mut r = &b[..];
        let mut scratch = Vec::new();
        assert_eq!(read_trace(&mut r, &mut scratch).unwrap(), Some(cx));
        assert_eq!(r, [0xaa], "the request goes on after the context");
        // Too long: refused before it is read.
        let mut b = Vec::new();
        crate::wire::put_uleb(&mut b, (crate::trace::MAX_VALUE + 1) as u64);
        assert!(read_trace(&mut &b[..], &mut scratch).is_err());
        // A control character: read, and dropped.
        let mut b = Vec::new();
        put_name(&mut b, "00-x\n").unwrap();
        put_name(&mut b, "").unwrap();
        assert_eq!(read_trace(&mut &b[..], &mut scratch).unwrap(), None);
    }

    #[test]
    fn names_are_bounded_and_utf8() {
        let mut scratch = Vec::new();
        let mut s = String::new();
        let mut b = Vec::new();
        put_name(&mut b, "lrpc:bench/bench").unwrap();
        read_name(&mut &b[..], &mut scratch, &mut s).unwrap();
        assert_eq!(s, "lrpc:bench/bench");
        let mut b = Vec::new();
        crate::wire::put_uleb(&mut b, 2);
        b.extend_from_slice(&[0xc3, 0x28]);
        assert!(read_name(&mut &b[..], &mut scratch, &mut s).is_err());
        let mut b = Vec::new();
        crate::wire::put_uleb(&mut b, (MAX_NAME + 1) as u64);
        assert!(read_name(&mut &b[..], &mut scratch, &mut s).is_err());
    }
}
