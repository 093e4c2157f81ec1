//! The kernel's imports: the functions of the wasm import module `lrpc`.
//!
//! Each one takes and returns plain integers. A pointer is an address in this domain's
//! memory, and the kernel checks it before use. Most return a status code: 0 is success,
//! anything else a [`CallError`](crate::CallError) code. `lrpc_abi::import` states each
//! contract; every function below links to its entry there.
//!
//! Generated stubs and this crate's types call these functions. A plugin seldom needs to.
//!
//! On targets other than wasm32 there is no kernel. The functions exist so that code using
//! the SDK compiles and unit-tests natively. There they answer every call with
//! [`Status::NoCall`](crate::Status::NoCall).

/// The imports themselves, as the kernel provides them.
#[cfg(target_arch = "wasm32")]
mod imp {
    #[link(wasm_import_module = "lrpc")]
    unsafe extern "C" {
        pub(super) fn bind(
            name_ptr: i32,
            name_len: i32,
            fingerprint: i64,
            desc_ptr: i32,
            desc_cap: i32,
        ) -> i32;
        pub(super) fn unbind(handle: i64) -> i32;
        pub(super) fn call(handle: i64, proc: i32, astack: i32) -> i32;
        pub(super) fn astacks_more(handle: i64, proc: i32, extent_ptr: i32) -> i32;
        pub(super) fn oob(
            handle: i64,
            proc: i32,
            astack: i32,
            dir: i32,
            min_len: i32,
            seg_ptr: i32,
        ) -> i32;
        pub(super) fn reply_oob(min_len: i32, seg_ptr: i32) -> i32;
        pub(super) fn channel_bind(
            name_ptr: i32,
            name_len: i32,
            fingerprint: i64,
            slots: i32,
            desc_ptr: i32,
            desc_cap: i32,
        ) -> i32;
        pub(super) fn channel_wait(handle: i64, rep_tail: i32, timeout_us: i32) -> i32;
        pub(super) fn channel_unbind(handle: i64) -> i32;
        pub(super) fn multi_start(members_ptr: i32, n: i32, proc: i32, timeout_ms: i32) -> i32;
        pub(super) fn multi_next(id: i32, next_ptr: i32) -> i32;
        pub(super) fn multi_end(id: i32) -> i32;
    }
}

/// Without a kernel, every import answers `Status::NoCall`. They are `unsafe` only to be
/// called as the real imports are.
#[cfg(not(target_arch = "wasm32"))]
mod imp {
    const NO: i32 = lrpc_abi::Status::NoCall as i32;
    pub(super) unsafe fn bind(_: i32, _: i32, _: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn unbind(_: i64) -> i32 {
        NO
    }
    pub(super) unsafe fn call(_: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn astacks_more(_: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn oob(_: i64, _: i32, _: i32, _: i32, _: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn reply_oob(_: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn channel_bind(_: i32, _: i32, _: i64, _: i32, _: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn channel_wait(_: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn channel_unbind(_: i64) -> i32 {
        NO
    }
    pub(super) unsafe fn multi_start(_: i32, _: i32, _: i32, _: i32) -> i32 {
        -NO
    }
    pub(super) unsafe fn multi_next(_: i32, _: i32) -> i32 {
        NO
    }
    pub(super) unsafe fn multi_end(_: i32) -> i32 {
        NO
    }
}

// SAFETY (every function below): the kernel imports take plain integers. The kernel checks
// every pointer argument against this domain's memory before it uses it, so no argument
// value can make a call unsound on the guest side. The native stand-ins read nothing.

/// The `bind` import ([`lrpc_abi::import::BIND`]): binds to the interface named by the
/// UTF-8 at `name_ptr`, writing the binding descriptor at `desc_ptr`; returns a status.
#[inline]
pub fn bind(name_ptr: i32, name_len: i32, fingerprint: i64, desc_ptr: i32, desc_cap: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::bind(name_ptr, name_len, fingerprint, desc_ptr, desc_cap) }
}

/// The `unbind` import ([`lrpc_abi::import::UNBIND`]): revokes binding `handle`.
#[inline]
pub fn unbind(handle: i64) -> i32 {
    // SAFETY: see above.
    unsafe { imp::unbind(handle) }
}

/// The `call` import ([`lrpc_abi::import::CALL`]): calls procedure `proc` of binding
/// `handle` with the A-stack at `astack`; returns a status.
#[inline]
pub fn call(handle: i64, proc: i32, astack: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::call(handle, proc, astack) }
}

/// The `astacks_more` import ([`lrpc_abi::import::ASTACKS_MORE`]): another extent of
/// A-stacks for `proc`, its record written at `extent_ptr`.
#[inline]
pub fn astacks_more(handle: i64, proc: i32, extent_ptr: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::astacks_more(handle, proc, extent_ptr) }
}

/// The `oob` import ([`lrpc_abi::import::OOB`]): an out-of-band segment of at least
/// `min_len` bytes for that A-stack, its address and capacity written at `seg_ptr`.
#[inline]
pub fn oob(handle: i64, proc: i32, astack: i32, dir: i32, min_len: i32, seg_ptr: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::oob(handle, proc, astack, dir, min_len, seg_ptr) }
}

/// The `reply_oob` import ([`lrpc_abi::import::REPLY_OOB`]): the current call's result
/// segment, of at least `min_len` bytes, its address and capacity written at `seg_ptr`.
#[inline]
pub fn reply_oob(min_len: i32, seg_ptr: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::reply_oob(min_len, seg_ptr) }
}

/// The `channel_bind` import ([`lrpc_abi::import::CHANNEL_BIND`]): an asynchronous
/// binding with `slots` slots (0: the default), its descriptor written at `desc_ptr`.
#[inline]
pub fn channel_bind(
    name_ptr: i32,
    name_len: i32,
    fingerprint: i64,
    slots: i32,
    desc_ptr: i32,
    desc_cap: i32,
) -> i32 {
    // SAFETY: see above.
    unsafe { imp::channel_bind(name_ptr, name_len, fingerprint, slots, desc_ptr, desc_cap) }
}

/// The `channel_wait` import ([`lrpc_abi::import::CHANNEL_WAIT`]): waits (or donates
/// this processor to the server) until the reply head moves past `rep_tail`.
#[inline]
pub fn channel_wait(handle: i64, rep_tail: i32, timeout_us: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::channel_wait(handle, rep_tail, timeout_us) }
}

/// The `channel_unbind` import ([`lrpc_abi::import::CHANNEL_UNBIND`]): closes channel
/// `handle`.
#[inline]
pub fn channel_unbind(handle: i64) -> i32 {
    // SAFETY: see above.
    unsafe { imp::channel_unbind(handle) }
}

/// The `multi_start` import ([`lrpc_abi::import::MULTI_START`]): starts a MultiRPC on the
/// `n` member records at `members_ptr`; its id, or the negated refusal status.
#[inline]
pub fn multi_start(members_ptr: i32, n: i32, proc: i32, timeout_ms: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::multi_start(members_ptr, n, proc, timeout_ms) }
}

/// The `multi_next` import ([`lrpc_abi::import::MULTI_NEXT`]): the MultiRPC's next
/// event, its record written at `next_ptr`.
#[inline]
pub fn multi_next(id: i32, next_ptr: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::multi_next(id, next_ptr) }
}

/// The `multi_end` import ([`lrpc_abi::import::MULTI_END`]): ends MultiRPC `id`.
#[inline]
pub fn multi_end(id: i32) -> i32 {
    // SAFETY: see above.
    unsafe { imp::multi_end(id) }
}
