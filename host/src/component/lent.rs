//! A byte list lowered into a component straight from a core client's linear memory.
//!
//! A core client's call of a component server (`imports::translate`) finds its `list<u8>`
//! argument on the client's A-stack or `in` segment. The client's thread is in the kernel
//! until the call returns, so the bytes can not change while they are lowered: [`Lent`]
//! copies them once, from where they lie into the memory the component's `realloc` gives,
//! instead of into a host buffer first and from there into the component. The component
//! reads its own copy, so what it validates stays as it was.
//!
//! The other way, a `list<u8>` result is lifted out of the component straight into the
//! client's `out` segment when that is large enough ([`LiftedBytes`]), instead of into a host
//! vector and from there into the segment.
//!
//! Both copies are `crate::bulk`'s, which keeps clear of the host `memmove`'s slow
//! placements: A-stacks and segments are page aligned, and the component's allocator
//! places its side freely.
#![allow(
    unsafe_code,
    reason = "lowering and lifting between two Stores' memories; every block is argued"
)]

use crate::bulk::copy;
use std::mem::MaybeUninit;
use wasmtime::ValRaw;
use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext, LowerContext,
};
use wasmtime::component::{ComponentType, Lift, Lower};

/// `len` bytes at `ptr` in a core client's linear memory, lent for one lowering.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Lent {
    ptr: *const u8,
    len: usize,
}

// SAFETY: a `ResultRoom` is a view, not an owner; `ResultRoom::in_memory`'s contract holds
// on any thread, and results are lifted on the calling thread anyway.
unsafe impl Send for ResultRoom {}
// SAFETY: as for `Send`; a shared `ResultRoom` is only copied.
unsafe impl Sync for ResultRoom {}

// SAFETY: a `Lent` is a view, not an owner; `Lent::in_memory`'s contract (the bytes stay
// readable and unwritten until the lowering that uses them ends) holds whichever thread
// lowers them, and lowering runs on the calling thread anyway.
unsafe impl Send for Lent {}
// SAFETY: as for `Send`; a `Lent` is only read.
unsafe impl Sync for Lent {}

impl Lent {
    /// The bytes `at..at + len` of `memory`, or `None` when they are not all in it.
    ///
    /// The kernel's memories never move (`memory_may_move(false)` in a 4 GiB reservation),
    /// so the view stays readable while `store` lives. The caller lends them for one call
    /// whose client can not run until it returns: nothing writes them until the component's
    /// export is entered, after lowering.
    pub(crate) fn in_memory(
        memory: &wasmtime::Memory,
        store: impl wasmtime::AsContext,
        at: usize,
        len: usize,
    ) -> Option<Lent> {
        let end = at.checked_add(len)?;
        let store = store.as_context();
        if end > memory.data_size(&store) {
            return None;
        }
        // In bounds, checked above: the pointer is `at` bytes into the memory's data.
        let ptr = memory.data(&store)[at..].as_ptr();
        Some(Lent { ptr, len })
    }

    /// The number of bytes.
    pub(crate) fn len(self) -> usize {
        self.len
    }

    /// The bytes `from..from + len`, or `None` when they are not all in the view.
    pub(crate) fn sub(self, from: usize, len: usize) -> Option<Lent> {
        let end = from.checked_add(len)?;
        (end <= self.len).then(|| Lent {
            ptr: self.ptr.wrapping_add(from),
            len,
        })
    }

    /// Copies the first `N` bytes, if there are as many.
    pub(crate) fn head<const N: usize>(self) -> Option<[u8; N]> {
        let mut out = [0u8; N];
        (self.len >= N).then(|| {
            // SAFETY: `N` bytes of the view are readable (`in_memory`'s contract); `out` is
            // a private array.
            unsafe { std::ptr::copy_nonoverlapping(self.ptr, out.as_mut_ptr(), N) };
            out
        })
    }

    /// A private copy of the bytes.
    pub(crate) fn to_vec(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len);
        // SAFETY: the view is readable (`in_memory`'s contract); `out` has room for
        // `self.len` bytes, all of which are written before the length is set.
        unsafe {
            copy(self.ptr, out.as_mut_ptr(), self.len);
            out.set_len(self.len);
        }
        out
    }

    /// Lowers the bytes into memory the component allocates; their address there.
    fn store<T>(&self, cx: &mut LowerContext<'_, T>) -> wasmtime::Result<usize> {
        let at = cx.realloc(0, 0, 1, self.len)?;
        let dst = cx
            .as_slice_mut()
            .get_mut(at..)
            .and_then(|d| d.get_mut(..self.len))
            .ok_or_else(|| wasmtime::format_err!("realloc return: beyond end of memory"))?;
        // SAFETY: the view is readable (`in_memory`'s contract) and lies in another Store's
        // memory than `dst`, a slice of the component's memory of `self.len` bytes.
        unsafe { copy(self.ptr, dst.as_mut_ptr(), self.len) };
        Ok(at)
    }
}

// SAFETY: a `Lent` lowers exactly as `[u8]` does (a pointer and a length, both `i32` in the
// canonical ABI); its type check is `[u8]`'s, so it is only ever lowered as a `list<u8>`.
unsafe impl ComponentType for Lent {
    type Lower = [ValRaw; 2];

    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u8] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: writes what `[u8]`'s lowering writes: the flat pair, or the pair at `offset` (in
// bounds: wasmtime checked the parameter area before lowering into it).
unsafe impl Lower for Lent {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _: InterfaceType,
        dst: &mut MaybeUninit<[ValRaw; 2]>,
    ) -> wasmtime::Result<()> {
        let at = self.store(cx)?;
        dst.write([ValRaw::i64(at as i64), ValRaw::i64(self.len as i64)]);
        Ok(())
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        _: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        let at = u32::try_from(self.store(cx)?)?;
        let len = u32::try_from(self.len)?;
        let pair = cx
            .as_slice_mut()
            .get_mut(offset..)
            .and_then(|d| d.get_mut(..8))
            .ok_or_else(|| wasmtime::format_err!("list pointer beyond end of memory"))?;
        pair[..4].copy_from_slice(&at.to_le_bytes());
        pair[4..].copy_from_slice(&len.to_le_bytes());
        Ok(())
    }
}

/// Room in a core client's memory (its `out` segment) where a byte list result is copied
/// as it is lifted out of the component, instead of into a host vector first: see
/// [`LiftedBytes`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResultRoom {
    ptr: *mut u8,
    cap: usize,
}

impl ResultRoom {
    /// The bytes `at..at + cap` of `memory`, or `None` when they are not all in it.
    ///
    /// As for [`Lent::in_memory`]: the view stays writable while `store` lives, and the
    /// caller's client can not run until the call that lands its result there returns.
    pub(crate) fn in_memory(
        memory: &wasmtime::Memory,
        mut store: impl wasmtime::AsContextMut,
        at: usize,
        cap: usize,
    ) -> Option<ResultRoom> {
        let end = at.checked_add(cap)?;
        let data = memory.data_mut(&mut store);
        let ptr = data.get_mut(at..end)?.as_mut_ptr();
        Some(ResultRoom { ptr, cap })
    }
}

thread_local! {
    /// The room a [`LiftedBytes`] lifted on this thread goes to: set by
    /// [`LiftedBytes::onto`] for its extent.
    static LANDING: std::cell::Cell<Option<ResultRoom>> = const { std::cell::Cell::new(None) };
}

/// A `list<u8>` result lifted out of a component: copied straight into the [`ResultRoom`]
/// that [`LiftedBytes::onto`] gave for the call when it fits there (its length), else into a
/// vector.
#[derive(Debug)]
pub(crate) enum LiftedBytes {
    /// This many bytes, copied into the room.
    InRoom(usize),
    /// The bytes, when no room was given or they did not fit it.
    Owned(Vec<u8>),
}

impl LiftedBytes {
    /// Runs `f`, in which the first `LiftedBytes` lifted on this thread goes to `room` if it
    /// fits.
    /// Nested calls each have their own room; the outer one's is back when they return.
    pub(crate) fn onto<R>(room: Option<ResultRoom>, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<ResultRoom>);
        impl Drop for Restore {
            fn drop(&mut self) {
                LANDING.with(|l| l.set(self.0));
            }
        }
        let _restore = Restore(LANDING.with(|l| l.replace(room)));
        f()
    }

    fn land(cx: &mut LiftContext<'_>, at: usize, len: usize) -> wasmtime::Result<LiftedBytes> {
        let src = cx
            .memory()
            .get(at..)
            .and_then(|m| m.get(..len))
            .ok_or_else(|| wasmtime::format_err!("list pointer/length out of bounds of memory"))?;
        match LANDING.with(|l| l.take()) {
            Some(room) if len <= room.cap => {
                // SAFETY: `room` is `room.cap >= len` writable bytes of the client's memory
                // (`ResultRoom::in_memory`'s contract), another Store's memory than `src`'s.
                unsafe { copy(src.as_ptr(), room.ptr, len) };
                Ok(LiftedBytes::InRoom(len))
            }
            _ => Ok(LiftedBytes::Owned(src.to_vec())),
        }
    }
}

// SAFETY: a `LiftedBytes` lifts exactly as `Vec<u8>` does (a pointer and a length); its type
// check is `[u8]`'s, so it is only ever lifted from a `list<u8>`.
unsafe impl ComponentType for LiftedBytes {
    type Lower = [ValRaw; 2];

    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <[u8] as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: reads the pair as `Vec<u8>`'s lifting does, and checks the bytes are in memory.
unsafe impl Lift for LiftedBytes {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        _: InterfaceType,
        src: &[ValRaw; 2],
    ) -> wasmtime::Result<LiftedBytes> {
        LiftedBytes::land(cx, src[0].get_u32() as usize, src[1].get_u32() as usize)
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        _: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<LiftedBytes> {
        let word = |i: usize| {
            bytes
                .get(i..i + 4)
                .and_then(|b| b.try_into().ok())
                .map(u32::from_le_bytes)
                .ok_or_else(|| wasmtime::format_err!("list pointer/length out of bounds"))
        };
        LiftedBytes::land(cx, word(0)? as usize, word(4)? as usize)
    }
}
