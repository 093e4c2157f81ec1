//! A client that speaks the raw kernel ABI: made-up handles, stray A-stacks, wrong
//! fingerprints, and scans of its own memory.

use lrpc_sdk::sys;
use std::cell::RefCell;

thread_local! {
    static DESC: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

const NAME: &str = "lrpc:bench/bench";
const PROCS: usize = 4;

/// Binds `lrpc:bench/bench` claiming `fingerprint`; returns the handle or `-(status)`.
#[unsafe(no_mangle)]
pub extern "C" fn bind_raw(fingerprint: i64) -> i64 {
    let mut desc = vec![0u8; lrpc_sdk::desc_len(PROCS)];
    let s = sys::bind(
        NAME.as_ptr() as i32,
        NAME.len() as i32,
        fingerprint,
        desc.as_mut_ptr() as i32,
        desc.len() as i32,
    );
    if s != 0 {
        return -i64::from(s);
    }
    let h = lrpc_sdk::desc::Header::decode(&desc).map_or(0, |hd| hd.handle as i64);
    DESC.with(|d| *d.borrow_mut() = desc);
    h
}

/// The handle of the last successful `bind_raw`.
#[unsafe(no_mangle)]
pub extern "C" fn handle() -> i64 {
    DESC.with(|d| lrpc_sdk::desc::Header::decode(&d.borrow()).map_or(0, |hd| hd.handle as i64))
}

/// Client address of the first A-stack of `proc`, from the last descriptor.
#[unsafe(no_mangle)]
pub extern "C" fn astack(proc: i32) -> i32 {
    let at = lrpc_sdk::desc::extent_at(proc.max(0) as usize);
    DESC.with(|d| {
        d.borrow()
            .get(at..)
            .and_then(lrpc_sdk::desc::Extent::decode)
            .map_or(0, |e| e.base as i32)
    })
}

/// A raw call.
#[unsafe(no_mangle)]
pub extern "C" fn call_raw(handle: i64, proc: i32, astack: i32) -> i32 {
    sys::call(handle, proc, astack)
}

/// `n` raw calls on one A-stack (the kernel's path without any stub on the client side);
/// the first status that is not 0, or 0.
#[unsafe(no_mangle)]
pub extern "C" fn call_loop(handle: i64, proc: i32, astack: i32, n: i32) -> i32 {
    for _ in 0..n {
        let s = sys::call(handle, proc, astack);
        if s != 0 {
            return s;
        }
    }
    0
}

/// A raw unbind.
#[unsafe(no_mangle)]
pub extern "C" fn unbind_raw(handle: i64) -> i32 {
    sys::unbind(handle)
}

/// Reads one byte of this domain's memory.
#[unsafe(no_mangle)]
pub extern "C" fn peek(addr: i32) -> i32 {
    // SAFETY: any address is fine for a wasm load: out of bounds traps, which is the point.
    i32::from(unsafe { core::ptr::read_volatile(addr as u32 as usize as *const u8) })
}

/// Writes one byte of this domain's memory.
#[unsafe(no_mangle)]
pub extern "C" fn poke(addr: i32, v: i32) {
    // SAFETY: as for `peek`; the caller picks an address it may clobber.
    unsafe { core::ptr::write_volatile(addr as u32 as usize as *mut u8, v as u8) }
}

/// Pages of this domain's memory.
#[unsafe(no_mangle)]
pub extern "C" fn mem_pages() -> i32 {
    memory_pages() as i32
}

fn memory_pages() -> usize {
    #[cfg(target_arch = "wasm32")]
    return core::arch::wasm32::memory_size(0);
    #[cfg(not(target_arch = "wasm32"))]
    return 0;
}

/// Counts 8-byte-aligned occurrences of `pattern` in this domain's whole memory.
#[unsafe(no_mangle)]
pub extern "C" fn scan(pattern: i64) -> i32 {
    let end = memory_pages() * 65536;
    let mut n = 0;
    let mut at = 8; // skip the null page's first word
    while at + 8 <= end {
        // SAFETY: `at + 8 <= end` is inside this domain's memory; a volatile load through a
        // raw pointer forms no reference.
        let v = unsafe { core::ptr::read_volatile(at as *const i64) };
        if v == pattern {
            n += 1;
        }
        at += 8;
    }
    n
}

/// A raw `bind` with every argument chosen by the caller.
#[unsafe(no_mangle)]
pub extern "C" fn bind_any(
    name_ptr: i32,
    name_len: i32,
    fingerprint: i64,
    desc_ptr: i32,
    desc_cap: i32,
) -> i32 {
    sys::bind(name_ptr, name_len, fingerprint, desc_ptr, desc_cap)
}

/// A raw `astacks_more`.
#[unsafe(no_mangle)]
pub extern "C" fn more_raw(handle: i64, proc: i32, extent_ptr: i32) -> i32 {
    sys::astacks_more(handle, proc, extent_ptr)
}

/// A raw `oob`.
#[unsafe(no_mangle)]
pub extern "C" fn oob_raw(
    handle: i64,
    proc: i32,
    astack: i32,
    dir: i32,
    min_len: i32,
    seg_ptr: i32,
) -> i32 {
    sys::oob(handle, proc, astack, dir, min_len, seg_ptr)
}

/// A raw `reply_oob` (outside any call).
#[unsafe(no_mangle)]
pub extern "C" fn reply_raw(min_len: i32, seg_ptr: i32) -> i32 {
    sys::reply_oob(min_len, seg_ptr)
}

/// A scratch area of this domain's memory for the kernel to write into.
#[unsafe(no_mangle)]
pub extern "C" fn scratch() -> i32 {
    thread_local! {
        static AREA: RefCell<Vec<u8>> = RefCell::new(vec![0; 4096]);
    }
    AREA.with(|a| a.borrow_mut().as_mut_ptr() as i32)
}

thread_local! {
    static CHAN_BASE: core::cell::Cell<i32> = const { core::cell::Cell::new(0) };
}

/// Binds `lrpc:bench/bench` asynchronously claiming `fingerprint`, with `slots` slots;
/// returns the channel's handle or `-(status)`, and remembers where its segment is.
#[unsafe(no_mangle)]
pub extern "C" fn chan_bind_raw(fingerprint: i64, slots: i32) -> i64 {
    let mut rec = [0u8; lrpc_sdk::chan::DESC_LEN];
    let s = sys::channel_bind(
        NAME.as_ptr() as i32,
        NAME.len() as i32,
        fingerprint,
        slots,
        rec.as_mut_ptr() as i32,
        rec.len() as i32,
    );
    if s != 0 {
        return -i64::from(s);
    }
    let d = lrpc_sdk::chan::Desc::decode(&rec).unwrap_or_default();
    CHAN_BASE.with(|c| c.set(d.base as i32));
    d.handle as i64
}

/// Where the segment of the channel `chan_bind_raw` made lies in this domain's memory.
#[unsafe(no_mangle)]
pub extern "C" fn chan_base() -> i32 {
    CHAN_BASE.with(|c| c.get())
}

/// A raw `channel_bind` with every argument chosen by the caller.
#[unsafe(no_mangle)]
pub extern "C" fn chan_bind_any(
    name_ptr: i32,
    name_len: i32,
    fingerprint: i64,
    slots: i32,
    desc_ptr: i32,
    desc_cap: i32,
) -> i32 {
    sys::channel_bind(name_ptr, name_len, fingerprint, slots, desc_ptr, desc_cap)
}

/// A raw `channel_wait`.
#[unsafe(no_mangle)]
pub extern "C" fn chan_wait_raw(handle: i64, rep_tail: i32, timeout_us: i32) -> i32 {
    sys::channel_wait(handle, rep_tail, timeout_us)
}

/// A raw `channel_unbind`.
#[unsafe(no_mangle)]
pub extern "C" fn chan_unbind_raw(handle: i64) -> i32 {
    sys::channel_unbind(handle)
}

/// A raw `multi_start`.
#[unsafe(no_mangle)]
pub extern "C" fn multi_start_raw(members_ptr: i32, n: i32, proc: i32, timeout_ms: i32) -> i32 {
    sys::multi_start(members_ptr, n, proc, timeout_ms)
}

/// A raw `multi_next`.
#[unsafe(no_mangle)]
pub extern "C" fn multi_next_raw(id: i32, next_ptr: i32) -> i32 {
    sys::multi_next(id, next_ptr)
}

/// A raw `multi_end`.
#[unsafe(no_mangle)]
pub extern "C" fn multi_end_raw(id: i32) -> i32 {
    sys::multi_end(id)
}
