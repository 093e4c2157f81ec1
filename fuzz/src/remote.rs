//! What arrives from the network at `lrpc-remote`: values in the wire encoding (`wire.rs`,
//! read off a stream by `values::read_values`, as the TCP, Unix and NATS servers and the
//! clients do), and the framing of sessions (`session.rs`: requests as the server's session
//! thread reads them, replies as a binding's session reads them). wRPC's own framing (the
//! invocation header, `wrpc-transport`) is not ours and not fuzzed here.
//!
//! An input is four bytes of header, `[op, sel, limit, chunk]`, then the payload:
//!
//! * op 0, **wire → A-stack**: the payload as wire values of the parameter types (even
//!   `sel`) or result types (odd) of procedure `sel / 2` of the project's interfaces, through
//!   [`check_wire`];
//! * op 1, **A-stack → wire**: the payload as an A-stack encoding of the same types, through
//!   [`check_astack`];
//! * op 2, **session requests**: the payload as what a client sends on a session, read like
//!   the server's session thread does, through [`check_session_requests`];
//! * op 3, **a session reply**: the payload as the server's answer to a call of the selected
//!   procedure, read like a binding's session does, through [`check_session_reply`].
//!
//! `limit` is the size limit (`max_request`, `max_reply`): below 0x80 a limit no input
//! reaches, else `(limit - 0x80) × 8` bytes. `chunk` sizes the pieces a stream delivers.

use crate::alloc::counted;
use lrpc_presentation::{InterfacePlan, Prim, Ty, Wit};
use lrpc_remote::session::{self, Leb, MAX_NAME};
use lrpc_remote::values::{param_types, read_values, result_types};
use lrpc_remote::wire::{CodecError, from_wire, from_wire_whole, to_wire, to_wire_prefix};
use std::io::{ErrorKind, Read as _};
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll, Waker};
use tokio::io::{AsyncRead, ReadBuf};

/// A limit no input reaches (inputs are at most [`MAX_INPUT`] bytes).
pub const BIG: usize = 1 << 20;
/// The longest payload looked at: longer ones are skipped, to keep the target fast.
pub const MAX_INPUT: usize = 8 << 10;

/// A session request's first byte (see `lrpc_remote::session`'s protocol).
const REQUEST: u8 = 0x01;
/// A session reply's first byte when the call returned.
const RETURNED: u8 = 0x00;

/// The plans of the project's interfaces (`EMBEDDED_WIT` and the kitchen sink), in the order
/// of their names, and their procedures in declaration order.
pub struct Rig {
    plans: Vec<InterfacePlan>,
    procs: Vec<(usize, usize)>,
}

impl Rig {
    /// Plans every interface of [`crate::project_wit`].
    pub fn new() -> Rig {
        let wit = Wit::load_sources(&crate::project_wit()).expect("the project's WIT loads");
        let mut names = wit.interface_names();
        names.sort();
        let plans: Vec<InterfacePlan> = names
            .iter()
            .map(|n| wit.interface(n).expect("the project's interfaces plan"))
            .collect();
        let procs = plans
            .iter()
            .enumerate()
            .flat_map(|(i, p)| (0..p.procs.len()).map(move |k| (i, k)))
            .collect();
        Rig { plans, procs }
    }

    /// The rig, planned once per process.
    pub fn get() -> &'static Rig {
        static RIG: OnceLock<Rig> = OnceLock::new();
        RIG.get_or_init(Rig::new)
    }

    /// The plan and procedure `sel / 2` (modulo their number), and whether `sel` selects
    /// its results (odd) rather than its parameters.
    fn select(&self, sel: u8) -> (&InterfacePlan, usize, bool) {
        let (i, k) = self.procs[usize::from(sel / 2) % self.procs.len()];
        (&self.plans[i], k, sel % 2 == 1)
    }

    /// The procedure a session request names, as the server looks it up.
    fn by_name(&self, instance: &str, func: &str) -> Option<(&InterfacePlan, usize)> {
        let plan = self.plans.iter().find(|p| p.name == instance)?;
        let proc = plan.procs.iter().position(|p| p.name == func)?;
        Some((plan, proc))
    }
}

impl Default for Rig {
    fn default() -> Rig {
        Rig::new()
    }
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    let Some((&[op, sel, limit, chunk], payload)) = data.split_first_chunk::<4>() else {
        return;
    };
    if payload.len() > MAX_INPUT {
        return;
    }
    let rig = Rig::get();
    let limit = match limit {
        0..0x80 => BIG,
        n => usize::from(n - 0x80) * 8,
    };
    // At most 16 reads per stream: each read parses the buffer again from its start.
    let chunk = (usize::from(chunk) + 1).max(payload.len().div_ceil(16));
    let (plan, proc, results) = rig.select(sel);
    let tys = if results {
        result_types(plan, proc)
    } else {
        param_types(plan, proc)
    }
    .expect("a procedure of the plan");
    match op % 4 {
        0 => check_wire(plan, &tys, payload, limit, chunk),
        1 => check_astack(plan, &tys, payload, chunk),
        2 => check_session_requests(rig, payload, limit, chunk),
        _ => {
            let rtys = result_types(plan, proc).expect("a procedure of the plan");
            check_session_reply(plan, &rtys, payload, limit, chunk);
        }
    }
}

/// Polls a future that never waits (it reads bytes in memory) to its end.
fn ready<F: Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a read of bytes in memory waited"),
    }
}

/// A stream of `data` delivered at most `chunk` bytes per read, as a connection or NATS
/// messages deliver them.
struct Chunked<'a> {
    data: &'a [u8],
    chunk: usize,
}

impl AsyncRead for Chunked<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let n = self.data.len().min(self.chunk).min(out.remaining());
        let (head, rest) = self.data.split_at(n);
        out.put_slice(head);
        self.data = rest;
        Poll::Ready(Ok(()))
    }
}

/// Prefix lengths below `used` worth trying: all of them for short values, else a sample.
fn prefixes(used: usize) -> Vec<usize> {
    if used <= 32 {
        (0..used).collect()
    } else {
        vec![0, 1, used / 4, used / 2, used - 2, used - 1]
    }
}

/// Checks the translation of wire bytes `w` of types `tys` into the A-stack encoding with
/// size limit `limit`:
///
/// * no panic, and an allocation in proportion to `w` (never to a length `w` announces);
/// * a buffer that a stream reader keeps filling is decided (a value or an error, never
///   [`CodecError::Incomplete`]) by twice the limit: the reader's memory is bounded;
/// * what is decided stays decided whatever bytes follow, and every shorter prefix of an
///   accepted value is incomplete (so a reader may try after every read);
/// * an accepted value's A-stack encoding fits the limit and translates back
///   ([`to_wire`]) into the canonical wire encoding (shortest LEB128), no longer than the
///   input, which gives the same A-stack bytes again; trailing A-stack bytes are refused by
///   [`to_wire`] and ignored by [`to_wire_prefix`];
/// * [`from_wire_whole`] is [`from_wire`] refusing trailing bytes;
/// * `read_values` on `w` delivered in pieces of `chunk` bytes gives what [`from_wire`]
///   gives on all of it, and the end of the stream when it is incomplete.
pub fn check_wire(plan: &InterfacePlan, tys: &[&Ty], w: &[u8], limit: usize, chunk: usize) {
    let (r, asked) = counted(|| from_wire(plan, tys, w, limit));
    assert!(
        asked <= 64 * w.len() + 4096,
        "{asked} bytes allocated to translate {} wire bytes",
        w.len()
    );
    let reach = limit.saturating_mul(2).saturating_add(16);
    match &r {
        Ok((a, used)) => {
            let used = *used;
            assert!(
                used <= w.len() && used <= reach,
                "used {used} of {}",
                w.len()
            );
            assert!(a.len() <= limit, "{} A-stack bytes, limit {limit}", a.len());
            for k in prefixes(used) {
                assert_eq!(
                    from_wire(plan, tys, &w[..k], limit),
                    Err(CodecError::Incomplete),
                    "the prefix of {k} bytes of a value of {used}"
                );
            }
            let whole = if used == w.len() {
                Ok(a.clone())
            } else {
                Err(CodecError::Trailing(w.len() - used))
            };
            assert_eq!(from_wire_whole(plan, tys, w, limit), whole);
            let canon = to_wire(plan, tys, a).unwrap_or_else(|e| {
                panic!("from_wire wrote an A-stack encoding that to_wire refuses: {e}: {a:?}")
            });
            assert!(
                canon.len() <= used,
                "canonical {canon:?} longer than accepted {:?}",
                &w[..used]
            );
            assert_eq!(
                from_wire(plan, tys, &canon, limit),
                Ok((a.clone(), canon.len())),
                "the canonical encoding {canon:?} of {:?}",
                &w[..used]
            );
            let mut longer = a.clone();
            longer.extend_from_slice(&[0xa5; 3]);
            assert_eq!(to_wire_prefix(plan, tys, &longer), Ok(canon));
            assert_eq!(to_wire(plan, tys, &longer), Err(CodecError::Trailing(3)));
        }
        Err(CodecError::Incomplete) => assert!(
            w.len() < reach,
            "still incomplete after {} bytes with a limit of {limit}",
            w.len()
        ),
        Err(CodecError::Trailing(_)) => panic!("from_wire refused trailing bytes"),
        Err(_) => {}
    }
    if r != Err(CodecError::Incomplete) {
        let mut more = w.to_vec();
        more.extend_from_slice(&[0xff, 0x00, 0x80]);
        assert_eq!(
            from_wire(plan, tys, &more, limit),
            r,
            "decided, then changed by more bytes"
        );
    }
    let streamed = ready(read_values(
        plan,
        tys,
        &mut Chunked { data: w, chunk },
        limit,
    ));
    match (&r, streamed) {
        (Ok((a, _)), Ok(Ok(v))) => assert_eq!(&v, a),
        (Err(CodecError::Incomplete), Err(e)) => assert_eq!(e.kind(), ErrorKind::UnexpectedEof),
        (Err(e), Ok(Err(s))) => assert_eq!(e, &s),
        (r, s) => panic!("from_wire gave {r:?}, read_values in pieces of {chunk} gave {s:?}"),
    }
}

/// Checks the translation of A-stack bytes `a` (what a domain wrote, untrusted) of types
/// `tys` into the wire encoding: [`to_wire_prefix`] and [`to_wire`] agree (the latter
/// refusing exactly the bytes after the values); what they write translates back into the
/// A-stack bytes they read, and passes [`check_wire`].
pub fn check_astack(plan: &InterfacePlan, tys: &[&Ty], a: &[u8], chunk: usize) {
    match to_wire_prefix(plan, tys, a) {
        Ok(w) => {
            let (back, used) = from_wire(plan, tys, &w, BIG)
                .unwrap_or_else(|e| panic!("to_wire wrote {w:?}, which from_wire refuses: {e}"));
            assert_eq!(used, w.len());
            assert!(a.starts_with(&back), "{a:?} came back as {back:?}");
            assert_eq!(to_wire(plan, tys, &back).as_ref(), Ok(&w));
            let whole = if back.len() == a.len() {
                Ok(w.clone())
            } else {
                Err(CodecError::Trailing(a.len() - back.len()))
            };
            assert_eq!(to_wire(plan, tys, a), whole);
            check_wire(plan, tys, &w, BIG, chunk);
        }
        Err(e) => assert_eq!(to_wire(plan, tys, a), Err(e)),
    }
}

/// One session request read as the server's session thread reads it: its instance and
/// function names and its parameters, or `None` when the session ends there.
fn read_request(
    rx: &mut &[u8],
    max_request: usize,
    scratch: &mut Vec<u8>,
) -> Option<(String, String, Vec<u8>)> {
    let mut tag = [0u8];
    if rx.read_exact(&mut tag).is_err() || tag[0] != REQUEST {
        return None;
    }
    let (mut instance, mut func, mut params) = (String::new(), String::new(), Vec::new());
    session::read_name(rx, scratch, &mut instance).ok()?;
    session::read_name(rx, scratch, &mut func).ok()?;
    let n = session::read_len(rx, max_request).ok()?;
    session::read_exact_into_blocking(rx, &mut params, n).ok()?;
    Some((instance, func, params))
}

/// Appends `v` in unsigned LEB128 (written here independently of the crate's encoder).
fn put_leb(out: &mut Vec<u8>, mut v: u32) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Checks what a client sends on a session, read request after request until the session
/// would end: names at most `MAX_NAME` bytes of UTF-8, parameters at most `max_request`
/// bytes, memory in proportion to the bytes read; the client's encoding of each request
/// (`session::put_name`) reads back the same; and the parameters of a request naming one of
/// the project's procedures go through [`check_wire`] as the server translates them.
pub fn check_session_requests(rig: &Rig, stream: &[u8], max_request: usize, chunk: usize) {
    let mut rx = stream;
    let mut scratch = Vec::new();
    loop {
        let before = rx.len();
        let (req, asked) = counted(|| read_request(&mut rx, max_request, &mut scratch));
        let took = before - rx.len();
        assert!(
            asked <= 4 * took + 4096,
            "{asked} bytes allocated to read {took} bytes of a request"
        );
        let Some((instance, func, params)) = req else {
            return;
        };
        assert!(instance.len() <= MAX_NAME && func.len() <= MAX_NAME);
        assert!(params.len() <= max_request);
        let mut again = vec![REQUEST];
        session::put_name(&mut again, &instance).expect("a short name");
        session::put_name(&mut again, &func).expect("a short name");
        put_leb(
            &mut again,
            u32::try_from(params.len()).expect("a short request"),
        );
        again.extend_from_slice(&params);
        let mut re = &again[..];
        assert_eq!(
            read_request(&mut re, max_request, &mut scratch),
            Some((instance.clone(), func.clone(), params.clone())),
            "the client's encoding of a request read back"
        );
        assert!(re.is_empty());
        if let Some((plan, proc)) = rig.by_name(&instance, &func) {
            let tys = param_types(plan, proc).expect("a procedure of the plan");
            check_wire(plan, &tys, &params, max_request, chunk);
        }
    }
}

/// Checks a session's reply to a call of a procedure with results `tys`, read as a
/// binding's session reads it: the tag, the length (at most `max_reply`), then exactly that
/// many bytes, read into memory that grows with the bytes that arrive rather than with the
/// length announced; the results go through [`check_wire`]. The length's LEB128 decoders
/// (byte by byte, blocking, async) agree with each other and with the wire's `u32`.
pub fn check_session_reply(
    plan: &InterfacePlan,
    tys: &[&Ty],
    stream: &[u8],
    max_reply: usize,
    chunk: usize,
) {
    let Some((&tag, after)) = stream.split_first() else {
        return;
    };
    check_leb(plan, after);
    if tag != RETURNED {
        // The call failed, or the session is broken: nothing more is read.
        return;
    }
    let mut rx = after;
    let Ok(n) = ready(session::read_leb_u32(&mut rx)) else {
        return;
    };
    let Some(n) = usize::try_from(n).ok().filter(|&n| n <= max_reply) else {
        return;
    };
    let there = rx.len();
    let mut results = Vec::new();
    let (r, asked) = counted(|| ready(session::read_exact_into(&mut rx, &mut results, n)));
    assert!(
        asked <= 4 * there.min(n) + 4096,
        "{asked} bytes allocated to read {} bytes (announced {n})",
        there.min(n)
    );
    match r {
        Ok(()) => assert_eq!(results, after[after.len() - there..][..n]),
        Err(e) => {
            assert!(there < n, "{there} bytes there, {n} announced: {e}");
            return;
        }
    }
    check_wire(plan, tys, &results, max_reply, chunk);
}

/// How a LEB128 `u32` decoder ended on some bytes.
#[derive(Debug, PartialEq, Eq)]
enum LebEnd {
    /// A number, and the bytes it took.
    Number(u32, usize),
    /// Not a `u32`.
    Malformed,
    /// The bytes end inside the number.
    Short,
}

fn leb_end(r: std::io::Result<u32>, rest: &[u8], all: &[u8]) -> LebEnd {
    match r {
        Ok(v) => LebEnd::Number(v, all.len() - rest.len()),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => LebEnd::Short,
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidData, "{e}");
            LebEnd::Malformed
        }
    }
}

/// The session's LEB128 decoders and the wire's agree on the first bytes of `b`.
fn check_leb(plan: &InterfacePlan, b: &[u8]) {
    let b = &b[..b.len().min(8)];
    let mut leb = Leb::default();
    let mut by_byte = LebEnd::Short;
    for (i, &x) in b.iter().enumerate() {
        match leb.push(x) {
            Ok(None) => {}
            Ok(Some(v)) => {
                by_byte = LebEnd::Number(v, i + 1);
                break;
            }
            Err(_) => {
                by_byte = LebEnd::Malformed;
                break;
            }
        }
    }
    let mut rest = b;
    let blocking = session::read_leb_u32_blocking(&mut rest);
    assert_eq!(leb_end(blocking, rest, b), by_byte, "blocking, {b:?}");
    let mut rest = b;
    let r = ready(session::read_leb_u32(&mut rest));
    assert_eq!(leb_end(r, rest, b), by_byte, "async, {b:?}");
    let u32_ty = Ty::Prim(Prim::U32);
    let wire = from_wire(plan, &[&u32_ty], b, BIG);
    match by_byte {
        LebEnd::Number(v, n) => assert_eq!(wire, Ok((v.to_le_bytes().to_vec(), n)), "{b:?}"),
        // The wire's decoder reads the byte after a fifth one with its continuation bit set
        // before it refuses the number.
        LebEnd::Malformed => assert!(
            matches!(wire, Err(CodecError::Malformed(_) | CodecError::Incomplete)),
            "{b:?}: {wire:?}"
        ),
        LebEnd::Short => assert_eq!(wire, Err(CodecError::Incomplete), "{b:?}"),
    }
}
