//! Per-request isolation of a core domain: the state a replica had when it was created, and
//! putting it back in place (see [`Isolation`]).
//!
//! **What is saved.** Right after instantiation (the start function included, before any
//! binding exists), and again when the embedder says the domain is initialized
//! (`Domain::capture_fresh_state`, after binding it, say), the guest's pages of the
//! replica's linear memory (all of it but window space) become a private copy-on-write
//! mapping of a memory file holding their bytes (`MemoryRange::snapshot`; all-zero pages
//! stay holes), and the values of every mutable global and every table entry the module
//! writes are saved (those no instruction writes keep their first values) — reachable
//! because the kernel rewrote the module to export them (`isolate`), together with the
//! flags that stand in for dropped data and element segments.
//!
//! **What a reset does.** It lists the pages of the snapshot's range that hold private
//! copies — the pages the guest wrote since they were mapped (`PAGEMAP_SCAN`, Linux 6.7 and
//! later; see `astack::scan`) — and copies the snapshot's bytes back into them (zeros into
//! pages past the snapshot). The page tables stay as they are, so the next request takes no
//! faults on those pages, and no processor's TLB is flushed. Where the system can not list
//! them, or a request wrote more than `PUT_BACK_MAX` pages, `madvise(MADV_DONTNEED)` drops
//! them instead: they go back to the system and read as the snapshot again. Either way the
//! cost grows with the pages written, not with the memory's size. Then every saved global
//! and table entry is written back. Windows (A-stacks, out-of-band segments, channels) lie
//! on pages the host grew, outside the snapshot, so they are not touched: their contents
//! belong to the pair.
//!
//! **The choice, measured** (`benches/reset.rs`, release build on the shared 2-core
//! machine, medians): after a request wrote 1, 4 and 64 host pages, an in-place reset took
//! 1.3, 1.8 and — in a 64 MiB memory — 7.8 µs; 4 pages in a 64 MiB memory cost 1.53× 4 pages
//! in a 64 KiB one (2.6 against 1.8 µs). That difference is the scan itself: the system
//! reads every entry of each page table the range reaches (512 pages' worth each), so a
//! 64 KiB range took 0.6 µs and any range from 2 MiB to 1 GiB 1.2–1.9 µs with four pages
//! written (the ioctl timed alone, in C, on the same machine). The cost stops growing at
//! 2 MiB: it follows the page tables the memory has (one per 2 MiB the guest touched).
//! A fresh instance of the same small module from
//! wasmtime's pooling allocator (copy-on-write images; instantiating and dropping the
//! Store, which decommits what the request touched) took 5.6–6.1 µs for 1–4 pages and
//! 28 µs for 64, and for a domain with bindings it would also have to map every A-stack
//! window again. So the kernel resets in place: it keeps the instance, its Store and its
//! windows. Copying back rather than dropping pages is what a server needs: dropping looks
//! as cheap in that single-threaded bench, but in the edge under load each page-table change
//! interrupts the other processor (a TLB shootdown), and an isolated three-plugin chain
//! served 0.09 of the reused chain's requests per second that way, 0.54 copying back
//! (`host/runtime/bench/run.sh`).
//!
//! **Growth.** wasmtime can not shrink a memory or a table. The memory size the guest sees
//! is a global of the rewritten module, reset like the others: pages a request grew stay,
//! zeroed, above it, and the next `memory.grow` hands them out again. A table the guest
//! grew can not be put back in place: the kernel terminates its domain instead (a
//! supervisor restarts it, as after a crash).
//!
//! **Requests through bindings.** A call that reaches an isolated replica through a binding
//! belongs to the request of the top-level call that made it (`DomainFunc::call` into the
//! client, the edge's driver say). Each top-level call takes a number of its own (`begin_request`),
//! kept by its thread while it runs; a replica notes the request it last served, and the
//! call path puts it back into its fresh state before a call of another request enters it
//! (`Replica::enter_request`). So with several replicas and concurrent requests, each
//! request meets a clean replica, and two calls of one request (or a re-entry) share it.
//! Request 0 is "none known" (a thread with no top-level call): every call is its own.
//! A call through a binding that traps or runs past its deadline in an isolated replica
//! does not terminate the server either: the call path resets the replica at once, so the
//! next call meets it clean (unless the call re-entered a replica suspended lower on the
//! thread's stack: resetting that one would change the state under its running call, so
//! the domain is terminated as any other).

use super::fresh::Fresh;
use super::records::{DomainData, Replica};
use wasmtime::{AsContextMut, Ref, Store, StoreContextMut, Val};

pub use super::fresh::Isolation;
pub(crate) use super::fresh::{NotReset, adopt_request, begin_request, current_request};

/// Saves the fresh state of a replica just instantiated from a module rewritten by
/// `isolate::rewrite` (`globals` and `tables`: the names it exports them under).
pub(crate) fn snapshot(
    store: &mut Store<DomainData>,
    replica: &Replica,
    globals: &[String],
    tables: &[String],
) -> Result<(), String> {
    let size = replica
        .instance
        .get_global(&mut *store, crate::isolate::SIZE_EXPORT)
        .ok_or("the rewritten module does not export its size")?;
    let mut fresh = Fresh {
        size,
        image: None,
        globals: Vec::with_capacity(globals.len()),
        tables: Vec::with_capacity(tables.len()),
        dirty: false,
        request: 0,
    };
    for name in globals {
        let g = replica
            .instance
            .get_global(&mut *store, name)
            .ok_or_else(|| format!("the rewritten module does not export `{name}`"))?;
        fresh.globals.push((g, Val::I32(0)));
    }
    for name in tables {
        let t = replica
            .instance
            .get_table(&mut *store, name)
            .ok_or_else(|| format!("the rewritten module does not export `{name}`"))?;
        fresh.tables.push((t, Vec::new()));
    }
    replica.capture(store, &mut fresh)?;
    store.data_mut().fresh = Some(Box::new(fresh));
    Ok(())
}

impl Replica {
    /// Makes the replica's state now its fresh state: the memory's guest pages become a
    /// new snapshot, the globals' and tables' values are read again.
    fn capture(&self, store: &mut Store<DomainData>, fresh: &mut Fresh) -> Result<(), String> {
        let size = self.memory.data_size(&*store);
        let ranges = self.guest_ranges(size);
        fresh.image = Some(
            self.range(size)
                .snapshot(&ranges)
                .map_err(|e| format!("taking the memory snapshot failed: {e}"))?,
        );
        for (g, v) in &mut fresh.globals {
            *v = g.get(&mut *store);
            if !matches!(
                v,
                Val::I32(_)
                    | Val::I64(_)
                    | Val::F32(_)
                    | Val::F64(_)
                    | Val::V128(_)
                    | Val::FuncRef(_)
            ) {
                return Err("a global holds a reference the kernel can not save".into());
            }
        }
        for (t, entries) in &mut fresh.tables {
            entries.clear();
            for i in 0..t.size(&*store) {
                match t.get(&mut *store, i) {
                    Some(Ref::Func(f)) => entries.push(f),
                    _ => return Err("a table holds entries other than funcrefs".into()),
                }
            }
        }
        fresh.dirty = false;
        Ok(())
    }

    /// Makes the replica's state now its fresh state (see `Domain::capture_fresh_state`).
    /// The caller holds the store, and no code runs in it. `Ok(false)`: the replica is not
    /// isolated.
    pub(crate) fn recapture(&self, store: &mut Store<DomainData>) -> Result<bool, String> {
        let Some(mut fresh) = store.data_mut().fresh.take() else {
            return Ok(false);
        };
        let r = self.capture(store, &mut fresh);
        store.data_mut().fresh = Some(fresh);
        r.map(|()| true)
    }

    /// Whether this replica keeps a fresh state to go back to.
    pub(crate) fn is_isolated(store: &Store<DomainData>) -> bool {
        store.data().fresh.is_some()
    }

    /// Puts the replica back into its fresh state if guest code ran since the last reset
    /// (`force`: even if none did). The caller holds the store, and no code runs in it.
    pub(crate) fn reset(
        &self,
        mut store: impl AsContextMut<Data = DomainData>,
        force: bool,
    ) -> Result<(), NotReset> {
        let mut store = store.as_context_mut();
        let Some(fresh) = store.data_mut().fresh.take() else {
            return Ok(());
        };
        let result = if fresh.dirty || force {
            self.restore(store.as_context_mut(), &fresh)
        } else {
            Ok(())
        };
        let mut fresh = fresh;
        fresh.dirty = result.is_err();
        fresh.request = 0;
        store.data_mut().fresh = Some(fresh);
        result
    }

    /// Before a call through a binding enters this replica (whose store the caller holds,
    /// no code running in it): puts the replica back into its fresh state if guest code of
    /// another request ran in it since its last reset, and notes this thread's request as
    /// the one it serves. Does nothing for a replica that is not isolated.
    #[inline]
    pub(crate) fn enter_request(
        &self,
        mut store: StoreContextMut<'_, DomainData>,
    ) -> Result<(), NotReset> {
        let Some(fresh) = store.data_mut().fresh.as_mut() else {
            return Ok(());
        };
        let request = current_request();
        if request != 0 && fresh.request == request {
            return Ok(());
        }
        self.reset(store.as_context_mut(), false)?;
        if let Some(fresh) = store.data_mut().fresh.as_mut() {
            fresh.request = request;
            fresh.dirty = true;
        }
        Ok(())
    }

    fn restore(
        &self,
        mut store: StoreContextMut<'_, DomainData>,
        fresh: &Fresh,
    ) -> Result<(), NotReset> {
        let size = self.memory.data_size(&store);
        for (t, entries) in &fresh.tables {
            if t.size(&store) != entries.len() as u64 {
                return Err(NotReset::Grown("table"));
            }
        }
        // Every guest page: those of the snapshot read as it again, those grown since (which
        // stay, above the size the guest sees) as zeros.
        let range = self.range(size);
        let image = fresh
            .image
            .as_ref()
            .ok_or_else(|| NotReset::Io(std::io::Error::other("no snapshot was taken")))?;
        for (off, len) in self.guest_ranges(size) {
            range.put_back(image, off, len).map_err(NotReset::Io)?;
        }
        let mut ctx = store.as_context_mut();
        for (g, v) in &fresh.globals {
            // The values were read from these very globals, so the types match.
            g.set(&mut ctx, *v)
                .map_err(|e| NotReset::Io(std::io::Error::other(e.to_string())))?;
        }
        for (t, entries) in &fresh.tables {
            for (i, f) in entries.iter().enumerate() {
                t.set(&mut ctx, i as u64, Ref::Func(*f))
                    .map_err(|e| NotReset::Io(std::io::Error::other(e.to_string())))?;
            }
        }
        // Windows placed since the snapshot (bindings are not undone) lie below the top the
        // host grew to: the guest's size covers them, so its next `memory.grow` does not
        // hand their pages out.
        let high = self.window_high() / crate::astack::map::WASM_PAGE;
        if let Ok(high) = i32::try_from(high)
            && fresh.size.get(&mut ctx).i32().is_some_and(|s| s < high)
        {
            fresh
                .size
                .set(&mut ctx, Val::I32(high))
                .map_err(|e| NotReset::Io(std::io::Error::other(e.to_string())))?;
        }
        Ok(())
    }
}
