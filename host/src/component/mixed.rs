//! Mixed pairs: a component domain and a core (A-stack) domain bound to each other through
//! the clerk, so that one WIT interface can be served by either kind to either kind. The
//! kernel translates between the canonical ABI's values and the A-stack layout of the
//! interface's plan with one codec (`codec`), in both directions:
//!
//! * **Core client → component server.** Exporting an interface of a component domain also
//!   gives it a *core stand-in* (when the interface has a plan: no resources, futures or
//!   streams): a domain of the kernel's table with no instance, the server side of the
//!   bindings core clients make with `lrpc.bind` under the export's name. Such a binding
//!   has A-stacks and out-of-band segments in the client's memory only; `lrpc.call` on it
//!   (`imports::translate`) decodes the request off the A-stack, calls the component's export
//!   under its deadline and encodes the results back. A failed component call is the
//!   client's call-failed status; terminating the component terminates its stand-ins, which
//!   revokes their bindings; a restarted component serves the same bindings.
//! * **Component client → core server.** A component's import bound to an export of a core
//!   domain ([`CoreBinding`]) gets a host function per imported function: it encodes the
//!   arguments per the plan onto an A-stack the kernel owns for that binding — pages grown in
//!   the server replica's memory that no client maps, written and read by the kernel while it
//!   holds that replica's Store — calls the server's entry stub on the calling thread, and
//!   decodes the results (untrusted: the server wrote them). Arguments larger than the
//!   A-stack go into an `in` segment of the same kind, and a server whose results do not fit
//!   asks for an `out` segment with `lrpc.reply_oob` as it would from a core client
//!   ([`reply_window`]). A server fault terminates the server, as on the core path, and the
//!   component client sees what a failed component call answers (see the parent module).
//!
//! The component's import types are checked against the interface's WIT at bind time;
//! interfaces carrying resources have no plan and can not pair with a core domain.

use super::codec;
use super::export::ComponentExport;
use super::failure::{failed_value, record_failure};
use super::record::{ComponentData, Shared};
use super::values::{AStackArgs, AStackTuple};
use crate::astack::page_round;
use crate::error::{Error, Fault};
use crate::state::clerk::ExportEntry;
use crate::state::domain::{DomainData, DomainShared, thread_slot};
use crate::state::kernel::KernelInner;
use crate::state::linkage::ReplicaKey;
use crate::sync::lock;
use lrpc_abi::{Status, header};
use lrpc_presentation::layout::Extent;
use lrpc_presentation::{InterfacePlan, ProcPlan, Side, SidePresentation, Ty};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use wasmtime::component::types::{ComponentFunc, ComponentInstance, ComponentItem};
use wasmtime::component::{LinkerInstance, Val};
use wasmtime::{AsContextMut, StoreContext, StoreContextMut};

/// The component server behind a core stand-in: the domain and, per procedure of the plan, the
/// index of its exported function.
pub(crate) struct Target {
    server: Arc<Shared>,
    funcs: Box<[usize]>,
    /// Per procedure, its signature when the typed path carries it (`super::typed`).
    typed: Box<[Option<super::typed::Signature>]>,
}

impl Target {
    /// Runs procedure `proc` in the component, under its deadline.
    pub(crate) fn run(
        &self,
        proc: usize,
        params: &[Val],
        results: &mut [Val],
    ) -> Result<(), Error> {
        let idx = *self.funcs.get(proc).ok_or_else(|| Error::Guest {
            what: format!("calling into `{}`", self.server.name),
            reason: format!("no procedure {proc}"),
        })?;
        self.server.run(idx, params, results)
    }

    /// Serves procedure `pp` (number `proc` of `plan`) on the A-stack encoded `request`,
    /// appending the encoded result to `reply`: with static types when the signature allows
    /// (`super::typed`), else through dynamically typed values.
    pub(crate) fn serve(
        &self,
        proc: usize,
        plan: &InterfacePlan,
        pp: &ProcPlan,
        request: &[u8],
        reply: &mut Vec<u8>,
    ) -> Result<(), Status> {
        if let (Some(&idx), Some(Some(sig))) = (self.funcs.get(proc), self.typed.get(proc))
            && super::typed::serve_typed(&self.server, idx, sig, request, Extent::of(pp), reply)?
        {
            return Ok(());
        }
        let params: Vec<&Ty> = pp.params.iter().map(|(_, t)| t).collect();
        let args = codec::decode_extent(plan, &params, request, Extent::of(pp))
            .map_err(|_| Status::ServerRejected)?;
        let mut results = vec![Val::Bool(false); usize::from(pp.result.is_some())];
        self.run(proc, &args, &mut results)
            .map_err(|e| e.status())?;
        if let Some(t) = &pp.result {
            codec::encode(plan, &[t], &results, reply).map_err(|_| Status::ServerRejected)?;
        }
        Ok(())
    }

    /// Whether procedure `proc`'s result is a lone byte list lifted by [`Target::serve_lent`]
    /// as a `super::lent::LiftedBytes`, which lands in the room the caller gives.
    pub(crate) fn lands(&self, proc: usize) -> bool {
        matches!(
            self.typed.get(proc),
            Some(Some(super::typed::Signature::Kinds { params, result }))
                if params[..] == [super::typed::Kind::Bytes]
                    && *result == Some(super::typed::Kind::Bytes)
        )
    }

    /// [`Target::serve`] on a request lent where the client's stub laid it out (see
    /// `super::lent`): a lone byte list parameter is lowered from there; anything else is
    /// served from a private copy.
    pub(crate) fn serve_lent(
        &self,
        proc: usize,
        plan: &InterfacePlan,
        pp: &ProcPlan,
        request: super::lent::Lent,
        reply: &mut codec::EncodedResult,
    ) -> Result<(), Status> {
        if let (Some(&idx), Some(Some(sig))) = (self.funcs.get(proc), self.typed.get(proc))
            && super::typed::serve_lent(&self.server, idx, sig, request, Extent::of(pp), reply)?
        {
            return Ok(());
        }
        self.serve(proc, plan, pp, &request.to_vec(), &mut reply.head)
    }
}

/// The core stand-in of `interface` exported by `shared` under `name`, or `None` when the
/// interface has no plan (it carries resources, futures or streams).
pub(super) fn stand_in(
    kernel: &KernelInner,
    shared: &Arc<Shared>,
    interface: &str,
    name: &str,
) -> Result<Option<Arc<ExportEntry>>, Error> {
    let plan = match kernel.plan(interface) {
        Ok(p) => p,
        Err(e) => {
            tracing::debug!(interface, "no core stand-in: {e}");
            return Ok(None);
        }
    };
    let funcs = plan
        .procs
        .iter()
        .map(|p| {
            shared
                .index(interface, &p.name)
                .ok_or_else(|| Error::ComponentMismatch {
                    domain: shared.name.clone(),
                    interface: interface.to_string(),
                    function: p.name.clone(),
                    reason: "not exported".into(),
                })
        })
        .collect::<Result<Box<[usize]>, Error>>()?;
    let typed = plan
        .procs
        .iter()
        .map(|p| super::typed::plan_signature(&plan, p))
        .collect();
    let domain = kernel.stand_in(&shared.name)?;
    lock(&shared.stand_ins).push(domain.clone());
    Ok(Some(Arc::new(ExportEntry {
        name: name.to_string(),
        plan,
        server: domain,
        entries: Box::new([]),
        deadline: shared.deadline,
        presentation: SidePresentation::default_for(interface, Side::Server),
        relay: Some(Box::new(Target {
            server: shared.clone(),
            funcs,
            typed,
        })),
    })))
}

impl ComponentExport {
    /// The core stand-in core clients bind to, if the interface has one.
    pub(crate) fn stand_in(&self) -> Option<Arc<ExportEntry>> {
        self.stand_in.clone()
    }
}

/// The windows the kernel owns in one server replica for a [`CoreBinding`]: the A-stack,
/// the `in` segment and the `out` segment, each `(offset, length)`, length 0 while absent.
#[derive(Default)]
struct Windows {
    astack: (usize, usize),
    oob_in: (usize, usize),
    oob_out: (usize, usize),
}

/// A component's import bound to a core domain's export: the binding object, and the
/// kernel's A-stack in each server replica.
pub(crate) struct CoreBinding {
    pub(super) interface: String,
    pub(super) export: Arc<ExportEntry>,
    kernel: Weak<KernelInner>,
    pub(super) revoked: AtomicBool,
    ticks: Arc<crate::tick::Clock>,
    deadline_ticks: u64,
    /// Bytes of the A-stack window: the largest A-stack of the plan's procedures.
    astack_len: usize,
    max_oob: usize,
    windows: Box<[Mutex<Windows>]>,
}

impl Drop for CoreBinding {
    fn drop(&mut self) {
        // No call is in flight (each holds the binding); give the pages back to the server.
        for (r, w) in self.export.server.replicas.iter().zip(&self.windows) {
            let w = lock(w);
            for (off, len) in [w.astack, w.oob_in, w.oob_out] {
                if len > 0 {
                    r.unmap_free(off, len);
                }
            }
        }
    }
}

thread_local! {
    /// The calls this thread is making through [`CoreBinding`]s, innermost last: the server
    /// replica and the binding, so that the server's `reply_oob` finds its `out` window.
    static CALLS: RefCell<Vec<(ReplicaKey, usize, Arc<CoreBinding>)>> =
        const { RefCell::new(Vec::new()) };
}

/// Pops the call record when the call returns, also when it unwinds.
struct PopCall;

impl Drop for PopCall {
    fn drop(&mut self) {
        CALLS.with_borrow_mut(|c| c.pop());
    }
}

/// `lrpc.reply_oob` from a core server serving a [`CoreBinding`]'s call on this thread: the
/// `out` window of at least `min` bytes (made or grown in the server's memory through `ctx`,
/// the server replica's store), as address and capacity.
pub(crate) fn reply_window(
    me: ReplicaKey,
    ctx: StoreContextMut<'_, DomainData>,
    min: usize,
) -> Result<(u32, u32), Status> {
    let found = CALLS.with_borrow(|c| {
        c.iter()
            .rev()
            .find(|(k, ..)| *k == me)
            .map(|(_, r, b)| (*r, b.clone()))
    });
    let (r, b) = found.ok_or(Status::NoCall)?;
    let mut w = lock(&b.windows[r]);
    if w.oob_out.1 < min {
        let replica = &b.export.server.replicas[r];
        let len = segment_len(min, b.max_oob)?;
        let off = replica.alloc_window(ctx, len).map_err(|e| e.status())?;
        let old = std::mem::replace(&mut w.oob_out, (off, len));
        if old.1 > 0 {
            replica.unmap_free(old.0, old.1);
        }
    }
    let (off, len) = w.oob_out;
    Ok((
        u32::try_from(off).map_err(|_| Status::ResourceExhausted)?,
        u32::try_from(len).map_err(|_| Status::ResourceExhausted)?,
    ))
}

/// Bytes of a segment for `min` bytes: at least 64 KiB, a power of two, at most `max`.
fn segment_len(min: usize, max: usize) -> Result<usize, Status> {
    if min > max {
        return Err(Status::QuotaOutOfBand);
    }
    let len = min
        .max(64 * 1024)
        .checked_next_power_of_two()
        .ok_or(Status::ResourceExhausted)?;
    page_round(len.min(max)).ok_or(Status::ResourceExhausted)
}

/// The types of a procedure's parameters.
fn param_tys(p: &ProcPlan) -> Vec<&Ty> {
    p.params.iter().map(|(_, t)| t).collect()
}

impl CoreBinding {
    /// One call: the arguments encoded, the server entered, the results decoded.
    fn call(
        self: &Arc<Self>,
        proc: usize,
        params: &[Val],
        results: &mut [Val],
    ) -> Result<(), Status> {
        if self.revoked.load(Ordering::Acquire) {
            return Err(Status::StaleBinding);
        }
        let server = &self.export.server;
        if server.core.terminated.load(Ordering::Acquire) {
            return Err(Status::ServerTerminated);
        }
        let plan = &self.export.plan;
        let pp = plan.procs.get(proc).ok_or(Status::BadProcedure)?;
        let mut args = Vec::new();
        codec::encode(plan, &param_tys(pp), params, &mut args)
            .map_err(|_| Status::ResourceExhausted)?;
        let reply = self.enter(plan, proc, &[&args])?;
        if let (Some(t), Some(slot)) = (&pp.result, results.first_mut()) {
            let vals = codec::decode_extent(plan, &[t], &reply, Extent::of(pp));
            *slot = vals
                .ok()
                .and_then(|v| v.into_iter().next())
                .ok_or(Status::BadReply)?;
        }
        Ok(())
    }

    /// [`CoreBinding::call`] with static types (see `typed`): no `Val`s, and the data of the
    /// last parameter written straight from where it is (a byte list: in the memory of
    /// `client`, the calling component's store) into the server's memory.
    fn call_typed<P: AStackArgs, R: AStackTuple>(
        self: &Arc<Self>,
        proc: usize,
        client: &StoreContext<'_, ComponentData>,
        params: P,
    ) -> Result<R, Status> {
        if self.revoked.load(Ordering::Acquire) {
            return Err(Status::StaleBinding);
        }
        if self.export.server.core.terminated.load(Ordering::Acquire) {
            return Err(Status::ServerTerminated);
        }
        let plan = &self.export.plan;
        let pp = plan.procs.get(proc).ok_or(Status::BadProcedure)?;
        let mut head = Vec::with_capacity(16);
        let tail = params.split(client, &mut head);
        let reply = self.enter(plan, proc, &[&head, tail])?;
        R::get(&reply, Extent::of(pp)).ok_or(Status::BadReply)
    }

    /// Runs the call in a free server replica (this thread's first), or one suspended in a
    /// call on this thread (re-entry), or waits for one up to the deadline.
    fn enter(
        self: &Arc<Self>,
        plan: &InterfacePlan,
        proc: usize,
        args: &[&[u8]],
    ) -> Result<Vec<u8>, Status> {
        let server = &self.export.server;
        let n = server.replicas.len();
        if n == 0 {
            return Err(Status::ServerTerminated);
        }
        let start = thread_slot() % n;
        for k in 0..n {
            let i = (start + k) % n;
            if let Some(mut store) = server.replicas[i].store.try_lock() {
                return self.run_in(plan, i, proc, args, store.as_context_mut());
            }
        }
        if crate::state::linkage::lending(server.replicas[start].key) {
            // Suspended on this thread in a call that lends its arguments in place.
            return Err(Status::ReentryWhileLent);
        }
        server.replicas[start]
            .with_store(self.export.deadline, |ctx| {
                self.run_in(plan, start, proc, args, ctx)
            })
            .unwrap_or(Err(Status::ServerBusy))
    }

    /// The call in replica `r`, whose store is `ctx`.
    fn run_in(
        self: &Arc<Self>,
        plan: &InterfacePlan,
        r: usize,
        proc: usize,
        args: &[&[u8]],
        mut ctx: StoreContextMut<'_, DomainData>,
    ) -> Result<Vec<u8>, Status> {
        let server = &self.export.server;
        let replica = &server.replicas[r];
        let pp = &plan.procs[proc];
        let size = pp.astack_size as usize;
        let (astack, oob) = self.write_args(r, pp, args, &mut ctx)?;
        let addr = |x: usize| i32::try_from(x).map_err(|_| Status::ResourceExhausted);
        // Every `in` parameter may be read in place (borrow mask all ones): only the kernel
        // writes this A-stack, and it waits for the call.
        let entry_args = (addr(astack)?, addr(size)?, addr(oob.0)?, addr(oob.1)?, -1);
        let deadline = self.ticks.now().saturating_add(self.deadline_ticks);
        let saved = std::mem::replace(&mut ctx.data_mut().deadline_tick, deadline);
        let key = replica.key;
        let outcome = {
            CALLS.with_borrow_mut(|c| c.push((key, r, self.clone())));
            let _pop = PopCall;
            self.export.entries[r][proc].call(&mut ctx, entry_args)
        };
        ctx.data_mut().deadline_tick = saved;
        match outcome {
            Ok(lrpc_abi::ENTRY_OK) => {}
            Ok(_) => return Err(Status::ServerRejected),
            Err(e) => {
                let fault = Fault::classify(&e);
                if let Some(k) = self.kernel.upgrade() {
                    crate::terminate::terminate_shared(&k, server);
                }
                return Err(fault.status());
            }
        }
        self.read_reply(r, pp, astack, &ctx)
    }

    /// Writes the arguments for procedure `pp` (`args`, pieces written one after another:
    /// see `AStackArgs::split`) on this binding's A-stack in server replica `r`, or, when
    /// they do not fit there, in its `in` segment (grown as needed), with the A-stack's
    /// header when it is unbounded. The A-stack's offset, and the segment's offset and
    /// length ((0, 0): none).
    fn write_args(
        &self,
        r: usize,
        pp: &ProcPlan,
        args: &[&[u8]],
        ctx: &mut StoreContextMut<'_, DomainData>,
    ) -> Result<(usize, (usize, usize)), Status> {
        let replica = &self.export.server.replicas[r];
        let mem = replica.memory;
        let size = pp.astack_size as usize;
        let write = |ctx: &mut StoreContextMut<'_, DomainData>, at: usize, b: &[u8]| {
            let dst = mem
                .data_mut(ctx)
                .get_mut(at..)
                .and_then(|d| d.get_mut(..b.len()));
            crate::bulk::copy_slice(dst.ok_or(Status::ResourceExhausted)?, b);
            Ok(())
        };
        let len: usize = args.iter().map(|a| a.len()).sum();
        let put = |ctx: &mut StoreContextMut<'_, DomainData>, mut at: usize| {
            for a in args {
                write(ctx, at, a)?;
                at += a.len();
            }
            Ok::<(), Status>(())
        };
        let mut w = lock(&self.windows[r]);
        if w.astack.1 == 0 {
            let off = replica
                .alloc_window(ctx.as_context_mut(), self.astack_len)
                .map_err(|e| e.status())?;
            w.astack = (off, self.astack_len);
        }
        let astack = w.astack.0;
        let oob = if pp.bounded {
            if len > size {
                return Err(Status::ResourceExhausted);
            }
            put(ctx, astack)?;
            (0, 0)
        } else if len <= size.saturating_sub(header::LEN) {
            put(ctx, astack + header::LEN)?;
            write(ctx, astack, &head(0, len)?)?;
            (0, 0)
        } else {
            if w.oob_in.1 < len {
                let len = segment_len(len, self.max_oob)?;
                let off = replica
                    .alloc_window(ctx.as_context_mut(), len)
                    .map_err(|e| e.status())?;
                let old = std::mem::replace(&mut w.oob_in, (off, len));
                if old.1 > 0 {
                    replica.unmap_free(old.0, old.1);
                }
            }
            put(ctx, w.oob_in.0)?;
            write(ctx, astack, &head(header::OOB, len)?)?;
            w.oob_in
        };
        Ok((astack, oob))
    }

    /// Reads the reply of procedure `pp` off this binding's A-stack (at `astack`) in server
    /// replica `r`, or off its `out` segment: written by the server, untrusted, so its
    /// length is checked against the room it had.
    fn read_reply(
        &self,
        r: usize,
        pp: &ProcPlan,
        astack: usize,
        ctx: &StoreContextMut<'_, DomainData>,
    ) -> Result<Vec<u8>, Status> {
        let mem = self.export.server.replicas[r].memory;
        let size = pp.astack_size as usize;
        let read = |ctx: &StoreContextMut<'_, DomainData>, at: usize, len: usize| {
            let mut buf = vec![0; len];
            mem.read(ctx, at, &mut buf)
                .map(|()| buf)
                .map_err(|_| Status::BadReply)
        };
        if pp.bounded {
            return read(ctx, astack, pp.out_bound.unwrap_or(0).min(size));
        }
        let h = read(ctx, astack, header::LEN)?;
        let flags = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let len = u32::from_le_bytes([h[4], h[5], h[6], h[7]]) as usize;
        let (at, room) = if flags & header::OOB != 0 {
            lock(&self.windows[r]).oob_out
        } else {
            (astack + header::LEN, size.saturating_sub(header::LEN))
        };
        if len > room {
            return Err(Status::BadReply);
        }
        read(ctx, at, len)
    }
}

/// An unbounded A-stack's header.
fn head(flags: u32, len: usize) -> Result<[u8; header::LEN], Status> {
    let len = u32::try_from(len).map_err(|_| Status::ResourceExhausted)?;
    let mut h = [0; header::LEN];
    h[..4].copy_from_slice(&flags.to_le_bytes());
    h[4..].copy_from_slice(&len.to_le_bytes());
    Ok(h)
}

/// Binds the component's import `import` (its type `inst`) to the core export `export`
/// (under `export_name`), linking each imported function in `li`.
pub(super) fn bind_core(
    kernel: &Arc<KernelInner>,
    shared: &Arc<Shared>,
    import: &str,
    inst: &ComponentInstance,
    export: Arc<ExportEntry>,
    li: &mut LinkerInstance<'_, ComponentData>,
) -> Result<Arc<CoreBinding>, String> {
    if export.plan.name != import {
        return Err(format!("the export serves `{}`", export.plan.name));
    }
    let engine = &shared.engine;
    let mut funcs: Vec<(String, ComponentFunc)> = Vec::new();
    for (fname, item) in inst.exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(f) => funcs.push((fname.to_string(), f)),
            ComponentItem::Type(_) => {}
            _ => {
                return Err(format!(
                    "`{fname}`: resources can not cross to a core (A-stack) domain"
                ));
            }
        }
    }
    check_with_wit(kernel, import, &funcs)?;
    let plan = &export.plan;
    let astack_len = plan
        .procs
        .iter()
        .map(|p| p.astack_size as usize)
        .max()
        .unwrap_or(0)
        .max(1);
    let binding = Arc::new(CoreBinding {
        interface: import.to_string(),
        kernel: Arc::downgrade(kernel),
        revoked: AtomicBool::new(false),
        ticks: kernel.ticks.clone(),
        deadline_ticks: kernel.ticks_for(export.deadline),
        astack_len: page_round(astack_len).ok_or("A-stacks too large")?,
        max_oob: kernel.config.max_oob,
        windows: export
            .server
            .replicas
            .iter()
            .map(|_| Mutex::default())
            .collect(),
        export,
    });
    let inst_funcs = funcs.clone();
    for (fname, _) in funcs {
        link_to_core(li, &binding, &inst_funcs, fname)?;
    }
    Ok(binding)
}

/// Checks the imported functions `funcs` of `import` against the interface's WIT, as the
/// kernel knows it.
fn check_with_wit(
    kernel: &KernelInner,
    import: &str,
    funcs: &[(String, ComponentFunc)],
) -> Result<(), String> {
    let checked = kernel.with_wit(import, |wit| {
        let resolve = wit.resolve();
        let id = super::typecheck::interface_id(resolve, import)
            .ok_or_else(|| "the interface is not in the kernel's WIT".to_string())?;
        let want = &resolve.interfaces[id].functions;
        for (fname, have) in funcs {
            let f = want
                .get(fname.as_str())
                .ok_or_else(|| format!("`{fname}` is not in the WIT interface"))?;
            super::typecheck::check_func(resolve, f, have)
                .map_err(|r| format!("`{fname}`: {r}"))?;
        }
        Ok::<(), String>(())
    });
    checked.unwrap_or_else(|| Err("the interface is not in the kernel's WIT".into()))
}

/// Links the imported function `fname` (its type among `inst_funcs`) in `li` as a call
/// through `binding` to the core server's procedure of that name: on the typed path when it
/// carries the function's signature, else with dynamically typed values.
fn link_to_core(
    li: &mut LinkerInstance<'_, ComponentData>,
    binding: &Arc<CoreBinding>,
    inst_funcs: &[(String, ComponentFunc)],
    fname: String,
) -> Result<(), String> {
    let proc = binding
        .export
        .plan
        .procs
        .iter()
        .position(|p| p.name == fname)
        .ok_or_else(|| format!("`{fname}` is not served"))?;
    let to = ToCore {
        binding: binding.clone(),
        proc,
        function: fname.clone(),
    };
    let plan = &binding.export.plan;
    let sig = super::typed::plan_signature(plan, &plan.procs[proc]);
    if let Some(ty) = inst_func(inst_funcs, &fname)
        && super::typed::link_view(
            super::typed::Import {
                li,
                name: &fname,
                ty,
            },
            sig.as_ref(),
            to,
        )
        .map_err(|e| format!("`{fname}`: {e:#}"))?
    {
        return Ok(());
    }
    let b = binding.clone();
    let iface = binding.interface.clone();
    li.func_new(&fname.clone(), move |mut ctx, ty, params, results| match b
        .call(proc, params, results)
    {
        Ok(()) => Ok(()),
        Err(status) => {
            let text = format!("{iface}#{fname}: {status:?}");
            for (slot, t) in results.iter_mut().zip(ty.results()) {
                *slot = failed_value(&t, &text)
                    .ok_or_else(|| wasmtime::format_err!("{text}: no value to answer with"))?;
            }
            record_failure(ctx.data_mut(), &iface, &fname, status);
            Ok(())
        }
    })
    .map_err(|e| format!("{e:#}"))
}

/// The type of imported function `name`.
fn inst_func<'a>(funcs: &'a [(String, ComponentFunc)], name: &str) -> Option<&'a ComponentFunc> {
    funcs.iter().find(|(n, _)| n == name).map(|(_, t)| t)
}

/// A typed import of a core server's procedure.
struct ToCore {
    binding: Arc<CoreBinding>,
    proc: usize,
    function: String,
}

impl super::typed::ViewForwarder for ToCore {
    fn call<P: super::typed::ViewArgs, R: super::typed::Args>(
        &self,
        client: &StoreContext<'_, ComponentData>,
        params: P,
    ) -> Result<R, Status> {
        self.binding.call_typed(self.proc, client, params)
    }

    fn names(&self) -> (&str, &str) {
        (&self.binding.interface, &self.function)
    }
}

/// Faces of a terminated component domain: terminated too, which revokes their bindings.
pub(super) fn terminate_stand_ins(kernel: &KernelInner, stand_ins: &[Arc<DomainShared>]) {
    for f in stand_ins {
        crate::terminate::terminate_shared(kernel, f);
    }
}
