//! The records of per-request isolation ([`Isolation`]): a replica's fresh state
//! ([`Fresh`], kept in its store's data), why a reset failed ([`NotReset`]), and the request
//! numbers a thread runs under. Saving and putting back the fresh state is `reset`'s, above
//! the records; the design is told there.

use crate::astack::Snapshot;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use wasmtime::{Func, Global, Table, Val};

/// What a domain keeps from one request to the next.
///
/// With [`Isolation::Request`] every top-level call the embedder makes into a core domain
/// ([`DomainFunc::call`](crate::domain::DomainFunc::call)) meets the domain as it was right
/// after it was created (instantiated, its start function run): the contents and size of
/// its linear memory, its mutable globals (the shadow stack pointer included), its tables
/// and its dropped data and element segments are all put back. A trap or a deadline does
/// not terminate such a domain: the next call meets it clean. Calls that reach the domain
/// through a binding are part of the request that made them: the top-level call into the
/// client. Before such a call enters a replica that another request used last, the call
/// path resets that replica; a trap or a deadline in it resets it again instead of
/// terminating the domain. [`Domain::reset`](crate::Domain::reset) resets every replica at once.
///
/// Not reset: the domain's bindings (as client and as server) and the contents of their
/// A-stack and out-of-band windows (those pages belong to the pair, not to the domain),
/// and any state the embedder's host functions keep. Pages a request grew the memory by
/// stay, zeroed, past the size the next request sees (wasmtime can not shrink a memory),
/// so a load or store just past that size reads zeros instead of trapping. A guest that
/// grows a table can not be put back in place: its domain is terminated instead, and the
/// call that finds it so fails with [`Error::Reset`](crate::Error::Reset). The fresh state is the one right
/// after creation until [`Domain::capture_fresh_state`](crate::Domain::capture_fresh_state) takes another.
///
/// A component domain with [`Isolation::Request`]
/// ([`ComponentOptions::isolation`](crate::component::ComponentOptions::isolation)) gets a
/// fresh instance in a fresh Store instead, before a call of another request than the last
/// one enters it; a fault there replaces the instance rather than killing the domain. Its
/// bindings stay, as for a restart ([`Kernel::restart_component`](crate::Kernel::restart_component)).
///
/// ```
/// use lrpc_kernel::{DomainOptions, Kernel, domain::Isolation};
/// let kernel = Kernel::new()?;
/// let wat = br#"(module (memory (export "memory") 1)
///     (global $n (mut i32) (i32.const 0))
///     (func (export "count") (result i32)
///         (global.set $n (i32.add (global.get $n) (i32.const 1)))
///         (global.get $n)))"#;
/// let options = DomainOptions::default().with_isolation(Isolation::Request);
/// let d = kernel.domain_with("counter", wat, options)?;
/// let count = d.func::<(), i32>("count")?;
/// assert_eq!(count.call(())?, 1);
/// assert_eq!(count.call(())?, 1, "the second call meets a fresh counter");
/// # Ok::<(), lrpc_kernel::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Isolation {
    /// The domain keeps its state from call to call (the default).
    #[default]
    None,
    /// Each top-level call meets the domain in its fresh state.
    Request,
}

/// Where request numbers come from: blocks of [`BLOCK`], one thread at a time.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

/// How many request numbers a thread takes from [`NEXT_BLOCK`] at a time.
const BLOCK: u64 = 1 << 20;

thread_local! {
    /// The request the thread runs now (0: none).
    static CURRENT: Cell<u64> = const { Cell::new(0) };
    /// The thread's next request number and the end of its block.
    static NEXT: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// The request this thread runs now (0: none).
pub(crate) fn current_request() -> u64 {
    CURRENT.with(Cell::get)
}

/// Puts the thread's previous request back when a request ends, also when it unwinds.
pub(crate) struct RequestScope(u64);

impl Drop for RequestScope {
    fn drop(&mut self) {
        CURRENT.with(|c| c.set(self.0));
    }
}

/// Starts a new request on this thread, until the scope is dropped.
pub(crate) fn begin_request() -> RequestScope {
    let id = NEXT.with(|n| {
        let (mut next, mut end) = n.get();
        if next == end {
            next = NEXT_BLOCK
                .fetch_add(1, Ordering::Relaxed)
                .saturating_mul(BLOCK);
            end = next.saturating_add(BLOCK);
        }
        n.set((next + 1, end));
        next
    });
    adopt_request(id)
}

/// Runs the rest of the scope's life as request `id` (a call made on another thread on
/// behalf of it, see `imports::call::Detached`).
pub(crate) fn adopt_request(id: u64) -> RequestScope {
    RequestScope(CURRENT.with(|c| c.replace(id)))
}

/// A replica's fresh state, kept in its store's data.
pub(crate) struct Fresh {
    pub(super) globals: Vec<(Global, Val)>,
    pub(super) tables: Vec<(Table, Vec<Option<Func>>)>,
    /// The global holding the memory size the guest sees, in wasm pages (`isolate`).
    pub(super) size: Global,
    /// The memory's snapshot (set by `capture`).
    pub(super) image: Option<Snapshot>,
    /// Whether guest code ran since the last reset.
    pub dirty: bool,
    /// The request whose calls through bindings the replica last served (0: none).
    pub(super) request: u64,
}

/// Why a replica could not be reset in place.
#[derive(Debug)]
pub(crate) enum NotReset {
    /// The guest grew a table since the snapshot.
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
