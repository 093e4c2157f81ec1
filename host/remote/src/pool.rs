//! The kept connections of a remote binding (the client side of sessions, `session.rs`).
//!
//! A call takes an idle session connection if there is one, or opens one (connect, then the
//! opening invocation), makes its call on it and puts it back. At most `keep` connections are
//! kept idle, each for at most `keep_for`; the binding's in-flight bound limits how many are
//! open at once. Before a kept connection is used it is checked for a closed or reset peer
//! (a peer that restarted closed it), and a broken one is dropped and replaced by a fresh
//! one; a request that could not be written on a kept connection reached nobody and is sent
//! once more on a fresh connection. A peer that does not open sessions (a foreign wRPC
//! server) is called in plain wRPC, and asked again after [`REPROBE`].
//!
//! With TLS (`tls.rs`) a connection is a TLS connection: the handshake is made when it is
//! opened, and a kept session keeps it. A handshake that fails, or a peer that refuses our
//! certificate (its alert arrives with the first read), is a [`RemoteError::Tls`], never a
//! reason to fall back to plain wRPC.

use crate::endpoint::Endpoint;
use crate::error::RemoteError;
use crate::session::{
    self, ACCEPT, ACCEPT_2, FAILED, NOT_ALLOWED, REQUEST, RETURNED, SESSION_FUNC, SESSION_FUNC_2,
    SESSION_INSTANCE, Stream,
};
use crate::tls::ClientTls;
use crate::wire::CodecError;
use bytes::BytesMut;
use lrpc_lock::lock;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _, BufReader};

/// How long a peer that refused a session is called in plain wRPC before it is asked again.
pub(crate) const REPROBE: Duration = Duration::from_secs(30);

/// How long a connection may have been idle and still be reused without checking it.
const CHECK_AFTER: Duration = Duration::from_millis(1);

/// One kept connection.
struct Conn {
    io: BufReader<Stream>,
    /// The request being written (kept to reuse its allocation).
    req: Vec<u8>,
    /// How long the last call took, from its request written to its reply's first byte.
    last: Duration,
    /// The session protocol's version the peer answered (2: requests may carry a trace
    /// context).
    version: u8,
}

/// Why a session call did not return.
pub(crate) enum Fail {
    /// The peer does not open sessions: call it in plain wRPC.
    NotSession,
    /// The call failed.
    Call(RemoteError),
}

impl From<RemoteError> for Fail {
    fn from(e: RemoteError) -> Fail {
        Fail::Call(e)
    }
}

/// A binding's kept connections to one endpoint.
pub(crate) struct Pool {
    endpoint: Endpoint,
    keep: usize,
    keep_for: Duration,
    idle: Mutex<Vec<(Conn, Instant)>>,
    /// When the peer last refused a session.
    plain_since: Mutex<Option<Instant>>,
    /// When the peer last refused a version 2 session (it is an older server of this
    /// crate, asked again after [`REPROBE`]).
    v1_since: Mutex<Option<Instant>>,
    /// TLS to a `tcp:` endpoint.
    tls: Option<Arc<ClientTls>>,
}

fn peer_failed(e: &std::io::Error) -> RemoteError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        RemoteError::PeerFailed("the connection closed before the result".into())
    } else {
        RemoteError::PeerFailed(e.to_string())
    }
}

impl Pool {
    pub(crate) fn new(
        endpoint: Endpoint,
        keep: usize,
        keep_for: Duration,
        tls: Option<Arc<ClientTls>>,
    ) -> Pool {
        Pool {
            endpoint,
            keep,
            keep_for,
            idle: Mutex::new(Vec::new()),
            plain_since: Mutex::new(None),
            v1_since: Mutex::new(None),
            tls,
        }
    }

    /// Whether connections are made over TLS.
    pub(crate) fn tls(&self) -> bool {
        self.tls.is_some()
    }

    fn tls_failed(&self, e: &std::io::Error) -> RemoteError {
        RemoteError::Tls {
            addr: self.endpoint.to_string(),
            reason: e.to_string(),
        }
    }

    /// Whether the peer is called in plain wRPC for now.
    pub(crate) fn plain(&self) -> bool {
        lock(&self.plain_since).is_some_and(|t| t.elapsed() < REPROBE)
    }

    /// Connections kept idle now.
    pub(crate) fn idle(&self) -> usize {
        lock(&self.idle).len()
    }

    /// A fresh connection to the endpoint (its TLS handshake made).
    pub(crate) async fn connect(&self) -> Result<Stream, RemoteError> {
        let unreachable = |source| RemoteError::Unreachable {
            addr: self.endpoint.to_string(),
            source,
        };
        match &self.endpoint {
            Endpoint::Tcp(a) => {
                let s = tokio::net::TcpStream::connect(a.as_str())
                    .await
                    .map_err(unreachable)?;
                s.set_nodelay(true).map_err(unreachable)?;
                let Some(tls) = &self.tls else {
                    return Ok(Stream::Tcp(s));
                };
                let name = tls.server_name(a).map_err(|e| self.tls_failed(&e))?;
                let s = tls
                    .connector
                    .connect(name, s)
                    .await
                    .map_err(|e| self.tls_failed(&e))?;
                Ok(Stream::TlsClient(Box::new(s)))
            }
            Endpoint::Unix(p) => tokio::net::UnixStream::connect(p)
                .await
                .map(Stream::Unix)
                .map_err(unreachable),
            // Calls over NATS share the bus connection (see `nats`), never a pool's.
            Endpoint::Nats(_) => Err(RemoteError::PeerFailed(
                "a NATS endpoint has no connections of its own".into(),
            )),
        }
    }

    /// A fresh connection with a session open on it: version 2, or version 1 with a peer
    /// that does not open version 2 (see `session.rs`).
    async fn open(&self) -> Result<Conn, Fail> {
        let v1 = lock(&self.v1_since).is_some_and(|at| at.elapsed() < REPROBE);
        if !v1 {
            match self.open_version(SESSION_FUNC_2, ACCEPT_2, 2).await {
                Err(Fail::NotSession) => *lock(&self.v1_since) = Some(Instant::now()),
                opened => return opened,
            }
        }
        self.open_version(SESSION_FUNC, ACCEPT, 1).await
    }

    /// A fresh connection with a session opened by `func`, which the peer must answer with
    /// `accept`: the session protocol's `version`.
    async fn open_version(&self, func: &str, accept: [u8; 3], version: u8) -> Result<Conn, Fail> {
        let mut io = BufReader::new(self.connect().await?);
        let mut hello = BytesMut::new();
        wrpc_transport::frame::encode_invocation(&mut hello, SESSION_INSTANCE, func, 0)
            .map_err(|e| RemoteError::PeerFailed(e.to_string()))?;
        let written = async {
            io.get_mut().write_all(&hello).await?;
            io.get_mut().flush().await
        };
        written.await.map_err(|e| self.refused_or_failed(&e))?;
        let mut answer = [0u8; ACCEPT.len()];
        match io.read_exact(&mut answer).await {
            Ok(_) if answer == accept => Ok(Conn {
                io,
                req: Vec::new(),
                last: Duration::MAX,
                version,
            }),
            // A wRPC server without the session function closes the connection (or answers
            // something else): it is called in plain wRPC.
            Ok(_) => Err(Fail::NotSession),
            // A TLS peer's alert (our certificate refused) arrives here, after our side of
            // the handshake ended.
            Err(e) if self.tls() && e.kind() == std::io::ErrorKind::InvalidData => {
                Err(self.tls_failed(&e).into())
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::UnexpectedEof
                        | std::io::ErrorKind::ConnectionReset
                        | std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                Err(Fail::NotSession)
            }
            Err(e) => Err(peer_failed(&e).into()),
        }
    }

    /// A failed write: a TLS alert from the peer, or a failed call.
    fn refused_or_failed(&self, e: &std::io::Error) -> RemoteError {
        if self.tls() && e.kind() == std::io::ErrorKind::InvalidData {
            self.tls_failed(e)
        } else {
            peer_failed(e)
        }
    }

    /// A kept connection that still looks open, if any.
    fn take_kept(&self) -> Option<Conn> {
        loop {
            let (c, at) = lock(&self.idle).pop()?;
            let idle = at.elapsed();
            // A connection put back less than CHECK_AFTER ago is used without the check (a
            // system call): a peer restarting in between is not possible that fast.
            if idle < self.keep_for
                && c.io.buffer().is_empty()
                && (idle < CHECK_AFTER || c.io.get_ref().is_idle_and_open())
            {
                return Some(c);
            }
        }
    }

    fn put_back(&self, c: Conn) {
        let mut idle = lock(&self.idle);
        if idle.len() < self.keep {
            idle.push((c, Instant::now()));
        }
    }

    /// Calls `instance`/`func` with wire-encoded `params` on a session; the wire-encoded
    /// results.
    pub(crate) async fn call(
        &self,
        instance: &str,
        func: &str,
        params: &[u8],
        max_reply: usize,
        trace: Option<&crate::trace::TraceContext>,
    ) -> Result<Vec<u8>, Fail> {
        let len = u32::try_from(params.len())
            .map_err(|_| RemoteError::BadArguments(CodecError::TooLarge(params.len())))?;
        let mut kept = self.take_kept();
        loop {
            let reused = kept.is_some();
            let mut c = match kept.take() {
                Some(c) => c,
                None => match self.open().await {
                    Ok(c) => c,
                    Err(Fail::NotSession) => {
                        *lock(&self.plain_since) = Some(Instant::now());
                        return Err(Fail::NotSession);
                    }
                    Err(e) => return Err(e),
                },
            };
            let mut req = std::mem::take(&mut c.req);
            req.clear();
            let traced = match trace {
                Some(cx) if c.version >= 2 => {
                    req.push(session::TRACED_REQUEST);
                    session::put_trace(&mut req, cx)
                }
                _ => {
                    req.push(REQUEST);
                    Ok(())
                }
            };
            traced
                .and_then(|()| session::put_name(&mut req, instance))
                .and_then(|()| session::put_name(&mut req, func))
                .map_err(|e| RemoteError::PeerFailed(e.to_string()))?;
            crate::wire::put_uleb(&mut req, u64::from(len));
            req.extend_from_slice(params);
            let written = async {
                c.io.get_mut().write_all(&req).await?;
                c.io.get_mut().flush().await
            };
            if let Err(e) = written.await {
                if reused {
                    // Nothing of this request was taken by a server that is still there: it
                    // goes once more on a fresh connection.
                    continue;
                }
                return Err(peer_failed(&e).into());
            }
            c.req = req;
            let sent = Instant::now();
            if c.last < session::SPIN && c.io.buffer().is_empty() {
                // A peer that answered this fast last time: poll for the reply without
                // letting the thread sleep, yielding to the runtime's other tasks.
                while !session::readable_now(c.io.get_ref()) && sent.elapsed() < session::SPIN {
                    tokio::task::yield_now().await;
                }
            }
            let tag = c.io.read_u8().await.map_err(|e| peer_failed(&e))?;
            c.last = sent.elapsed();
            match tag {
                RETURNED => {
                    let mut results = Vec::new();
                    let n = session::read_leb_u32(&mut c.io)
                        .await
                        .map_err(|e| match e.kind() {
                            std::io::ErrorKind::InvalidData => {
                                RemoteError::BadReply(CodecError::Malformed("result length"))
                            }
                            _ => peer_failed(&e),
                        })?;
                    let n = usize::try_from(n)
                        .ok()
                        .filter(|&n| n <= max_reply)
                        .ok_or(RemoteError::BadReply(CodecError::TooLarge(max_reply)))?;
                    session::read_exact_into(&mut c.io, &mut results, n)
                        .await
                        .map_err(|e| peer_failed(&e))?;
                    self.put_back(c);
                    return Ok(results);
                }
                FAILED => {
                    self.put_back(c);
                    return Err(RemoteError::PeerFailed("the peer failed the call".into()).into());
                }
                NOT_ALLOWED => {
                    let mut scratch = Vec::new();
                    let n = session::read_leb_u32(&mut c.io)
                        .await
                        .ok()
                        .and_then(|n| usize::try_from(n).ok())
                        .filter(|&n| n <= session::MAX_NAME)
                        .ok_or(RemoteError::BadReply(CodecError::Malformed("export name")))?;
                    session::read_exact_into(&mut c.io, &mut scratch, n)
                        .await
                        .map_err(|e| peer_failed(&e))?;
                    let export = String::from_utf8(scratch)
                        .map_err(|_| RemoteError::BadReply(CodecError::Malformed("export name")))?;
                    self.put_back(c);
                    return Err(RemoteError::NotAllowed { export }.into());
                }
                _ => {
                    return Err(
                        RemoteError::BadReply(CodecError::Malformed("session reply tag")).into(),
                    );
                }
            }
        }
    }
}
