//! Per-request isolation of a core domain: the state a replica had when it was created, and
//! putting it back in place (see [`Isolation`](crate::kernel::Isolation)).
//!
//! **What is saved.** Right after instantiation (the start function included, before any
//! binding exists), and again when the embedder says the domain is initialized
//! (`Domain::capture_fresh_state`, after binding it, say), the guest's pages of the
//! replica's linear memory (all of it but window space) become a private copy-on-write
//! mapping of a memory file holding their bytes (`MemoryRange::snapshot`; all-zero pages
//! stay holes), and the values of every mutable global and every table entry the module
//! defines are saved — reachable because the kernel rewrote the module to export them
//! (`isolate`), together with the flags that stand in for dropped data and element
//! segments.
//!
//! **What a reset does.** `madvise(MADV_DONTNEED)` over the snapshot's range: the pages the
//! guest wrote go back to the system and read as the snapshot again (the cost grows with
//! the pages touched, not with the memory's size); then every saved global and table entry
//! is written back. Windows (A-stacks, out-of-band segments, channels) lie on pages the host
//! grew, outside the snapshot, so they are not touched: their contents belong to the pair.
//!
//! **The choice, measured** (`benches/reset.rs`, release build on the shared 2-core
//! machine): see the numbers in the kernel chapter (`docs/src/isolation.md`). A fresh
//! instance per call (wasmtime's pooling allocator) costs a decommit and re-fault of every
//! page an instance touched plus instantiation and would have to re-map every A-stack window
//! of the domain; the in-place reset keeps the instance, its Store and its windows.
//!
//! **What it can not undo in place.** wasmtime can not shrink a memory or a table: a
//! replica whose guest grew either since the snapshot can not be reset, and the kernel
//! terminates its domain instead (a supervisor restarts it, as after a crash).

use super::domain::{DomainData, Replica};
use wasmtime::{AsContextMut, Func, Global, Ref, Store, Table, Val};

/// A replica's fresh state, kept in its store's data.
pub(crate) struct Fresh {
    /// The guest's parts of the memory the snapshot covers (`(offset, len)`: every byte of
    /// it but window space) and their total.
    ranges: Vec<(usize, usize)>,
    guest_bytes: usize,
    globals: Vec<(Global, Val)>,
    tables: Vec<(Table, Vec<Option<Func>>)>,
    /// Whether guest code ran since the last reset.
    pub dirty: bool,
}

/// Why a replica could not be reset in place.
#[derive(Debug)]
pub(crate) enum NotReset {
    /// The guest grew its memory or a table since the snapshot.
    Grown(&'static str),
    /// Mapping the snapshot back failed.
    Io(std::io::Error),
}

impl std::fmt::Display for NotReset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotReset::Grown(what) => write!(
                f,
                "the guest grew its {what}, which can not shrink back in place"
            ),
            NotReset::Io(e) => write!(f, "reverting the memory snapshot failed: {e}"),
        }
    }
}

/// Saves the fresh state of a replica just instantiated from a module rewritten by
/// `isolate::rewrite` (`globals` and `tables`: the names it exports them under).
pub(crate) fn snapshot(
    store: &mut Store<DomainData>,
    replica: &Replica,
    globals: &[String],
    tables: &[String],
) -> Result<(), String> {
    let mut fresh = Fresh {
        ranges: Vec::new(),
        guest_bytes: 0,
        globals: Vec::with_capacity(globals.len()),
        tables: Vec::with_capacity(tables.len()),
        dirty: false,
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
        self.range(size)
            .snapshot(&ranges)
            .map_err(|e| format!("taking the memory snapshot failed: {e}"))?;
        fresh.guest_bytes = ranges.iter().map(|r| r.1).sum();
        fresh.ranges = ranges;
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
    pub(crate) fn reset(&self, store: &mut Store<DomainData>, force: bool) -> Result<(), NotReset> {
        let Some(fresh) = store.data_mut().fresh.take() else {
            return Ok(());
        };
        let result = if fresh.dirty || force {
            self.restore(store, &fresh)
        } else {
            Ok(())
        };
        let mut fresh = fresh;
        fresh.dirty = result.is_err();
        store.data_mut().fresh = Some(fresh);
        result
    }

    fn restore(&self, store: &mut Store<DomainData>, fresh: &Fresh) -> Result<(), NotReset> {
        let size = self.memory.data_size(&*store);
        let guest: usize = self.guest_ranges(size).iter().map(|r| r.1).sum();
        if guest != fresh.guest_bytes {
            return Err(NotReset::Grown("memory"));
        }
        for (t, entries) in &fresh.tables {
            if t.size(&*store) != entries.len() as u64 {
                return Err(NotReset::Grown("table"));
            }
        }
        let range = self.range(size);
        for &(off, len) in &fresh.ranges {
            range.revert(off, len).map_err(NotReset::Io)?;
        }
        let mut ctx = store.as_context_mut();
        for (g, v) in &fresh.globals {
            // The values were read from these very globals, so the types match.
            g.set(&mut ctx, v.clone())
                .map_err(|e| NotReset::Io(std::io::Error::other(e.to_string())))?;
        }
        for (t, entries) in &fresh.tables {
            for (i, f) in entries.iter().enumerate() {
                t.set(&mut ctx, i as u64, Ref::Func(*f))
                    .map_err(|e| NotReset::Io(std::io::Error::other(e.to_string())))?;
            }
        }
        Ok(())
    }
}
