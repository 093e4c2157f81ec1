//! `lrpc-sdk`: the guest side of lrpc, for core WebAssembly modules written in Rust.
//!
//! A guest is a module built for `wasm32-unknown-unknown` that the lrpc kernel loads as a
//! protection domain. An HTTP plugin of `lrpc serve` is one. This crate is what such a module
//! links: the kernel's imports, and the runtime that generated stubs call.
//!
//! You rarely call it by hand. A guest's build script runs the stub generator,
//! `lrpc-presentation`, on a WIT interface. The stubs it writes hold the interface's types, a
//! `Server` trait to implement and a `Client` to call another domain. They call into this
//! crate. What reaches your code from here is mostly [`CallError`], the error of a failed call.
//!
//! # Start here
//!
//! The book's chapter [Write a plugin](../../write-a-plugin.html) makes a plugin with
//! `lrpc new plugin`, builds it and serves it. Its section
//! [What a plugin can not do](../../write-a-plugin.html#what-a-plugin-can-not-do) tells what
//! a core module has and lacks. The book is [here](../../index.html) when these pages are
//! part of it (`scripts/test.sh` puts them there); its sources are in the checkout's
//! `docs/src/`.
//!
//! # Modules
//!
//! * [`sys`]: the raw kernel imports, the wasm import module `lrpc`.
//! * [`Binding`]: a bound interface. It holds the Binding Object's handle and the
//!   per-procedure LIFO free lists of A-stacks (LRPC's A-stack queue lives here, in the client).
//! * [`rt`]: what generated stubs use. A writer into A-stack memory, a reader over a private
//!   copy, the client's call sequence and the server's entry sequence.
//! * [`chan`]: asynchronous bindings (URPC channels). Calls are messages in memory shared with
//!   the server, and their replies are futures.
//! * [`exec`]: the user-level threads that await those futures.
//! * [`bulk`]: the SDK's byte copies and fills, placed clear of the host's slow `memmove` case.
//! * [`alloc`]: a size-class allocator a guest may make its global one. Small values cost a
//!   few instructions.
//! * [`CallError`]: every way a call can fail, typed. [`Status`] is the kernel's code for it.
//! * [`desc`] and [`segment`]: the binary records the kernel writes, from `lrpc-abi`.
//!
//! # Natively
//!
//! Built for any target but wasm32, the crate compiles and every kernel import answers
//! [`Status::NoCall`]. So a guest's own logic can be unit-tested with `cargo test` for the
//! host's target; the plugin chapter's
//! [Test and debug a plugin](../../write-a-plugin.html#test-and-debug-a-plugin) shows the
//! command. Calls to other domains fail there with [`CallError::NoCall`].
//!
//! # Shared memory
//!
//! Memory shared with another domain (A-stacks, out-of-band segments) is only touched through
//! raw pointers here. The peer may write it at any time, so no Rust reference to it is formed.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod alloc;
pub mod bulk;
pub mod chan;
pub mod exec;
pub mod rt;
pub mod sys;

use core::cell::{Cell, RefCell};
pub use lrpc_abi::Status;
pub use lrpc_abi::{desc, segment};

macro_rules! call_errors {
    ($( $(#[$doc:meta])* $name:ident, )*) => {
        /// Why a call (or a bind) failed: one variant per status the kernel can return other
        /// than `Ok` ([`Status`]), and [`CallError::Unknown`] for a code this SDK does not know.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum CallError {
            $( $(#[$doc])* $name, )*
            /// A status code this SDK does not know.
            Unknown(i32),
        }

        impl CallError {
            /// The error for a kernel status; `None` for `Status::Ok`.
            pub fn from_status(status: Status) -> Option<CallError> {
                // Exhaustive: a status added to the ABI must be added here too.
                match status {
                    Status::Ok => None,
                    $( Status::$name => Some(CallError::$name), )*
                }
            }

            /// The kernel status this error stands for (`None` for an unknown code).
            pub fn status(self) -> Option<Status> {
                match self {
                    $( CallError::$name => Some(Status::$name), )*
                    CallError::Unknown(_) => None,
                }
            }
        }
    };
}

call_errors! {
    /// The server trapped during the call; it has been terminated.
    ServerTrapped,
    /// The server ran past the binding's deadline; it has been terminated.
    DeadlineExceeded,
    /// The server domain is terminated; the binding is revoked.
    ServerTerminated,
    /// The binding was unbound or revoked.
    StaleBinding,
    /// The handle was never issued by the kernel.
    ForgedBinding,
    /// The handle belongs to another domain.
    ForeignBinding,
    /// No such procedure in the binding's interface.
    BadProcedure,
    /// Not an A-stack of this binding and procedure.
    BadAStack,
    /// The A-stack is in use by another call.
    AStackBusy,
    /// The server rejected the request as malformed.
    ServerRejected,
    /// The server stayed busy past the binding's deadline.
    ServerBusy,
    /// No domain exports an interface under that name.
    UnknownInterface,
    /// The client's and the server's interfaces differ.
    InterfaceMismatch,
    /// A pointer or length outside this domain's memory.
    BadPointer,
    /// The kernel (or this stub) ran out of memory, mappings or A-stack room.
    ResourceExhausted,
    /// No call is in flight.
    NoCall,
    /// The server's reply was malformed or did not fit.
    BadReply,
    /// A domain can not bind to an interface it exports itself.
    SelfBinding,
    /// This domain holds as many bindings as its quota allows.
    QuotaBindings,
    /// This domain's quota of A-stacks is used up.
    QuotaAStacks,
    /// This domain's quota of out-of-band bytes is used up.
    QuotaOutOfBand,
    /// This domain's quota of window mappings is used up.
    QuotaMappings,
    /// A memory would grow past this domain's memory quota.
    QuotaMemory,
    /// The out-of-band segment does not exist.
    NoSegment,
    /// The server has no processors for asynchronous bindings.
    NoProcessors,
    /// A value read from a channel was out of range: the channel was refused.
    ChannelRefused,
    /// The call would re-enter a domain whose arguments a call on this thread lends in
    /// place (a binding made during that call closed a cycle back to it).
    ReentryWhileLent,
}

impl CallError {
    /// Decodes a nonzero status code (`Status::try_from`; unknown codes are kept as they
    /// are). Code 0 is success, not an error: it decodes as `Unknown(0)`.
    pub fn from_code(code: i32) -> CallError {
        match Status::try_from(code) {
            Ok(s) => CallError::from_status(s).unwrap_or(CallError::Unknown(code)),
            Err(c) => CallError::Unknown(c),
        }
    }

    /// The numeric status code.
    pub fn code(self) -> i32 {
        match self {
            CallError::Unknown(c) => c,
            known => known.status().map_or(0, |s| s as i32),
        }
    }

    /// The call reached the server and failed there (LRPC's call-failed exception): the
    /// server trapped, ran past its deadline or was terminated.
    pub fn is_call_failed(self) -> bool {
        self.status().is_some_and(Status::is_call_failed)
    }
}

impl From<CallError> for i32 {
    fn from(e: CallError) -> i32 {
        e.code()
    }
}

impl core::fmt::Display for CallError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.status() {
            Some(s) => write!(f, "{s}"),
            None => write!(f, "unknown status {}", self.code()),
        }
    }
}

impl std::error::Error for CallError {}

fn check(code: i32) -> Result<(), CallError> {
    if code == 0 {
        Ok(())
    } else {
        Err(CallError::from_code(code))
    }
}

/// The A-stacks of one procedure.
struct ProcStacks {
    /// The top of the free list when it is set (0: the top is `free`'s last element). A call
    /// that nests no other call on this procedure takes and returns this one cell, without
    /// touching the list (A-stack addresses are never 0: they lie in host-grown pages).
    top: Cell<u32>,
    /// The rest of the free list, LIFO.
    free: RefCell<Vec<u32>>,
    size: u32,
    /// The direct-linked entry, when the binding has one.
    direct: Option<Direct>,
    /// Function-table index + 1 of the server copy's register entry (0: none).
    fast: u32,
}

/// A direct-linked procedure: its entry in this domain's function table and where its first
/// extent of A-stacks lies in the server copy.
#[derive(Clone, Copy)]
pub(crate) struct Direct {
    pub index: u32,
    pub client_base: u32,
    pub server_base: u32,
    pub span: u32,
    pub borrow: u32,
}

/// A live binding held by this domain as client. Unbinds when dropped.
pub struct Binding {
    handle: u64,
    procs: Box<[ProcStacks]>,
}

impl Binding {
    /// Binds to the interface exported under `name`, whose fingerprint must be
    /// `fingerprint` and which has `nprocs` procedures.
    pub fn bind(name: &str, fingerprint: u64, nprocs: usize) -> Result<Binding, CallError> {
        let mut desc = vec![0u8; lrpc_abi::desc::len(nprocs)];
        let name_len = i32::try_from(name.len()).map_err(|_| CallError::UnknownInterface)?;
        check(sys::bind(
            name.as_ptr() as i32,
            name_len,
            fingerprint as i64,
            desc.as_mut_ptr() as i32,
            desc.len() as i32,
        ))?;
        use lrpc_abi::desc;
        let header = desc::Header::decode(&desc).unwrap_or_default();
        let handle = header.handle;
        let n = header.nprocs as usize;
        let direct = header.flags & desc::FLAG_DIRECT != 0;
        if n != nprocs {
            // The kernel's interface has another shape than this stub's: give the binding
            // back rather than leak it.
            let _ = sys::unbind(handle as i64);
            return Err(CallError::InterfaceMismatch);
        }
        let procs = (0..n)
            .map(|i| {
                let e = desc::Extent::decode(&desc[desc::extent_at(i)..]).unwrap_or_default();
                let d = desc::Direct::decode(&desc[desc::direct_at(n, i)..]).unwrap_or_default();
                let mut free = extent(e);
                ProcStacks {
                    top: Cell::new(free.pop().unwrap_or(0)),
                    free: RefCell::new(free),
                    size: e.size,
                    fast: if direct { d.fast } else { 0 },
                    direct: direct.then(|| Direct {
                        index: d.index,
                        client_base: e.base,
                        server_base: d.server_base,
                        span: e.size.saturating_mul(e.count),
                        borrow: d.borrow,
                    }),
                }
            })
            .collect();
        Ok(Binding { handle, procs })
    }

    /// The Binding Object's handle.
    pub fn handle(&self) -> u64 {
        self.handle
    }

    /// Takes an A-stack of `proc` (LIFO), asking the kernel for more when all are in use.
    #[inline]
    pub(crate) fn take(&self, proc: u32) -> Result<(u32, u32), CallError> {
        let p = self
            .procs
            .get(proc as usize)
            .ok_or(CallError::BadProcedure)?;
        let top = p.top.replace(0);
        if top != 0 {
            return Ok((top, p.size));
        }
        // The free list's borrow ends with this statement: `take_more` borrows it again.
        let top = p.free.borrow_mut().pop();
        match top {
            Some(a) => Ok((a, p.size)),
            None => self.take_more(p, proc),
        }
    }

    /// Every A-stack of `proc` is in use (nested calls): asks the kernel for another extent
    /// (LRPC 5.2) and takes its first A-stack.
    #[cold]
    #[inline(never)]
    fn take_more(&self, p: &ProcStacks, proc: u32) -> Result<(u32, u32), CallError> {
        let mut rec = [0u8; lrpc_abi::desc::EXTENT_LEN];
        check(sys::astacks_more(
            self.handle as i64,
            proc as i32,
            rec.as_mut_ptr() as i32,
        ))?;
        let mut more = extent(lrpc_abi::desc::Extent::decode(&rec).unwrap_or_default());
        let first = more.pop().ok_or(CallError::ResourceExhausted)?;
        p.free.borrow_mut().extend(more);
        Ok((first, p.size))
    }

    /// The direct-linked entry for this A-stack, if the binding is direct-linked and the
    /// A-stack is one the server copy can see (the first extent).
    #[inline]
    pub(crate) fn direct(&self, proc: u32, astack: u32) -> Option<(Direct, u32)> {
        let d = self.procs.get(proc as usize)?.direct?;
        let off = astack.checked_sub(d.client_base)?;
        (off < d.span).then_some((d, d.server_base + off))
    }

    /// The function-table index of the server copy's register entry for `proc`, on a
    /// direct-linked binding whose server has one (a procedure of scalars only). Generated
    /// client stubs call it instead of transferring an A-stack.
    #[inline]
    pub fn fast(&self, proc: u32) -> Option<u32> {
        if cfg!(target_arch = "wasm32") {
            self.procs.get(proc as usize)?.fast.checked_sub(1)
        } else {
            // No function table to call through natively (the SDK only unit-tests there).
            None
        }
    }

    /// Returns an A-stack to its free list.
    #[inline]
    pub(crate) fn put(&self, proc: u32, astack: u32) {
        if let Some(p) = self.procs.get(proc as usize) {
            let below = p.top.replace(astack);
            if below != 0 {
                p.free.borrow_mut().push(below);
            }
        }
    }
}

/// The A-stacks of one extent, listed so that the first one is popped first.
fn extent(e: lrpc_abi::desc::Extent) -> Vec<u32> {
    (0..e.count).rev().map(|i| e.base + i * e.size).collect()
}

impl Drop for Binding {
    fn drop(&mut self) {
        // Handle 0 is never issued: it marks a binding already unbound by `unbind`.
        if self.handle != 0 {
            let _ = sys::unbind(self.handle as i64);
        }
    }
}

/// Bytes of a binding descriptor for `nprocs` procedures.
pub fn desc_len(nprocs: usize) -> usize {
    lrpc_abi::desc::len(nprocs)
}

/// Unbinds explicitly, reporting the kernel's answer.
pub fn unbind(mut b: Binding) -> Result<(), CallError> {
    let h = core::mem::replace(&mut b.handle, 0);
    drop(b);
    check(sys::unbind(h as i64))
}

/// Copy counts of this domain's stubs (see [`rt::Counts`]): `in` copies.
#[unsafe(no_mangle)]
pub extern "C" fn lrpc_in_copies() -> i64 {
    rt::counts().in_copies as i64
}

/// Copy counts of this domain's stubs: bytes the `in` copies moved.
#[unsafe(no_mangle)]
pub extern "C" fn lrpc_in_copied_bytes() -> i64 {
    rt::counts().in_bytes as i64
}

/// Copy counts of this domain's stubs: `out` copies.
#[unsafe(no_mangle)]
pub extern "C" fn lrpc_out_copies() -> i64 {
    rt::counts().out_copies as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_its_own_error_and_codes_round_trip() {
        for &s in Status::ALL {
            match CallError::from_status(s) {
                None => assert_eq!(s, Status::Ok),
                Some(e) => {
                    assert_eq!(e.status(), Some(s));
                    assert_eq!(e.code(), s as i32);
                    assert_eq!(CallError::from_code(s as i32), e);
                    assert_eq!(e.is_call_failed(), s.is_call_failed());
                    assert_eq!(e.to_string(), s.describe());
                }
            }
        }
        assert_eq!(CallError::from_code(7), CallError::BadProcedure);
        assert_eq!(CallError::from_code(-3), CallError::Unknown(-3));
        assert_eq!(CallError::Unknown(4242).code(), 4242);
        assert_eq!(CallError::Unknown(4242).status(), None);
        assert!(CallError::ServerTrapped.is_call_failed());
        assert!(!CallError::StaleBinding.is_call_failed());
        assert!(!CallError::Unknown(1).is_call_failed());
    }

    #[test]
    fn without_a_kernel_binding_fails_cleanly() {
        // Natively the imports answer `NoCall`.
        assert_eq!(
            Binding::bind("lrpc:bench/bench", 1, 4).err(),
            Some(CallError::NoCall)
        );
    }
}
