//! The runtime generated stubs call into: encoding onto A-stacks, decoding from private
//! copies, and the client and server halves of a call.
//!
//! Encoding (both directions; see `lrpc_abi::header`): packed little endian, no padding.
//! Unbounded procedures carry an 8-byte header (flags, length) before an inline payload, or
//! put the payload in the out-of-band segment of that direction.

use crate::bulk::zero_bytes;
pub use crate::bulk::{COPY_ALIGN, copy_bytes};
use crate::{Binding, CallError, sys};
use core::cell::RefCell;
use core::marker::PhantomData;
use lrpc_abi::header;

/// A request or reply that does not decode: truncated, a bad tag, bad UTF-8, trailing bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeError;

/// Writes an encoding into memory at a raw address, never past its capacity.
pub struct Writer {
    ptr: *mut u8,
    cap: usize,
    pos: usize,
}

impl Writer {
    /// A writer of at most `cap` bytes at `ptr`.
    ///
    /// # Safety
    /// `[ptr, ptr + cap)` must be writable memory of this domain for the writer's lifetime
    /// (an A-stack, an out-of-band segment or an owned buffer).
    #[inline]
    pub unsafe fn new(ptr: *mut u8, cap: usize) -> Writer {
        Writer { ptr, cap, pos: 0 }
    }

    /// Bytes written (or attempted: more than `cap` means the encoding did not fit).
    pub fn len(&self) -> usize {
        self.pos
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.pos == 0
    }

    /// Whether everything written fit.
    pub fn fits(&self) -> bool {
        self.pos <= self.cap
    }

    /// Appends raw bytes (up to 16 as a few moves: a request's strings are mostly short, and
    /// a bulk copy is an engine call).
    #[inline]
    pub fn bytes(&mut self, b: &[u8]) {
        let end = self.pos.saturating_add(b.len());
        if end <= self.cap {
            // SAFETY: `[pos, end)` lies inside the `cap` bytes the constructor's caller vouched
            // for; `b` is private memory, so the ranges do not overlap.
            unsafe { crate::bulk::copy_short(b.as_ptr(), self.ptr.add(self.pos), b.len()) };
        }
        self.pos = end;
    }

    /// Appends a `u8`.
    #[inline]
    pub fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    /// Appends a `u16`.
    #[inline]
    pub fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    /// Appends a `u32`.
    #[inline]
    pub fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    /// Appends a `u64`.
    #[inline]
    pub fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
    /// Appends an `f32`.
    #[inline]
    pub fn f32(&mut self, v: f32) {
        self.bytes(&v.to_le_bytes());
    }
    /// Appends an `f64`.
    #[inline]
    pub fn f64(&mut self, v: f64) {
        self.bytes(&v.to_le_bytes());
    }
    /// Appends a `bool` as one byte.
    #[inline]
    pub fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }
    /// Appends a `char` as its `u32` code point.
    #[inline]
    pub fn char(&mut self, v: char) {
        self.u32(u32::from(v));
    }
    /// Appends a length prefix.
    #[inline]
    pub fn len_prefix(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    /// Appends a string: length then UTF-8 bytes.
    #[inline]
    pub fn str(&mut self, s: &str) {
        self.len_prefix(s.len());
        self.bytes(s.as_bytes());
    }
    /// Appends a byte list: length then bytes.
    #[inline]
    pub fn list_u8(&mut self, b: &[u8]) {
        self.len_prefix(b.len());
        self.bytes(b);
    }
}

/// Reads an encoding from a private buffer (or, where [`serve`] lets it, from shared memory:
/// see [`Reader::list_u8_arg`]).
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Split mode: `buf` is shared memory the peer may still write, and every byte handed
    /// out is first copied into private memory here, except the byte-list parameters in
    /// `views`.
    private: Option<Private<'a>>,
    /// Byte-list parameters (bit `k` for parameter `k`) read in place in split mode.
    views: u32,
}

/// The private memory a split-mode reader copies into: `cap` bytes at `at`, of which the
/// first `used` hold copies already handed out (never written again).
struct Private<'a> {
    at: *mut u8,
    cap: usize,
    used: usize,
    _memory: core::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> Private<'a> {
    /// Copies `b` (shared memory) into the next free bytes and returns the copy.
    #[inline]
    fn keep(&mut self, b: &[u8]) -> Result<&'a [u8], DecodeError> {
        let end = self
            .used
            .checked_add(b.len())
            .filter(|&end| end <= self.cap)
            .ok_or(DecodeError)?;
        // SAFETY: `[at, at + cap)` is private memory writable for `'a` that nothing else uses
        // meanwhile (`Reader::split`'s contract); `[used, end)` lies inside it and was never
        // handed out, so no reference to it exists; `b` is shared memory, so the ranges do
        // not overlap. After the copy those bytes are initialized, and they are never written
        // again (`used` only grows).
        unsafe {
            let dst = self.at.add(self.used);
            copy_in(b.as_ptr(), dst, b.len());
            self.used = end;
            Ok(core::slice::from_raw_parts(dst, b.len()))
        }
    }
}

macro_rules! read_int {
    ($($name:ident: $t:ty),*) => {$(
        #[doc = concat!("Reads a `", stringify!($t), "`.")]
        #[inline]
        pub fn $name(&mut self) -> Result<$t, DecodeError> {
            // Read once into a value: no private copy needed even in split mode.
            let b = self.step(core::mem::size_of::<$t>())?;
            Ok(<$t>::from_le_bytes(b.try_into().map_err(|_| DecodeError)?))
        }
    )*};
}

impl<'a> Reader<'a> {
    /// A reader over `buf`.
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader {
            buf,
            pos: 0,
            private: None,
            views: 0,
        }
    }

    /// A split-mode reader over `shared`, a request the peer may still write: what it hands
    /// out is copied into the `cap` private bytes at `at` first (each byte of `shared` at
    /// most once, so `cap >= shared.len()` always suffices), except the byte-list parameters
    /// in `views`, which are views of `shared`. Every length is read once, and the views'
    /// bounds are checked against `shared`.
    ///
    /// # Safety
    /// `[at, at + cap)` must be private memory, writable for `'a` and not otherwise used
    /// meanwhile.
    unsafe fn split(shared: &'a [u8], at: *mut u8, cap: usize, views: u32) -> Reader<'a> {
        Reader {
            buf: shared,
            pos: 0,
            private: Some(Private {
                at,
                cap,
                used: 0,
                _memory: core::marker::PhantomData,
            }),
            views,
        }
    }

    /// Bytes copied into private memory so far (split mode; 0 otherwise).
    fn copied(&self) -> usize {
        self.private.as_ref().map_or(0, |p| p.used)
    }

    /// Steps over the next `n` bytes, returning them where they are.
    #[inline]
    fn step(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError)?;
        let b = self.buf.get(self.pos..end).ok_or(DecodeError)?;
        self.pos = end;
        Ok(b)
    }

    /// Takes the next `n` bytes (a private copy of them in split mode).
    #[inline]
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let b = self.step(n)?;
        match &mut self.private {
            None => Ok(b),
            Some(p) => p.keep(b),
        }
    }

    read_int!(u8: u8, u16: u16, u32: u32, u64: u64, s8: i8, s16: i16, s32: i32, s64: i64, f32: f32, f64: f64);

    /// Reads a `bool` (0 or 1; anything else is refused).
    #[inline]
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError),
        }
    }

    /// Reads a `char` (a Unicode scalar value).
    #[inline]
    pub fn char(&mut self) -> Result<char, DecodeError> {
        char::from_u32(self.u32()?).ok_or(DecodeError)
    }

    /// Reads a list length whose elements take at least `min_elem` bytes each, refusing
    /// lengths the remaining bytes can not hold (so a hostile length allocates nothing).
    #[inline]
    pub fn count(&mut self, min_elem: usize) -> Result<usize, DecodeError> {
        let n = self.u32()? as usize;
        let left = self.buf.len() - self.pos;
        let ok = if min_elem == 0 {
            n <= 1 << 16
        } else {
            n.checked_mul(min_elem).is_some_and(|b| b <= left)
        };
        if ok { Ok(n) } else { Err(DecodeError) }
    }

    /// Reads a byte list, borrowed from the private buffer.
    #[inline(always)]
    pub fn list_u8(&mut self) -> Result<&'a [u8], DecodeError> {
        // One bounds check for the length, one for the bytes (the length is read once, also
        // from shared memory).
        let rest = self.buf.get(self.pos..).ok_or(DecodeError)?;
        let (len, rest) = rest.split_first_chunk::<4>().ok_or(DecodeError)?;
        let n = u32::from_le_bytes(*len) as usize;
        let b = rest.get(..n).ok_or(DecodeError)?;
        self.pos += 4 + n;
        match &mut self.private {
            None => Ok(b),
            Some(p) => p.keep(b),
        }
    }

    /// Reads byte-list parameter `k` of a request: in place when [`serve`] may lend it (the
    /// binding lets the server borrow it), as [`Reader::list_u8`] otherwise.
    #[inline]
    pub fn list_u8_arg(&mut self, k: u32) -> Result<&'a [u8], DecodeError> {
        if k < 32 && self.views & (1 << k) != 0 {
            let n = self.u32()? as usize;
            return self.step(n);
        }
        self.list_u8()
    }

    /// Takes every byte left (a private copy of them in split mode).
    #[inline]
    pub fn rest(&mut self) -> Result<&'a [u8], DecodeError> {
        self.take(self.buf.len() - self.pos)
    }

    /// Reads a string, validated as UTF-8, borrowed from the private buffer. Inlined into
    /// the generated decoders: a request holds many short strings.
    #[inline(always)]
    pub fn str(&mut self) -> Result<&'a str, DecodeError> {
        utf8(self.list_u8()?)
    }

    /// Reads an enum or variant discriminant of a type with `cases` cases.
    #[inline]
    pub fn discriminant(&mut self, cases: usize) -> Result<usize, DecodeError> {
        let d = if cases <= 1 << 8 {
            usize::from(self.u8()?)
        } else if cases <= 1 << 16 {
            usize::from(self.u16()?)
        } else {
            self.u32()? as usize
        };
        if d < cases { Ok(d) } else { Err(DecodeError) }
    }

    /// Runs `skip` (which steps over one encoded value) and returns the bytes it stepped over.
    pub fn raw(
        &mut self,
        skip: impl FnOnce(&mut Reader<'a>) -> Result<(), DecodeError>,
    ) -> Result<&'a [u8], DecodeError> {
        let start = self.pos;
        // In split mode the bytes stepped over are copied once, as a whole, below.
        let private = self.private.take();
        let stepped = skip(self);
        self.private = private;
        stepped?;
        let b = self.buf.get(start..self.pos).ok_or(DecodeError)?;
        match &mut self.private {
            None => Ok(b),
            Some(p) => p.keep(b),
        }
    }

    /// Fails unless every byte was consumed.
    #[inline]
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(DecodeError)
        }
    }
}

/// A parameter the client marshals with its own routine (`special` in its presentation):
/// `encode` must write exactly `size` bytes of the parameter's standard encoding (see the
/// module docs), since the server's stubs may be ordinary ones.
pub trait Marshal {
    /// Encoded size in bytes.
    fn size(&self) -> usize;
    /// Writes the encoding.
    fn encode(&self, w: &mut Writer);
}

/// A parameter the server unmarshals with its own routine (`special` in its presentation):
/// its encoded bytes, framing already checked (lengths, tags), contents not yet validated.
#[derive(Clone, Copy, Debug)]
pub struct Raw<'a>(&'a [u8]);

impl<'a> Raw<'a> {
    /// Wraps encoded bytes.
    pub fn new(bytes: &'a [u8]) -> Raw<'a> {
        Raw(bytes)
    }
    /// The encoded bytes.
    pub fn bytes(&self) -> &'a [u8] {
        self.0
    }
    /// A reader over the encoded bytes.
    pub fn reader(&self) -> Reader<'a> {
        Reader::new(self.0)
    }
}

/// Writes a discriminant for a type with `cases` cases.
#[inline]
pub fn write_discriminant(w: &mut Writer, cases: usize, d: usize) {
    if cases <= 1 << 8 {
        w.u8(d as u8)
    } else if cases <= 1 << 16 {
        w.u16(d as u16)
    } else {
        w.u32(d as u32)
    }
}

/// Bytes of a discriminant for a type with `cases` cases.
pub const fn discriminant_size(cases: usize) -> usize {
    if cases <= 1 << 8 {
        1
    } else if cases <= 1 << 16 {
        2
    } else {
        4
    }
}

thread_local! {
    /// Private buffers for copies of requests and replies, reused across calls (a stack:
    /// nested calls each take their own).
    static SCRATCH: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static COUNTS: core::cell::Cell<Counts> = const { core::cell::Cell::new(Counts::ZERO) };
}

/// How often this domain's stubs copied argument and result data (LRPC Table III's copy
/// operations, counted where they happen).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `in` data copied: arguments onto the A-stack (client), A-stack into private memory
    /// (server, when it may not borrow everything: with byte lists lent beside strings, the
    /// rest of the request is copied, once per call).
    pub in_copies: u64,
    /// `out` data copied: results onto the A-stack (server), A-stack into the caller's
    /// memory (client).
    pub out_copies: u64,
    /// Bytes of `in` data those copies moved (client: the encoded arguments; server: what it
    /// copied into private memory, which is only the rest of the request when it borrows a
    /// byte-list parameter beside strings).
    pub in_bytes: u64,
}

impl Counts {
    const ZERO: Counts = Counts {
        in_bytes: 0,
        in_copies: 0,
        out_copies: 0,
    };
}

/// This domain's copy counts so far.
pub fn counts() -> Counts {
    COUNTS.with(|c| c.get())
}

#[inline]
fn count(f: impl FnOnce(&mut Counts)) {
    COUNTS.with(|c| {
        let mut v = c.get();
        f(&mut v);
        c.set(v);
    })
}

/// Requests of at most this many bytes are copied whole onto the stack: lending a part of
/// them in place would save less than it costs.
const SMALL: usize = 512;

/// Copies `len` bytes of shared memory at `src` into private memory at `dst`.
///
/// # Safety
/// As for [`copy_bytes`].
#[inline]
unsafe fn copy_in(src: *const u8, dst: *mut u8, len: usize) {
    const TINY: usize = 16;
    if len <= TINY {
        // A bulk copy is an out-of-line call in the engine; a few loads are cheaper.
        for i in 0..len {
            // SAFETY: `i < len`, within both ranges the caller vouches for.
            unsafe { dst.add(i).write(src.add(i).read_volatile()) };
        }
    } else {
        // SAFETY: the caller's promise, passed on.
        unsafe { copy_bytes(src, dst, len) };
    }
}

/// Copies `len` bytes at `src` (memory the peer may be writing) into a private buffer and
/// runs `f` on the copy. Validation then happens on bytes the peer can no longer change.
///
/// # Safety
/// `[src, src + len)` must be readable memory of this domain.
pub unsafe fn with_copy<R>(src: *const u8, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
    if len <= SMALL {
        let mut buf = core::mem::MaybeUninit::<[u8; SMALL]>::uninit();
        let dst = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: the caller vouches for `src`; `buf` is private stack memory of `SMALL >=
        // len` bytes; after the copy its first `len` bytes are initialized, and only those are
        // exposed.
        let copy = unsafe {
            copy_in(src, dst, len);
            core::slice::from_raw_parts(dst, len)
        };
        return f(copy);
    }
    let mut buf = SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    buf.clear();
    buf.reserve(len + COPY_ALIGN);
    // Place the copy so that it sits at the same offset modulo `COPY_ALIGN` as its source
    // (see `COPY_ALIGN`).
    let at = (src as usize).wrapping_sub(buf.as_ptr() as usize) % COPY_ALIGN;
    // SAFETY: the caller vouches for `src`; `buf` has capacity for `at + len` bytes
    // (`at < COPY_ALIGN`) and is private, so the ranges do not overlap; after the writes its
    // first `at + len` bytes are initialized.
    unsafe {
        zero_bytes(buf.as_mut_ptr(), at);
        copy_bytes(src, buf.as_mut_ptr().add(at), len);
        buf.set_len(at + len);
    }
    let r = f(&buf[at..]);
    SCRATCH.with(|s| s.borrow_mut().push(buf));
    r
}

/// Owned copies of decoded byte sequences (what generated stubs return for `list<u8>` and
/// `string` results), made with [`copy_bytes`].
pub trait Owned {
    /// The owned type.
    type Out;
    /// Copies `self` into a new owned value.
    fn owned(self) -> Self::Out;
}

impl Owned for &[u8] {
    type Out = Vec<u8>;
    fn owned(self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        // SAFETY: `v` has capacity for `self.len()` bytes and is a new allocation, so the
        // ranges do not overlap; after the copy those bytes are initialized.
        unsafe {
            crate::bulk::copy_short(self.as_ptr(), v.as_mut_ptr(), self.len());
            v.set_len(self.len());
        }
        v
    }
}

/// `b` as a `str` if it is UTF-8. Most strings of a request (names, paths, header lines)
/// are short and ASCII: those are checked a word at a time, without the general validator's
/// per-byte start (on `wasm32` its word is four bytes, and a short string never reaches its
/// word loop).
#[inline(always)]
pub fn utf8(b: &[u8]) -> Result<&str, DecodeError> {
    if ascii(b) {
        // SAFETY: every byte is below 0x80: ASCII, so UTF-8.
        return Ok(unsafe { core::str::from_utf8_unchecked(b) });
    }
    core::str::from_utf8(b).map_err(|_| DecodeError)
}

/// Whether every byte of `b` is below 0x80: eight bytes at a time from 8 bytes on (the last,
/// overlapping word covers the remainder), two overlapping four-byte words from 4 to 7, one
/// by one below.
#[inline(always)]
fn ascii(b: &[u8]) -> bool {
    const HIGH8: u64 = 0x8080_8080_8080_8080;
    const HIGH4: u32 = 0x8080_8080;
    let w8 = |c: &[u8; 8]| u64::from_le_bytes(*c);
    let w4 = |c: &[u8; 4]| u32::from_le_bytes(*c);
    if let Some(last) = b.last_chunk::<8>() {
        let (words, _) = b.as_chunks::<8>();
        let seen = words.iter().fold(w8(last), |acc, c| acc | w8(c));
        return seen & HIGH8 == 0;
    }
    match (b.first_chunk::<4>(), b.last_chunk::<4>()) {
        (Some(first), Some(last)) => (w4(first) | w4(last)) & HIGH4 == 0,
        _ => b.iter().fold(0u8, |acc, &x| acc | x) < 0x80,
    }
}

impl Owned for &str {
    type Out = String;
    fn owned(self) -> String {
        let bytes = self.as_bytes().owned();
        // SAFETY: an exact copy of the bytes of a `str`, so valid UTF-8.
        unsafe { String::from_utf8_unchecked(bytes) }
    }
}

fn check(code: i32) -> Result<(), CallError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CallError::from_code(code))
    }
}

#[inline]
fn read_u32(at: usize) -> u32 {
    // SAFETY: callers pass addresses inside an A-stack or segment the kernel gave this
    // domain; an unaligned raw load forms no reference to shared memory.
    u32::from_le(unsafe { core::ptr::read_unaligned(at as *const u32) })
}

#[inline]
fn write_header(at: usize, flags: u32, len: usize) {
    let p = at as *mut u32;
    // SAFETY: `at` is the start of an A-stack of at least `header::LEN` (8) bytes; unaligned
    // raw stores form no reference to shared memory.
    unsafe {
        core::ptr::write_unaligned(p, flags.to_le());
        core::ptr::write_unaligned(p.add(1), (len as u32).to_le());
    }
}

/// Transfers a call: straight into the server copy's entry on a direct-linked binding
/// (`inline`: the arguments are all on the A-stack), through the kernel otherwise.
#[inline]
fn dispatch(b: &Binding, proc: u32, astack: u32, cap: usize, inline: bool) -> i32 {
    if inline && let Some((d, server_astack)) = b.direct(proc, astack) {
        #[cfg(target_arch = "wasm32")]
        {
            // SAFETY: on wasm32 a function pointer is an index into this module's function
            // table, where the kernel placed the server copy's entry for `proc` (of exactly
            // this type) when it bound; the engine checks the type on the indirect call too.
            let entry: extern "C" fn(i32, i32, i32, i32, i32) -> i32 =
                unsafe { core::mem::transmute::<usize, _>(d.index as usize) };
            return match entry(server_astack as i32, cap as i32, 0, 0, d.borrow as i32) {
                lrpc_abi::ENTRY_OK => 0,
                _ => CallError::ServerRejected.code(),
            };
        }
        // No function table to call through natively (the SDK only unit-tests there).
        #[cfg(not(target_arch = "wasm32"))]
        let _ = (d.index, d.borrow, server_astack, cap);
    }
    sys::call(b.handle as i64, proc as i32, astack as i32)
}

/// The function at `index` of this module's function table, as the function-pointer type `F`.
///
/// # Safety
/// `F` must be an `extern "C" fn` type, and the table's element at `index` must be a function
/// of exactly that type (the engine checks the type again on the indirect call, trapping on a
/// mismatch).
#[inline]
pub unsafe fn table_fn<F: Copy>(index: u32) -> F {
    assert_eq!(
        core::mem::size_of::<F>(),
        core::mem::size_of::<usize>(),
        "a function pointer"
    );
    // SAFETY: `F` is a function-pointer type of the size of `usize` (checked above); on
    // wasm32 a function pointer is the index of the function in the module's table, and the
    // caller vouches for the function's type at `index`.
    unsafe { core::mem::transmute_copy::<usize, F>(&(index as usize)) }
}

/// Asks the kernel for an out-of-band segment of this A-stack; returns `(address, cap)`.
fn oob(
    b: &Binding,
    proc: u32,
    astack: u32,
    dir: i32,
    min: usize,
) -> Result<(usize, usize), CallError> {
    let min = i32::try_from(min).map_err(|_| CallError::ResourceExhausted)?;
    let seg = segment(|at| sys::oob(b.handle as i64, proc as i32, astack as i32, dir, min, at))
        .map_err(CallError::from_code)?;
    Ok((seg.addr as usize, seg.cap as usize))
}

/// Calls a kernel import that writes a segment record (`lrpc_abi::segment`) at the address
/// it is given; the record, or the import's status.
fn segment(import: impl FnOnce(i32) -> i32) -> Result<lrpc_abi::segment::Segment, i32> {
    let mut rec = [0u8; lrpc_abi::segment::LEN];
    match import(rec.as_mut_ptr() as i32) {
        0 => Ok(lrpc_abi::segment::Segment::decode(&rec).unwrap_or_default()),
        code => Err(code),
    }
}

/// The client half of a call: take an A-stack, encode (`size` bytes, by `enc`), call, copy
/// the results out and decode them (`dec`), give the A-stack back.
#[inline]
pub fn invoke<R>(
    b: &Binding,
    proc: u32,
    bounded: bool,
    size: usize,
    out_bound: usize,
    enc: impl FnOnce(&mut Writer),
    dec: impl FnOnce(&mut Reader<'_>) -> Result<R, DecodeError>,
) -> Result<R, CallError> {
    invoke_with(b, proc, bounded, size, out_bound, enc, Decode(dec))
}

/// The client half of a call whose results the caller keeps as their encoded bytes (a relay
/// that checks framing only and passes them on to be validated by others): as [`invoke`], but
/// the reply is copied once, straight out of shared memory into the returned buffer.
pub fn invoke_bytes(
    b: &Binding,
    proc: u32,
    bounded: bool,
    size: usize,
    out_bound: usize,
    enc: impl FnOnce(&mut Writer),
) -> Result<Vec<u8>, CallError> {
    invoke_with(b, proc, bounded, size, out_bound, enc, Bytes)
}

/// The client half of a call whose result is one byte list or one string (`R` is `Vec<u8>`
/// or `String`): as [`invoke`], but the bytes are copied once, straight out of shared memory
/// into the returned value. The length is read once and checked against the reply's size
/// before it is used, and a string is validated as UTF-8 on that private copy, which the
/// server can no longer change (LRPC 3.5: the check folded into the one copy).
pub fn invoke_whole<R: Whole>(
    b: &Binding,
    proc: u32,
    bounded: bool,
    size: usize,
    out_bound: usize,
    enc: impl FnOnce(&mut Writer),
) -> Result<R, CallError> {
    invoke_with(
        b,
        proc,
        bounded,
        size,
        out_bound,
        enc,
        ByteList(PhantomData),
    )
}

/// A result type [`invoke_whole`] takes as one byte sequence: `Vec<u8>` as it is, `String`
/// once its bytes are valid UTF-8.
pub trait Whole: Sized + sealed::Sealed {
    /// The value of the result's bytes, a private copy.
    fn from_bytes(bytes: Vec<u8>) -> Result<Self, DecodeError>;
}

impl Whole for Vec<u8> {
    #[inline]
    fn from_bytes(bytes: Vec<u8>) -> Result<Self, DecodeError> {
        Ok(bytes)
    }
}

impl Whole for String {
    #[inline]
    fn from_bytes(bytes: Vec<u8>) -> Result<Self, DecodeError> {
        String::from_utf8(bytes).map_err(|_| DecodeError)
    }
}

mod sealed {
    /// Only the SDK's result types are [`super::Whole`].
    pub trait Sealed {}
    impl Sealed for Vec<u8> {}
    impl Sealed for String {}
}

/// How a client takes its results out of shared memory.
trait TakeOut<R> {
    /// Takes the `len` result bytes at `src` out (`whole`: every one of them must decode).
    ///
    /// # Safety
    /// `[src, src + len)` must be readable memory of this domain: the A-stack or the reply
    /// segment, checked against its capacity.
    unsafe fn take_out(self, src: *const u8, len: usize, whole: bool) -> Result<R, DecodeError>;
}

/// Results decoded by a generated stub, from a private copy (validation happens on bytes the
/// server can no longer change).
struct Decode<F>(F);

impl<R, F: FnOnce(&mut Reader<'_>) -> Result<R, DecodeError>> TakeOut<R> for Decode<F> {
    #[inline]
    unsafe fn take_out(self, src: *const u8, len: usize, whole: bool) -> Result<R, DecodeError> {
        let dec = |buf: &[u8]| {
            let mut r = Reader::new(buf);
            let v = (self.0)(&mut r)?;
            if whole {
                r.finish()?;
            }
            Ok(v)
        };
        if len == 0 {
            return dec(&[]);
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { with_copy(src, len, dec) }
    }
}

/// Results kept as their encoded bytes: one copy into an owned buffer.
struct Bytes;

impl TakeOut<Vec<u8>> for Bytes {
    #[inline]
    unsafe fn take_out(self, src: *const u8, len: usize, _: bool) -> Result<Vec<u8>, DecodeError> {
        let mut v = Vec::with_capacity(len);
        // SAFETY: the caller vouches for `src`; `v` is a new allocation of `len` bytes, so
        // the ranges do not overlap; after the copy those bytes are initialized.
        unsafe {
            copy_bytes(src, v.as_mut_ptr(), len);
            v.set_len(len);
        }
        Ok(v)
    }
}

/// A result that is one byte sequence (see [`invoke_whole`]): its length checked, then its
/// bytes taken as [`Bytes`] takes a reply.
struct ByteList<R>(PhantomData<R>);

impl<R: Whole> TakeOut<R> for ByteList<R> {
    #[inline]
    unsafe fn take_out(self, src: *const u8, len: usize, whole: bool) -> Result<R, DecodeError> {
        let Some(room) = len.checked_sub(4) else {
            return Err(DecodeError);
        };
        // The length, read once from memory the server may be writing.
        let n = read_u32(src as usize) as usize;
        if n > room || (whole && n != room) {
            return Err(DecodeError);
        }
        // SAFETY: the caller vouches for `[src, src + len)`, and `4 + n <= len`.
        let bytes = unsafe { Bytes.take_out(src.add(4), n, whole) }?;
        R::from_bytes(bytes)
    }
}

/// [`invoke`] with the results taken out by `out`.
#[inline]
fn invoke_with<R>(
    b: &Binding,
    proc: u32,
    bounded: bool,
    size: usize,
    out_bound: usize,
    enc: impl FnOnce(&mut Writer),
    out: impl TakeOut<R>,
) -> Result<R, CallError> {
    let (astack, cap) = b.take(proc)?;
    let site = Site {
        b,
        proc,
        astack,
        cap: cap as usize,
    };
    let form = Form {
        bounded,
        size,
        out_bound,
    };
    let r = invoke_on(site, form, enc, out);
    give_back(site);
    r
}

/// Gives a call's A-stack back to its binding. What the call left there stays: only this
/// pair's server can see it, and it saw it during the call.
#[inline]
fn give_back(site: Site<'_>) {
    site.b.put(site.proc, site.astack);
}

/// Where a call runs: the binding, the procedure and the A-stack (address and capacity).
#[derive(Clone, Copy)]
struct Site<'a> {
    b: &'a Binding,
    proc: u32,
    astack: u32,
    cap: usize,
}

/// A procedure's form, as its stub gives it: whether its size is bounded, the encoded size
/// of its arguments (unbounded procedures) and the bound of its results.
#[derive(Clone, Copy)]
struct Form {
    bounded: bool,
    size: usize,
    out_bound: usize,
}

#[inline]
fn invoke_on<R>(
    site: Site<'_>,
    form: Form,
    enc: impl FnOnce(&mut Writer),
    out: impl TakeOut<R>,
) -> Result<R, CallError> {
    let inline = put_args(site, form, enc)?;
    check(dispatch(site.b, site.proc, site.astack, site.cap, inline))?;
    take_results(site, form, out)
}

/// The first half of a call: encodes the arguments (`size` bytes, by `enc`) onto the A-stack
/// (at its base for a procedure of bounded size, else after the header), or into the `in`
/// segment when they do not fit; whether they are all on the A-stack.
#[inline]
fn put_args(site: Site<'_>, form: Form, enc: impl FnOnce(&mut Writer)) -> Result<bool, CallError> {
    let (b, proc, astack, cap) = (site.b, site.proc, site.astack, site.cap);
    let (bounded, size) = (form.bounded, form.size);
    let base = astack as usize;
    if bounded {
        // SAFETY: the kernel gave this domain the A-stack `[base, base + cap)`.
        let mut w = unsafe { Writer::new(base as *mut u8, cap) };
        enc(&mut w);
        if !w.fits() {
            return Err(CallError::ResourceExhausted);
        }
        if !w.is_empty() {
            count(|c| {
                c.in_copies += 1;
                c.in_bytes += w.len() as u64;
            });
        }
        return Ok(true);
    }
    let inline_cap = cap.saturating_sub(header::LEN);
    let (dst, room, flags) = if size <= inline_cap {
        (base + header::LEN, inline_cap, 0)
    } else {
        let (p, c) = oob(b, proc, astack, lrpc_abi::OOB_IN, size)?;
        (p, c, header::OOB)
    };
    // SAFETY: `[dst, dst + room)` is the A-stack's payload area or the out-of-band segment
    // the kernel just mapped for it, both memory of this domain.
    let mut w = unsafe { Writer::new(dst as *mut u8, room) };
    enc(&mut w);
    if !w.fits() || w.len() != size {
        return Err(CallError::ResourceExhausted);
    }
    write_header(base, flags, size);
    count(|c| {
        c.in_copies += 1;
        c.in_bytes += size as u64;
    });
    Ok(flags == 0)
}

/// The second half of a call that returned: takes the results out of the A-stack (a
/// procedure of bounded size: only the result's bound) or the reply segment, by `out`.
#[inline]
fn take_results<R>(site: Site<'_>, form: Form, out: impl TakeOut<R>) -> Result<R, CallError> {
    let (b, proc, astack, cap) = (site.b, site.proc, site.astack, site.cap);
    let (bounded, out_bound) = (form.bounded, form.out_bound);
    let bad_reply = |_| CallError::BadReply;
    let base = astack as usize;
    if bounded {
        if out_bound > 0 {
            count(|c| c.out_copies += 1);
        }
        // Only the result's bound is read back (nothing at all for a procedure without one).
        let n = out_bound.min(cap);
        // SAFETY: the kernel gave this domain the A-stack `[base, base + cap)`; `n <= cap`.
        return unsafe { out.take_out(base as *const u8, n, false) }.map_err(bad_reply);
    }
    count(|c| c.out_copies += 1);
    let inline_cap = cap.saturating_sub(header::LEN);
    // The reply's header and length come from the server: untrusted.
    let rflags = read_u32(base);
    let len = read_u32(base + 4) as usize;
    let (src, limit) = if rflags & header::OOB != 0 {
        oob(b, proc, astack, lrpc_abi::OOB_OUT, 0)?
    } else {
        (base + header::LEN, inline_cap)
    };
    if len > limit {
        return Err(CallError::BadReply);
    }
    // SAFETY: `[src, src + len)` lies inside the A-stack or the reply segment (checked
    // against its capacity just above).
    unsafe { out.take_out(src as *const u8, len, true) }.map_err(bad_reply)
}

/// How a MultiRPC ended (see [`multi_invoke`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiOutcome {
    /// Per member, in member order: whether its reply or failure reached the handler.
    pub answered: Vec<bool>,
    /// The handler ended the call.
    pub stopped: bool,
    /// The overall timeout ended the call; members not answered are stragglers.
    pub timed_out: bool,
}

/// One member's A-stack in a MultiRPC.
struct Leg<'a> {
    site: Site<'a>,
}

/// MultiRPC (Satyanarayanan and Siegel): procedure `proc` on every binding of `members` at
/// once. The arguments are encoded once (by `enc`, as for [`invoke`]) and laid on each
/// member's A-stack; the kernel sends the remote members' calls at once and makes the local
/// ones one after another, each with its ordinary semantics. `handler` runs once per member's
/// reply (decoded by `dec`) or failure, in arrival order, and ends the call early by
/// returning `Break`; `timeout_ms` bounds the whole call. A member whose A-stack or arguments
/// could not be prepared fails at once, before the others.
#[allow(clippy::too_many_arguments, reason = "the parts of one call")]
pub fn multi_invoke<R>(
    members: &[&Binding],
    proc: u32,
    bounded: bool,
    size: usize,
    out_bound: usize,
    timeout_ms: u32,
    enc: impl FnOnce(&mut Writer),
    dec: impl Fn(&mut Reader<'_>) -> Result<R, DecodeError>,
    mut handler: impl FnMut(usize, Result<R, CallError>) -> core::ops::ControlFlow<()>,
) -> Result<MultiOutcome, CallError> {
    let n = members.len();
    let mut outcome = MultiOutcome {
        answered: vec![false; n],
        stopped: false,
        timed_out: false,
    };
    let mut legs: Vec<Option<Leg<'_>>> = Vec::with_capacity(n);
    let mut failed: Vec<(usize, CallError)> = Vec::new();
    for (i, b) in members.iter().enumerate() {
        match b.take(proc) {
            Ok((astack, cap)) => legs.push(Some(Leg {
                site: Site {
                    b,
                    proc,
                    astack,
                    cap: cap as usize,
                },
            })),
            Err(e) => {
                legs.push(None);
                failed.push((i, e));
            }
        }
    }
    let form = Form {
        bounded,
        size,
        out_bound,
    };
    let r = multi_on(
        &mut legs,
        &mut failed,
        &mut outcome,
        proc,
        form,
        timeout_ms,
        enc,
        &dec,
        &mut handler,
    );
    for Leg { site } in legs.into_iter().flatten() {
        give_back(site);
    }
    r.map(|()| outcome)
}

/// [`multi_invoke`] once the A-stacks are taken (the caller gives them back).
#[allow(clippy::too_many_arguments, reason = "the parts of one call")]
fn multi_on<R>(
    legs: &mut [Option<Leg<'_>>],
    failed: &mut Vec<(usize, CallError)>,
    outcome: &mut MultiOutcome,
    proc: u32,
    form: Form,
    timeout_ms: u32,
    enc: impl FnOnce(&mut Writer),
    dec: &impl Fn(&mut Reader<'_>) -> Result<R, DecodeError>,
    handler: &mut impl FnMut(usize, Result<R, CallError>) -> core::ops::ControlFlow<()>,
) -> Result<(), CallError> {
    use lrpc_abi::multi::{Kind, MEMBER_LEN, Member, NEXT_LEN, Next};
    // Encoded once, into private memory; then copied onto every member's A-stack.
    let room = if form.bounded {
        legs.iter().flatten().map(|l| l.site.cap).min().unwrap_or(0)
    } else {
        form.size
    };
    let mut encoded = vec![0u8; room];
    // SAFETY: `encoded` is this function's own buffer of `room` bytes.
    let mut w = unsafe { Writer::new(encoded.as_mut_ptr(), room) };
    enc(&mut w);
    if !w.fits() || (!form.bounded && w.len() != form.size) {
        return Err(CallError::ResourceExhausted);
    }
    encoded.truncate(w.len());
    let mut records = Vec::new();
    let mut sent = Vec::new();
    for (i, leg) in legs.iter_mut().enumerate() {
        let Some(l) = leg else { continue };
        match put_args(l.site, form, |w| w.bytes(&encoded)) {
            Ok(_) => {
                let m = Member {
                    handle: l.site.b.handle,
                    astack: l.site.astack,
                };
                records.extend_from_slice(&m.encode());
                sent.push(i);
            }
            Err(e) => failed.push((i, e)),
        }
    }
    let mut report = |i: usize, r: Result<R, CallError>, outcome: &mut MultiOutcome| {
        outcome.answered[i] = true;
        if handler(i, r).is_break() {
            outcome.stopped = true;
        }
        outcome.stopped
    };
    for (i, e) in failed.drain(..) {
        if report(i, Err(e), outcome) {
            return Ok(());
        }
    }
    if sent.is_empty() {
        return Ok(());
    }
    let id = sys::multi_start(
        records.as_ptr() as i32,
        (records.len() / MEMBER_LEN) as i32,
        proc as i32,
        i32::try_from(timeout_ms).unwrap_or(i32::MAX),
    );
    if id < 0 {
        return Err(CallError::from_code(id.saturating_neg()));
    }
    let mut rec = [0u8; NEXT_LEN];
    let end = loop {
        let code = sys::multi_next(id, rec.as_mut_ptr() as i32);
        if code != 0 {
            break Err(CallError::from_code(code));
        }
        let Some(next) = Next::decode(&rec) else {
            break Err(CallError::BadReply);
        };
        match next.kind {
            Kind::Done => break Ok(()),
            Kind::Timeout => {
                outcome.timed_out = true;
                break Ok(());
            }
            Kind::Reply => {}
        }
        let Some(&i) = sent.get(next.member as usize) else {
            break Err(CallError::BadReply);
        };
        let Some(l) = legs[i].as_mut() else {
            break Err(CallError::BadReply);
        };
        let r = match next.status {
            0 => take_results(l.site, form, Decode(dec)),
            s => Err(CallError::from_code(s as i32)),
        };
        if report(i, r, outcome) {
            break Ok(());
        }
    };
    sys::multi_end(id);
    end
}

/// Where a server entry writes its results.
pub struct Reply {
    astack: usize,
    cap: usize,
    bounded: bool,
    has_result: bool,
}

impl Reply {
    /// Encodes the results (`size` bytes, by `enc`) onto the A-stack, or into the reply
    /// segment when they do not fit.
    #[inline]
    pub fn put(&mut self, size: usize, enc: impl FnOnce(&mut Writer)) -> Result<(), DecodeError> {
        if self.has_result {
            count(|c| c.out_copies += 1);
        }
        if self.bounded {
            // SAFETY: the kernel passed this A-stack and its capacity to the entry.
            let mut w = unsafe { Writer::new(self.astack as *mut u8, self.cap) };
            enc(&mut w);
            return if w.fits() { Ok(()) } else { Err(DecodeError) };
        }
        let inline_cap = self.cap.saturating_sub(header::LEN);
        let (dst, room, flags) = if size <= inline_cap {
            (self.astack + header::LEN, inline_cap, 0)
        } else {
            let min = i32::try_from(size).map_err(|_| DecodeError)?;
            let seg = segment(|at| sys::reply_oob(min, at)).map_err(|_| DecodeError)?;
            (seg.addr as usize, seg.cap as usize, header::OOB)
        };
        // SAFETY: the A-stack's payload area, or the reply segment the kernel just mapped.
        let mut w = unsafe { Writer::new(dst as *mut u8, room) };
        enc(&mut w);
        if !w.fits() || w.len() != size {
            return Err(DecodeError);
        }
        write_header(self.astack, flags, size);
        Ok(())
    }
}

/// A server's own result buffer, lent to a handler whose presentation says the result is
/// `caller-allocates`: the handler writes its byte-list or string result straight onto the
/// A-stack (or the reply segment), so the stub copies nothing.
pub struct OutBuf<'a> {
    reply: &'a mut Reply,
    placed: bool,
}

impl<'a> OutBuf<'a> {
    /// Wraps the reply of the current call.
    pub fn new(reply: &'a mut Reply) -> OutBuf<'a> {
        OutBuf {
            reply,
            placed: false,
        }
    }

    /// The result buffer of exactly `len` bytes, in shared memory. Call it once; `None` if
    /// the result can not be placed (too large, or already placed).
    pub fn alloc(&mut self, len: usize) -> Option<&mut [u8]> {
        if self.placed || self.reply.bounded {
            return None;
        }
        let size = len.checked_add(4)?;
        let inline_cap = self.reply.cap.saturating_sub(header::LEN);
        let (dst, flags) = if size <= inline_cap {
            (self.reply.astack + header::LEN, 0)
        } else {
            let min = i32::try_from(size).ok()?;
            let seg = segment(|at| sys::reply_oob(min, at)).ok()?;
            if (seg.cap as usize) < size {
                return None;
            }
            (seg.addr as usize, header::OOB)
        };
        write_header(self.reply.astack, flags, size);
        let p = dst as *mut u8;
        // SAFETY: `[dst, dst + size)` is the A-stack's payload area (checked against its
        // capacity) or the reply segment the kernel just mapped with at least `size` bytes.
        // The slice is handed to the handler for the rest of the call only; the client reads
        // it after the call returns.
        unsafe {
            core::ptr::write_unaligned(p.cast::<u32>(), (len as u32).to_le());
            self.placed = true;
            Some(core::slice::from_raw_parts_mut(p.add(4), len))
        }
    }

    /// Completes the reply: an empty result if the handler placed none.
    pub fn finish(mut self) -> Result<(), DecodeError> {
        if !self.placed && self.alloc(0).is_none() {
            return Err(DecodeError);
        }
        Ok(())
    }
}

/// The arguments the kernel passes to an entry stub.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    /// Server address of the A-stack.
    pub astack: i32,
    /// Its capacity.
    pub cap: i32,
    /// Server address of the `in` out-of-band segment (0: none).
    pub oob: i32,
    /// Its capacity.
    pub oob_cap: i32,
    /// Which `in` parameters this call lets the server read in place: the binding's borrow
    /// mask, or its lend mask when the client can not run until the call returns.
    pub borrow: i32,
}

/// What the generator knows of a procedure.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Parameters a borrow spares a copy of: byte lists (bit `k` for parameter `k`).
    pub in_mask: u32,
    /// The request holds strings, whose UTF-8 is validated on a private copy the client can
    /// not change: it is never read in place whole, but its borrowed byte lists are.
    pub strings: bool,
    /// The procedure has a result.
    pub has_result: bool,
    /// Arguments and results have fixed bounds (no header).
    pub bounded: bool,
    /// The arguments' bound, when bounded.
    pub in_bound: usize,
}

/// Runs `f` on a split-mode reader over `view` (the request in shared memory) whose byte-list
/// parameters in `lent` are read in place: the rest is copied into a private buffer as it is
/// decoded, and only that is counted as copied.
fn split<R>(view: &[u8], lent: u32, f: impl FnOnce(&mut Reader<'_>) -> R) -> R {
    let mut buf = SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    buf.clear();
    // Each byte of the request is copied at most once, so its length always suffices.
    buf.reserve(view.len());
    let cap = buf.capacity();
    let (out, copied) = {
        // SAFETY: `buf`'s spare capacity (at least `view.len()` bytes) is private memory,
        // written only through the reader, which lives in this block; `buf` is neither used
        // nor moved meanwhile (it goes back to the pool only after), and what the reader
        // hands out can not outlive `f`, which is generic over the reader's lifetime.
        let mut r = unsafe { Reader::split(view, buf.as_mut_ptr(), cap, lent) };
        let out = f(&mut r);
        (out, r.copied())
    };
    SCRATCH.with(|s| s.borrow_mut().push(buf));
    if copied > 0 {
        count(|c| {
            c.in_copies += 1;
            c.in_bytes += copied as u64;
        });
    }
    out
}

/// The server half of a call, run by an entry stub: copy the request out of shared memory,
/// decode and validate it, run the handler, write the reply. Returns the entry status.
#[inline]
pub fn serve(
    entry: Entry,
    shape: Shape,
    handler: impl FnOnce(&mut Reader<'_>, &mut Reply) -> Result<(), DecodeError>,
) -> i32 {
    let Entry {
        astack,
        cap,
        oob,
        oob_cap,
        borrow,
    } = entry;
    let Shape {
        in_mask,
        strings,
        has_result,
        bounded,
        in_bound,
    } = shape;
    // `in_mask` has a bit for each parameter whose data a borrow would spare a copy of (byte
    // lists; strings are never among them: UTF-8 is validated on a copy the client can not
    // change). The request is read in place whole if every such parameter may be borrowed
    // and it holds no string; otherwise, if some may, it is read in split mode: the borrowed
    // byte lists in place, everything else copied into private memory as it is decoded.
    let lent = (borrow as u32) & in_mask;
    let in_place = !strings && in_mask != 0 && lent == in_mask;
    let base = astack as u32 as usize;
    let cap = cap as u32 as usize;
    let mut reply = Reply {
        astack: base,
        cap,
        bounded,
        has_result,
    };
    let r = if bounded {
        if in_bound > 0 {
            count(|c| {
                c.in_copies += 1;
                c.in_bytes += in_bound.min(cap) as u64;
            });
        }
        // SAFETY: the kernel passed this A-stack and its capacity; only the arguments' bound
        // (at most `cap`) is copied.
        unsafe {
            with_copy(base as *const u8, in_bound.min(cap), |buf| {
                handler(&mut Reader::new(buf), &mut reply)
            })
        }
    } else if cap < header::LEN {
        Err(DecodeError)
    } else {
        let flags = read_u32(base);
        let len = read_u32(base + 4) as usize;
        let (src, limit) = if flags & header::OOB != 0 {
            (oob as u32 as usize, oob_cap as u32 as usize)
        } else {
            (base + header::LEN, cap - header::LEN)
        };
        if len > limit || (flags & header::OOB != 0 && src == 0) {
            Err(DecodeError)
        } else if in_place {
            // SAFETY: inside the A-stack or the request segment, checked just above. The
            // bytes stay put unless the peer allowed a change (`trashable`), the server
            // promised to only read them (`preserved`) or the embedder writes the window
            // (`Domain::write_window`); lengths were read once, so the view's bounds hold.
            let view = unsafe { core::slice::from_raw_parts(src as *const u8, len) };
            handler(&mut Reader::new(view), &mut reply)
        } else if lent != 0 && len > SMALL {
            // SAFETY: as for the in-place view above; here the view's bytes reach the
            // handler only through the reader, which copies all but the lent byte lists.
            let view = unsafe { core::slice::from_raw_parts(src as *const u8, len) };
            split(view, lent, |r| handler(r, &mut reply))
        } else {
            if len > 0 {
                count(|c| {
                    c.in_copies += 1;
                    c.in_bytes += len as u64;
                });
            }
            // SAFETY: inside the A-stack or the request segment, checked just above.
            unsafe {
                with_copy(src as *const u8, len, |buf| {
                    let mut r = Reader::new(buf);
                    handler(&mut r, &mut reply)
                })
            }
        }
    };
    match r {
        Ok(()) => lrpc_abi::ENTRY_OK,
        Err(DecodeError) => lrpc_abi::ENTRY_REJECTED,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn owned_copies_are_exact() {
        let src: Vec<u8> = (0..9000u32).map(|i| (i * 31 + 7) as u8).collect();
        assert_eq!(Owned::owned(&src[..3000]), src[..3000].to_vec());
        assert_eq!(Owned::owned(&src[..200]), src[..200].to_vec());
        assert_eq!(Owned::owned("héllo"), "héllo".to_string());
        for len in 0..40 {
            assert_eq!(Owned::owned(&src[..len]), src[..len].to_vec());
        }
    }

    #[test]
    fn utf8_takes_ascii_quickly_and_everything_else_as_the_validator_does() {
        let text = "GET /api/v1/x authorization: Bearer letmein";
        for len in 0..text.len() {
            assert_eq!(utf8(&text.as_bytes()[..len]), Ok(&text[..len]));
        }
        // A byte of 0x80 or more at every position of strings of every length up to 24.
        for len in 1..24 {
            for at in 0..len {
                for bad in [0x80u8, 0xc3, 0xff] {
                    let mut b = vec![b'a'; len];
                    b[at] = bad;
                    let want = core::str::from_utf8(&b).map_err(|_| DecodeError);
                    assert_eq!(utf8(&b), want, "len {len} at {at} byte {bad:#x}");
                }
            }
        }
        assert_eq!(utf8("hé".as_bytes()), Ok("hé"));
        assert_eq!(utf8("aaaaaaaaaé".as_bytes()), Ok("aaaaaaaaaé"));
    }

    #[test]
    fn a_byte_list_result_is_taken_whole_or_refused() {
        let take = |reply: &[u8], whole: bool| -> Result<Vec<u8>, DecodeError> {
            // SAFETY: `reply` is readable for its length.
            unsafe { ByteList(PhantomData).take_out(reply.as_ptr(), reply.len(), whole) }
        };
        let body: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        let mut reply = (body.len() as u32).to_le_bytes().to_vec();
        reply.extend_from_slice(&body);
        assert_eq!(take(&reply, true), Ok(body.clone()));
        let short = take(&reply[..4], true);
        assert_eq!(short, Err(DecodeError), "length beyond the reply");
        let no_room = take(&reply[..3], false);
        assert_eq!(no_room, Err(DecodeError), "no room for a length");
        // Trailing bytes: refused when the reply must decode whole, ignored otherwise.
        reply.push(0xee);
        assert_eq!(take(&reply, true), Err(DecodeError));
        assert_eq!(take(&reply, false), Ok(body));
        let hostile = take(&[0xff, 0xff, 0xff, 0xff, 1, 2], false);
        assert_eq!(hostile, Err(DecodeError), "a huge length allocates nothing");
        assert_eq!(take(&[0, 0, 0, 0], true), Ok(Vec::new()));
        // A string result: the same bytes, refused unless they are UTF-8.
        let text = |reply: &[u8]| -> Result<String, DecodeError> {
            // SAFETY: `reply` is readable for its length.
            unsafe { ByteList(PhantomData).take_out(reply.as_ptr(), reply.len(), true) }
        };
        assert_eq!(text(&[2, 0, 0, 0, b'h', b'i']), Ok("hi".to_string()));
        assert_eq!(
            text(&[2, 0, 0, 0, 0xc3, 0x28]),
            Err(DecodeError),
            "not UTF-8"
        );
    }

    use super::*;

    #[test]
    fn writer_and_reader_round_trip_and_refuse_garbage() {
        let mut mem = [0u8; 64];
        // SAFETY: `mem` is a private buffer of 64 bytes.
        let mut w = unsafe { Writer::new(mem.as_mut_ptr(), mem.len()) };
        w.u32(7);
        w.str("héllo");
        w.bool(true);
        w.char('é');
        w.u64(u64::MAX);
        let n = w.len();
        assert!(w.fits());
        let mut r = Reader::new(&mem[..n]);
        assert_eq!(r.u32(), Ok(7));
        assert_eq!(r.str(), Ok("héllo"));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(r.char(), Ok('é'));
        assert_eq!(r.u64(), Ok(u64::MAX));
        assert_eq!(r.finish(), Ok(()));

        assert_eq!(Reader::new(&[2]).bool(), Err(DecodeError));
        assert_eq!(
            Reader::new(&[0, 0xd8, 0, 0]).char(),
            Err(DecodeError),
            "surrogate"
        );
        assert_eq!(
            Reader::new(&[2, 0, 0, 0, 0xff, 0xfe]).str(),
            Err(DecodeError)
        );
        assert_eq!(
            Reader::new(&[9, 0, 0, 0, 1]).list_u8(),
            Err(DecodeError),
            "short"
        );
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff]).count(1),
            Err(DecodeError)
        );
        assert_eq!(Reader::new(&[3]).discriminant(3), Err(DecodeError));
        assert_eq!(Reader::new(&[1, 2]).finish(), Err(DecodeError));
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u8(), Ok(1));
        assert_eq!(r.rest(), Ok(&[2, 3][..]));
        assert_eq!(r.rest(), Ok(&[][..]));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn a_split_reader_copies_all_but_the_lent_byte_lists() {
        let body = [7u8; 40];
        let mut shared = [0u8; 128];
        // SAFETY: a private buffer of 128 bytes stands in for the shared request.
        let mut w = unsafe { Writer::new(shared.as_mut_ptr(), shared.len()) };
        w.str("GET");
        w.list_u8(&body);
        w.list_u8(b"kept");
        w.str("raw");
        w.u16(9);
        let n = w.len();
        assert!(w.fits());
        let shared = &shared[..n];
        let within = |b: &[u8], r: &[u8]| {
            let (s, e) = (r.as_ptr() as usize, r.as_ptr() as usize + r.len());
            b.is_empty() || (b.as_ptr() as usize >= s && b.as_ptr() as usize + b.len() <= e)
        };
        let mut private = Vec::<u8>::with_capacity(n);
        let cap = private.capacity();
        // SAFETY: `private`'s spare capacity is private memory used only through the reader.
        let mut r = unsafe { Reader::split(shared, private.as_mut_ptr(), cap, 0b10) };
        let method = r.str().unwrap();
        let lent = r.list_u8_arg(1).unwrap();
        let kept = r.list_u8_arg(2).unwrap();
        let raw = r.raw(|r| r.str().map(|_| ())).unwrap();
        assert_eq!(r.u16(), Ok(9));
        assert_eq!(r.finish(), Ok(()));
        assert_eq!((method, lent, kept), ("GET", &body[..], &b"kept"[..]));
        assert_eq!(raw, b"\x03\0\0\0raw");
        assert!(within(lent, shared), "the lent byte list is a view");
        for b in [method.as_bytes(), kept, raw] {
            assert!(!within(b, shared), "everything else is a private copy");
        }
        // The string's and the kept list's bytes, and the raw parameter whole (its length
        // prefix too); lengths and scalars are read once into values, never copied.
        assert_eq!(r.copied(), 3 + 4 + 7);

        // Private memory too small for what must be copied: refused, never overrun.
        let mut small = Vec::<u8>::with_capacity(2);
        // SAFETY: as above.
        let mut r = unsafe { Reader::split(shared, small.as_mut_ptr(), 2, 0b10) };
        assert_eq!(r.str(), Err(DecodeError));
        // Not split: the lent bit changes nothing.
        let mut r = Reader::new(shared);
        r.str().unwrap();
        assert!(within(r.list_u8_arg(1).unwrap(), shared));
    }

    #[test]
    fn a_writer_never_writes_past_its_capacity() {
        let mut mem = [0u8; 8];
        // SAFETY: a private buffer; the writer may use its first 4 bytes.
        let mut w = unsafe { Writer::new(mem.as_mut_ptr(), 4) };
        w.u64(u64::MAX);
        assert!(!w.fits());
        assert_eq!(mem, [0; 8]);
    }
}
