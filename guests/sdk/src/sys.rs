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
    }

    // SAFETY (all wrappers below): the kernel imports take plain integers; every pointer
    // argument is checked by the kernel against this domain's memory before it is used, so
    // no argument value can make the call unsound on the guest side.
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
    pub fn unbind(handle: i64) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_unbind(handle) }
    }
    #[inline]
    pub fn call(handle: i64, proc: i32, astack: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_call(handle, proc, astack) }
    }
    pub fn astacks_more(handle: i64, proc: i32, extent_ptr: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_astacks_more(handle, proc, extent_ptr) }
    }
    pub fn oob(handle: i64, proc: i32, astack: i32, dir: i32, min_len: i32, seg_ptr: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_oob(handle, proc, astack, dir, min_len, seg_ptr) }
    }
    pub fn reply_oob(min_len: i32, seg_ptr: i32) -> i32 {
        // SAFETY: see above.
        unsafe { lrpc_reply_oob(min_len, seg_ptr) }
    }
}

#[cfg(not(target_arch = "wasm32"))]
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
}

pub use imp::*;
