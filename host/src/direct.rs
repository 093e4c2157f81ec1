//! The direct-linked path (Flick's full trust, `leaky+unprotected` on the client side).
//!
//! A client that fully trusts a server may call it without entering the kernel. Calls within
//! one `Store` can go straight from wasm to wasm, so the kernel instantiates a copy of the
//! server's module inside the client's own store (once per export, reused by later bindings),
//! maps the binding's A-stacks into that copy's memory as well, and places the copy's entry
//! stubs in the client's function table; the client stub then calls an entry with an
//! indirect call. Two consequences, both documented for users:
//!
//! * the copy is a replica of the server, with its own memory: like `replicas`, the direct
//!   path suits servers that keep no state between calls;
//! * a trap in the copy unwinds the client too (it runs in the client's store), and the
//!   kernel then terminates the client domain.
//!
//! Arguments and results that do not fit on an A-stack take the isolated path. The A-stack
//! windows in a copy's memory come from the same window allocator as a replica's
//! (`astack::alloc`), so a copy reuses the pages of its unbound bindings.

use crate::astack::{MemoryRange, Segment, WindowAlloc, grown_offset};
use crate::state::clerk::ExportEntry;
use crate::state::domain::DomainData;
use crate::sync::lock;
use lrpc_abi::Status;
use std::sync::{Arc, Mutex};
use wasmtime::{AsContextMut, Caller, Instance, Memory, Ref};

/// The direct-linked server copies in a client replica's store, by export name (kept in
/// the replica's feature tables).
#[derive(Default)]
struct Copies(std::collections::HashMap<String, ServerCopy>);

/// A server copy living in a client's store.
#[derive(Clone)]
pub(crate) struct ServerCopy {
    memory: Memory,
    base: usize,
    /// The copy's window space (shared with the bindings that hold windows in it).
    windows: Arc<Mutex<WindowAlloc>>,
    /// Function-table index of each procedure's entry in the client's table.
    pub entries: Vec<u32>,
    /// Function-table index + 1 of each procedure's register entry (0: none).
    pub fast: Vec<u32>,
}

impl ServerCopy {
    /// The copy's memory up to `len`, as a window-mapping range.
    #[allow(unsafe_code, reason = "the range's contract, argued below")]
    fn range(&self, len: usize) -> MemoryRange {
        // SAFETY: `base` is the copy's linear memory in the client's Store (read when the copy
        // was instantiated; memories never move), which lives as long as the client replica;
        // `link` passes the end of the window space it has grown the memory to (at most the
        // memory's size), and the range is used for
        // the binding's windows, which are unmapped before that Store goes away.
        unsafe { MemoryRange::new(self.base as *mut u8, len) }
    }
}

/// Where a direct binding's A-stacks sit in the server copy.
pub(crate) struct DirectPlacement {
    /// The copy's entries in the client's function table.
    pub entries: Vec<u32>,
    /// The copy's register entries in the client's function table, index + 1 (0: none).
    pub fast: Vec<u32>,
    /// Offset of the A-stack segment in the copy's memory.
    pub offset: usize,
    /// The copy's memory, up to the end of its window space.
    pub range: MemoryRange,
    /// The copy's window allocator, which the segment's pages go back to on revocation.
    pub windows: Arc<Mutex<WindowAlloc>>,
}

/// Instantiates (or reuses) the server copy in the caller's store and maps `segment` into it.
pub(crate) fn link(
    caller: &mut Caller<'_, DomainData>,
    linker: &wasmtime::Linker<DomainData>,
    export: &ExportEntry,
    segment: &Segment,
) -> Result<DirectPlacement, Status> {
    let here = caller.data().features.get::<Copies>();
    let co = match here.and_then(|c| c.0.get(&export.name)) {
        Some(co) => co.clone(),
        None => {
            let co = instantiate(caller, linker, export)?;
            caller
                .data_mut()
                .features
                .get_or_default::<Copies>()
                .0
                .insert(export.name.clone(), co.clone());
            co
        }
    };
    let len = segment.len();
    let offset = lock(&co.windows).take(len, |pages| {
        let old = co
            .memory
            .grow(caller.as_context_mut(), pages as u64)
            .map_err(|_| Status::ResourceExhausted)?;
        grown_offset(old).ok_or(Status::ResourceExhausted)
    })?;
    let range = co.range(lock(&co.windows).high());
    if range.map(offset, segment).is_err() {
        lock(&co.windows).give_back(offset, len);
        return Err(Status::ResourceExhausted);
    }
    Ok(DirectPlacement {
        entries: co.entries,
        fast: co.fast,
        offset,
        range,
        windows: co.windows,
    })
}

fn instantiate(
    caller: &mut Caller<'_, DomainData>,
    linker: &wasmtime::Linker<DomainData>,
    export: &ExportEntry,
) -> Result<ServerCopy, Status> {
    let table = caller
        .get_export("__indirect_function_table")
        .and_then(|e| e.into_table())
        .ok_or(Status::InterfaceMismatch)?;
    let instance: Instance = linker
        .instantiate(caller.as_context_mut(), &export.server.module)
        .map_err(|_| Status::ResourceExhausted)?;
    let memory = instance
        .get_memory(caller.as_context_mut(), "memory")
        .ok_or(Status::InterfaceMismatch)?;
    let base = memory.data_ptr(&*caller) as usize;
    // Grows the client's table by one element holding `f`; returns the element's index.
    let place = |caller: &mut Caller<'_, DomainData>, f| -> Result<u32, Status> {
        let at = table
            .grow(caller.as_context_mut(), 1, Ref::Func(Some(f)))
            .map_err(|_| Status::ResourceExhausted)?;
        u32::try_from(at).map_err(|_| Status::ResourceExhausted)
    };
    let mut entries = Vec::with_capacity(export.plan.procs.len());
    let mut fast = Vec::with_capacity(export.plan.procs.len());
    for p in &export.plan.procs {
        let f = instance
            .get_func(caller.as_context_mut(), &p.entry)
            .ok_or(Status::InterfaceMismatch)?;
        entries.push(place(caller, f)?);
        // A register entry is offered only when the server exports one of exactly the type
        // the plan derives from the WIT; otherwise the client takes the A-stack path.
        let reg = p.register.as_ref().and_then(|want| {
            let f = instance.get_func(caller.as_context_mut(), &want.entry)?;
            register_type_matches(&f.ty(&*caller), want).then_some(f)
        });
        fast.push(match reg {
            Some(f) => place(caller, f)?
                .checked_add(1)
                .ok_or(Status::ResourceExhausted)?,
            None => 0,
        });
    }
    Ok(ServerCopy {
        memory,
        base,
        windows: Arc::default(),
        entries,
        fast,
    })
}

/// Whether `ty` is the core type of the register entry `want`.
fn register_type_matches(ty: &wasmtime::FuncType, want: &lrpc_presentation::RegisterEntry) -> bool {
    use lrpc_presentation::CoreType;
    let word = |v: wasmtime::ValType, w: &CoreType| {
        matches!(
            (v, w),
            (wasmtime::ValType::I32, CoreType::I32)
                | (wasmtime::ValType::I64, CoreType::I64)
                | (wasmtime::ValType::F32, CoreType::F32)
                | (wasmtime::ValType::F64, CoreType::F64)
        )
    };
    ty.params().len() == want.params.len()
        && ty.params().zip(&want.params).all(|(v, w)| word(v, w))
        && ty.results().len() == usize::from(want.result.is_some())
        && ty
            .results()
            .zip(want.result.iter())
            .all(|(v, w)| word(v, w))
}

#[cfg(test)]
mod tests {
    use super::register_type_matches;
    use lrpc_presentation::{CoreType, RegisterEntry};
    use wasmtime::{Engine, FuncType, ValType};

    fn fast(params: Vec<CoreType>, result: Option<CoreType>) -> RegisterEntry {
        RegisterEntry {
            entry: "lrpc-fast:x:y/z#f".into(),
            params,
            result,
        }
    }

    #[test]
    fn a_register_entry_is_used_only_with_exactly_the_planned_type() {
        let engine = Engine::default();
        let add = FuncType::new(&engine, [ValType::I32, ValType::I32], [ValType::I32]);
        assert!(register_type_matches(
            &add,
            &fast(vec![CoreType::I32, CoreType::I32], Some(CoreType::I32))
        ));
        // A parameter too many or too few, another result, or a missing result: refused.
        for want in [
            fast(vec![CoreType::I32], Some(CoreType::I32)),
            fast(
                vec![CoreType::I32, CoreType::I32, CoreType::I32],
                Some(CoreType::I32),
            ),
            fast(vec![CoreType::I32, CoreType::I32], Some(CoreType::I64)),
            fast(vec![CoreType::I32, CoreType::I32], None),
            fast(vec![CoreType::I32, CoreType::F32], Some(CoreType::I32)),
        ] {
            assert!(!register_type_matches(&add, &want), "{want:?}");
        }
        let null = FuncType::new(&engine, [], []);
        assert!(register_type_matches(&null, &fast(vec![], None)));
        assert!(!register_type_matches(
            &null,
            &fast(vec![], Some(CoreType::I32))
        ));
        let wide = FuncType::new(&engine, [ValType::I64, ValType::F64], [ValType::F32]);
        assert!(register_type_matches(
            &wide,
            &fast(vec![CoreType::I64, CoreType::F64], Some(CoreType::F32))
        ));
    }
}
