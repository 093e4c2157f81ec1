//! The edge server's driver: a client domain that carries one request through a chain of
//! plugin domains, and makes single calls for `lrpc run --call`.
//!
//! The host writes the request into [`input`]'s buffer already encoded as the arguments of
//! `lrpc:http/plugin#handle` (the head record, then the body as a byte list), binds each
//! slot of the chain to a plugin's export name with [`bind`], and calls [`chain`]. The driver
//! shuttles encoded bytes: it hands the arguments to each plugin over the binding's A-stack
//! (out-of-band segments for large bodies), reads only the discriminant of the plugin's
//! action and the framing of a changed head, and stops at the first plugin that answers.
//! Every value is decoded and validated by the plugins' own stubs and, at the end, by the
//! host; here the framing is checked before any length is used.
//!
//! Both versions of the interface share the encoding: a header value is a `u32` length then
//! its bytes, a `string` in `lrpc:http/plugin` and a `list<u8>` in `lrpc:http/plugin@0.2.0`.
//! So a chain may mix plugins of both versions and the driver passes the bytes between them
//! unchanged; each slot is bound with its own plugin's fingerprint, and a string plugin's
//! stub refuses a value that is not UTF-8.

use lrpc_sdk::rt::{self, Writer};
use lrpc_sdk::{Binding, CallError};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, Ordering};

/// Each plugin's reply is copied into a vector of its own, dropped at the next: the SDK's
/// size-class allocator serves them in a few instructions each.
#[global_allocator]
static ALLOC: lrpc_sdk::alloc::Pools = lrpc_sdk::alloc::Pools::new();

/// Status in [`chain`]'s answer: a plugin answered; the response is in the output buffer.
const RESPONDED: i32 = 0;
/// Status in [`chain`]'s answer: a plugin's action did not decode.
const MALFORMED: i32 = 254;
/// Status in [`chain`]'s answer: a plugin that takes no body rewrote it.
const REWROTE_NO_BODY: i32 = 253;
/// Status in [`chain`]'s answer: every plugin passed the request on and none answered.
const UNANSWERED: i32 = 255;
/// `lrpc:http/plugin#handle`: procedure 0, unbounded in and out.
const HANDLE: u32 = 0;

#[derive(Default)]
struct State {
    input: Vec<u8>,
    output: Part,
    slots: Vec<Option<Binding>>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::default();
}

/// A buffer of at least `len` bytes the host fills before [`bind`], [`call`] or [`chain`];
/// its address (0 when `len` is negative). The buffer only grows: it stays where it is until
/// a call asks for more than it holds, so the host may keep writing there meanwhile.
#[unsafe(no_mangle)]
pub extern "C" fn input(len: i32) -> i32 {
    let Ok(len) = usize::try_from(len) else {
        return 0;
    };
    STATE.with_borrow_mut(|s| {
        if s.input.len() < len {
            s.input.resize(len, 0);
        }
        s.input.as_mut_ptr() as i32
    })
}

/// Where the last answer ([`call`]'s result or [`chain`]'s response) lies: its address and
/// length, for the host to read after the call returns.
static MAILBOX: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];

/// The address of the mailbox (two little-endian `u32`s: the last answer's address and
/// length), fixed for the domain's life.
#[unsafe(no_mangle)]
pub extern "C" fn mailbox() -> i32 {
    MAILBOX.as_ptr() as i32
}

/// Makes `part` the last answer.
fn answer(output: &mut Part, part: Part) {
    *output = part;
    let b = output.bytes();
    MAILBOX[0].store(b.as_ptr() as u32, Ordering::Relaxed);
    MAILBOX[1].store(b.len() as u32, Ordering::Relaxed);
}

/// Binds `slot` to the interface exported under the name in the first `name_len` bytes of
/// the input buffer (fingerprint `fp`, `nprocs` procedures), dropping the slot's previous
/// binding. Returns 0 or the kernel's status.
#[unsafe(no_mangle)]
pub extern "C" fn bind(slot: i32, name_len: i32, fp: i64, nprocs: i32) -> i32 {
    let (Ok(slot), Ok(name_len), Ok(nprocs)) = (
        usize::try_from(slot),
        usize::try_from(name_len),
        usize::try_from(nprocs),
    ) else {
        return CallError::BadPointer.code();
    };
    if slot > 64 {
        return CallError::ResourceExhausted.code();
    }
    let name = STATE.with_borrow(|s| {
        s.input
            .get(..name_len)
            .and_then(|b| std::str::from_utf8(b).ok())
            .map(str::to_owned)
    });
    let Some(name) = name else {
        return CallError::BadPointer.code();
    };
    // Unbind the old binding before binding anew.
    STATE.with_borrow_mut(|s| {
        if s.slots.len() <= slot {
            s.slots.resize_with(slot + 1, || None);
        }
        s.slots[slot] = None;
    });
    match Binding::bind(&name, fp as u64, nprocs) {
        Ok(b) => {
            STATE.with_borrow_mut(|s| s.slots[slot] = Some(b));
            0
        }
        Err(e) => e.code(),
    }
}

/// Calls procedure `proc` of `slot`'s binding with the first `len` bytes of the input
/// buffer as the encoded arguments; the encoded result lands in the output buffer.
/// `bounded` and `out_bound` come from the procedure descriptor list. Returns 0 or the
/// kernel's status.
#[unsafe(no_mangle)]
pub extern "C" fn call(slot: i32, proc: i32, bounded: i32, out_bound: i32, len: i32) -> i32 {
    let (Ok(slot), Ok(proc), Ok(out_bound), Ok(len)) = (
        usize::try_from(slot),
        u32::try_from(proc),
        usize::try_from(out_bound),
        usize::try_from(len),
    ) else {
        return CallError::BadPointer.code();
    };
    STATE.with_borrow_mut(|s| {
        let State {
            input,
            output,
            slots,
        } = s;
        let Some(Some(b)) = slots.get(slot) else {
            return CallError::StaleBinding.code();
        };
        let Some(args) = input.get(..len) else {
            return CallError::BadPointer.code();
        };
        match invoke_raw(b, proc, bounded != 0, out_bound, args) {
            Ok(r) => {
                answer(output, Part::whole(r));
                0
            }
            Err(e) => e.code(),
        }
    })
}

/// Carries the request in the first `len` bytes of the input buffer through slots
/// `0..n`. The slots whose bit is set in `bodyless` (bit `slot`) take no body: they get an
/// empty one, and the body passes them untouched. Returns `(slot + 1) << 8 | status`:
/// status [`RESPONDED`] (the response is in the output buffer), a kernel status (the call
/// to that slot's plugin failed), [`MALFORMED`], [`REWROTE_NO_BODY`] (a plugin that takes
/// no body passed on a body) or [`UNANSWERED`] (the request as the last plugin passed it on,
/// encoded as `handle`'s arguments, is in the output buffer); a negative value when the
/// input itself is malformed.
#[unsafe(no_mangle)]
pub extern "C" fn chain(n: i32, len: i32, bodyless: i32) -> i32 {
    let (Ok(n), Ok(len)) = (usize::try_from(n), usize::try_from(len)) else {
        return -1;
    };
    STATE.with_borrow_mut(|s| {
        let State {
            input,
            output,
            slots,
        } = s;
        let Some(args) = input.get(..len) else {
            return -1;
        };
        let Some(head_len) = skip_head(args) else {
            return -2;
        };
        let (head, rest) = args.split_at(head_len);
        let Some(body) = byte_list(rest) else {
            return -3;
        };
        // Read from the input buffer until a plugin changes them.
        let mut head = Held::Input(head);
        let mut body = Held::Input(body);
        for slot in 0..n {
            let code = |status: i32| ((slot as i32 + 1) << 8) | status;
            let Some(Some(b)) = slots.get(slot) else {
                return code(CallError::StaleBinding.code());
            };
            let takes_body = slot >= 32 || bodyless & (1 << slot) == 0;
            let (h, bytes) = (head.bytes(), if takes_body { body.bytes() } else { &[] });
            let reply = rt::invoke_bytes(
                b,
                HANDLE,
                false,
                h.len() + 4 + bytes.len(),
                0,
                |w: &mut Writer| {
                    w.bytes(h);
                    w.list_u8(bytes);
                },
            );
            match reply.map(action) {
                Ok(Action::Continue(h)) => head = Held::Reply(h),
                // It got an empty body: an empty one back passes the body on untouched.
                Ok(Action::Rewrite(h, b)) if !takes_body => {
                    if !b.bytes().is_empty() {
                        return code(REWROTE_NO_BODY);
                    }
                    head = Held::Reply(Part::whole(h));
                }
                Ok(Action::Rewrite(h, b)) => {
                    head = Held::Reply(Part::whole(h));
                    body = Held::Reply(b);
                }
                Ok(Action::Respond(response)) => {
                    answer(output, response);
                    return code(RESPONDED);
                }
                Ok(Action::Malformed) => return code(MALFORMED),
                Err(e) => return code(e.code()),
            }
        }
        // The request as the plugins left it, for a handler the host runs after the chain.
        let (head, body) = (head.bytes(), body.bytes());
        let mut request = Vec::with_capacity(head.len() + 4 + body.len());
        request.extend_from_slice(head);
        request.extend_from_slice(&(body.len() as u32).to_le_bytes());
        request.extend_from_slice(body);
        answer(output, Part::whole(request));
        ((n as i32) << 8) | UNANSWERED
    })
}

/// The client half of a call whose arguments are already encoded; the result's encoded
/// bytes as they came back.
fn invoke_raw(
    b: &Binding,
    proc: u32,
    bounded: bool,
    out_bound: usize,
    args: &[u8],
) -> Result<Vec<u8>, CallError> {
    rt::invoke_bytes(b, proc, bounded, args.len(), out_bound, |w: &mut Writer| {
        w.bytes(args)
    })
}

/// Encoded bytes held in a buffer from an offset on: a part of a plugin's reply, kept where
/// the reply was copied to.
#[derive(Default)]
struct Part {
    buf: Vec<u8>,
    at: usize,
}

impl Part {
    /// All of `buf`.
    fn whole(buf: Vec<u8>) -> Part {
        Part { buf, at: 0 }
    }

    /// The bytes held.
    fn bytes(&self) -> &[u8] {
        self.buf.get(self.at..).unwrap_or_default()
    }
}

/// A part of the request: still in the input buffer, or from a plugin's reply.
enum Held<'a> {
    Input(&'a [u8]),
    Reply(Part),
}

impl Held<'_> {
    fn bytes(&self) -> &[u8] {
        match self {
            Held::Input(b) => b,
            Held::Reply(p) => p.bytes(),
        }
    }
}

/// A plugin's action, framing checked; its parts stay in the reply's buffer (one copy out of
/// shared memory), except a replaced head, which is small.
enum Action {
    /// Pass the request on with this encoded head.
    Continue(Part),
    /// Pass the request on with this encoded head and this body.
    Rewrite(Vec<u8>, Part),
    /// The encoded response.
    Respond(Part),
    /// The action's framing does not check.
    Malformed,
}

/// The action encoded in `reply`, framing checked.
fn action(reply: Vec<u8>) -> Action {
    let Some((&tag, payload)) = reply.split_first() else {
        return Action::Malformed;
    };
    match tag {
        0 if skip_head(payload) == Some(payload.len()) => {
            Action::Continue(Part { buf: reply, at: 1 })
        }
        1 => {
            let Some(h) = skip_head(payload) else {
                return Action::Malformed;
            };
            if byte_list(&payload[h..]).is_none() {
                return Action::Malformed;
            }
            let head = payload[..h].to_vec();
            // The tag, the head, the body's length: the body follows.
            Action::Rewrite(
                head,
                Part {
                    buf: reply,
                    at: 1 + h + 4,
                },
            )
        }
        2 => Action::Respond(Part { buf: reply, at: 1 }),
        _ => Action::Malformed,
    }
}

/// A cursor over encoded bytes that checks every length before using it.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn skip(&mut self, n: usize) -> Option<()> {
        let end = self.pos.checked_add(n)?;
        (end <= self.buf.len()).then(|| self.pos = end)
    }

    fn u32(&mut self) -> Option<usize> {
        let b = self.buf.get(self.pos..self.pos.checked_add(4)?)?;
        self.pos += 4;
        usize::try_from(u32::from_le_bytes(b.try_into().ok()?)).ok()
    }

    fn string(&mut self) -> Option<()> {
        let n = self.u32()?;
        self.skip(n)
    }
}

/// The length of the encoded head at the start of `buf` (method, path, headers), framing
/// checked; `None` when it does not fit.
fn skip_head(buf: &[u8]) -> Option<usize> {
    let mut c = Cursor { buf, pos: 0 };
    c.string()?;
    c.string()?;
    let headers = c.u32()?;
    for _ in 0..headers {
        c.string()?;
        c.string()?;
    }
    Some(c.pos)
}

/// The bytes of an encoded byte list that fills `buf` exactly.
fn byte_list(buf: &[u8]) -> Option<&[u8]> {
    let (len, bytes) = buf.split_at_checked(4)?;
    let n = usize::try_from(u32::from_le_bytes(len.try_into().ok()?)).ok()?;
    (bytes.len() == n).then_some(bytes)
}
