//! The kernel imports (see `lrpc_abi::import` for their contracts). On targets other than
//! wasm32 there is no kernel: the functions exist so that code using the SDK compiles and
//! unit-tests natively, and answer every call with `Status::NoCall`.

#[cfg(target_arch = "wasm32")]
mod imp {
    #[link(wasm_import_module = "lrpc")]
    unsafe extern "C" {
        #[link_name = "bind"]
        fn lrpc_bind(
            name_ptr: i32,
            name_len: i32,
            fingerprint: i64,
            desc_ptr: i32,
            desc_cap: i32,
        ) -> i32;
        #[link_name = "unbind"]
        fn lrpc_unbind(handle: i64) -> i32;
        #[link_name = "call"]
        fn lrpc_call(handle: i64, proc: i32, astack: i32) -> i32;
        #[link_name = "astacks_more"]
        fn lrpc_astacks_more(handle: i64, proc: i32, extent_ptr: i32) -> i32;
        #[link_name = "oob"]
        fn lrpc_oob(
            handle: i64,
            proc: i32,
            astack: i32,
            dir: i32,
            min_len: i32,
            seg_ptr: i32,
        ) -> i32;
        #[link_name = "reply_oob"]
        fn lrpc_reply_oob(min_len: i32, seg_ptr: i32) -> i32;
        #[link_name = "channel_bind"]
        fn lrpc_channel_bind(
            name_ptr: i32,
            name_len: i32,
            fingerprint: i64,
            slots: i32,
            desc_ptr: i32,
            desc_cap: i32,
        ) -> i32;
        #[link_name = "channel_wait"]
        fn lrpc_channel_wait(handle: i64, rep_tail: i32, timeout_us: i32) -> i32;
        #[link_name = "channel_unbind"]
        fn lrpc_channel_unbind(handle: i64) -> i32;
        #[link_name = "multi_start"]
        fn lrpc_multi_start(members_ptr: i32, n: i32, proc: i32, timeout_ms: i32) -> i32;
        #[link_name = "multi_next"]
        fn lrpc_multi_next(id: i32, next_ptr: i32) -> i32;
        #[link_name = "multi_end"]
        fn lrpc_multi_end(id: i32) -> i32;
    }

    // SAFETY (all wrappers below): the kernel imports take plain integers; every pointer
    // argument is checked by the kernel against this domain's memory before it is used, so
    // no argument value can make the call unsound on the guest side.
    /// The `bind` import ([`lrpc_abi::import::BIND`]): binds to the interface named by the
    /// UTF-8 at `name_ptr`, writing the binding descriptor at `desc_ptr`; returns a status.
    pub fn bind(
        name_ptr: i32,
        name_len: i32,
        fingerprint: i64,
        desc_ptr: i32,
        desc_cap: i32,
    ) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_bind(name_ptr, name_len, fingerprint, desc_ptr, desc_cap) }
    }
    /// The `unbind` import ([`lrpc_abi::import::UNBIND`]): revokes binding `handle`.
    pub fn unbind(handle: i64) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_unbind(handle) }
    }
    /// The `call` import ([`lrpc_abi::import::CALL`]): calls procedure `proc` of binding
    /// `handle` with the A-stack at `astack`; returns a status.
    #[inline]
    pub fn call(handle: i64, proc: i32, astack: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_call(handle, proc, astack) }
    }
    /// The `astacks_more` import ([`lrpc_abi::import::ASTACKS_MORE`]): another extent of
    /// A-stacks for `proc`, its record written at `extent_ptr`.
    pub fn astacks_more(handle: i64, proc: i32, extent_ptr: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_astacks_more(handle, proc, extent_ptr) }
    }
    /// The `oob` import ([`lrpc_abi::import::OOB`]): an out-of-band segment of at least
    /// `min_len` bytes for that A-stack, its address and capacity written at `seg_ptr`.
    pub fn oob(handle: i64, proc: i32, astack: i32, dir: i32, min_len: i32, seg_ptr: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_oob(handle, proc, astack, dir, min_len, seg_ptr) }
    }
    /// The `reply_oob` import ([`lrpc_abi::import::REPLY_OOB`]): the current call's result
    /// segment, of at least `min_len` bytes, its address and capacity written at `seg_ptr`.
    pub fn reply_oob(min_len: i32, seg_ptr: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_reply_oob(min_len, seg_ptr) }
    }
    /// The `channel_bind` import ([`lrpc_abi::import::CHANNEL_BIND`]): an asynchronous
    /// binding with `slots` slots (0: the default), its descriptor written at `desc_ptr`.
    pub fn channel_bind(
        name_ptr: i32,
        name_len: i32,
        fingerprint: i64,
        slots: i32,
        desc_ptr: i32,
        desc_cap: i32,
    ) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_channel_bind(name_ptr, name_len, fingerprint, slots, desc_ptr, desc_cap) }
    }
    /// The `channel_wait` import ([`lrpc_abi::import::CHANNEL_WAIT`]): waits (or donates
    /// this processor to the server) until the reply head moves past `rep_tail`.
    pub fn channel_wait(handle: i64, rep_tail: i32, timeout_us: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_channel_wait(handle, rep_tail, timeout_us) }
    }
    /// The `channel_unbind` import ([`lrpc_abi::import::CHANNEL_UNBIND`]): closes channel
    /// `handle`.
    pub fn channel_unbind(handle: i64) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_channel_unbind(handle) }
    }
    /// The `multi_start` import ([`lrpc_abi::import::MULTI_START`]): starts a MultiRPC on the
    /// `n` member records at `members_ptr`; its id, or the negated refusal status.
    pub fn multi_start(members_ptr: i32, n: i32, proc: i32, timeout_ms: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_multi_start(members_ptr, n, proc, timeout_ms) }
    }
    /// The `multi_next` import ([`lrpc_abi::import::MULTI_NEXT`]): the MultiRPC's next
    /// event, its record written at `next_ptr`.
    pub fn multi_next(id: i32, next_ptr: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_multi_next(id, next_ptr) }
    }
    /// The `multi_end` import ([`lrpc_abi::import::MULTI_END`]): ends MultiRPC `id`.
    pub fn multi_end(id: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_multi_end(id) }
    }
}

/// Without a kernel, every import answers `Status::NoCall`.
#[cfg(not(target_arch = "wasm32"))]
#[allow(
    missing_docs,
    reason = "the same functions as the kernel imports above"
)]
mod imp {
    const NO: i32 = lrpc_abi::Status::NoCall as i32;
    pub fn bind(_: i32, _: i32, _: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub fn unbind(_: i64) -> i32 {
        NO
    }
    pub fn call(_: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub fn astacks_more(_: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub fn oob(_: i64, _: i32, _: i32, _: i32, _: i32, _: i32) -> i32 {
        NO
    }
    pub fn reply_oob(_: i32, _: i32) -> i32 {
        NO
    }
    pub fn channel_bind(_: i32, _: i32, _: i64, _: i32, _: i32, _: i32) -> i32 {
        NO
    }
    pub fn channel_wait(_: i64, _: i32, _: i32) -> i32 {
        NO
    }
    pub fn channel_unbind(_: i64) -> i32 {
        NO
    }
    pub fn multi_start(_: i32, _: i32, _: i32, _: i32) -> i32 {
        -NO
    }
    pub fn multi_next(_: i32, _: i32) -> i32 {
        NO
    }
    pub fn multi_end(_: i32) -> i32 {
        NO
    }
}

pub use imp::*;
