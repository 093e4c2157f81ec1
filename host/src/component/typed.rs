//! Typed forwarding of the calls a component domain makes through its imports.
//!
//! The general path (`func_new` on the client's side, `Func::call` on the server's) carries
//! every argument and result as a dynamically typed `Val`: a `list<u8>` becomes one `Val` per
//! byte, and even a call without arguments pays for the dynamic checks and vectors. Functions
//! whose parameters (at most two) and result (at most one) are among `u32`, `u64`, `string`
//! and `list<u8>` — the shapes of most plugin and service interfaces — are linked instead with
//! `func_wrap` and called with a `TypedFunc`: the canonical ABI's lifting and lowering run as
//! compiled code. Byte lists move as one copy each way: an import bound to a core server
//! lifts a `list<u8>` parameter as a view of the client's memory (`WasmList<u8>`) and writes
//! it from there straight into the server's A-stack or `in` segment; between two components
//! the parameter is lifted into the host and lowered into the server.
//!
//! The other way, a core client's call of a component server ([`serve_typed`]) decodes the
//! A-stack straight into those Rust values and encodes the result from them; a lone byte
//! list parameter is lowered into the component from where the client's stub put it
//! ([`serve_lent`], `super::lent`), and a byte list result goes to the client from the
//! vector it was lifted into. Both ways also carry every other function of the kernel's
//! embedded WIT (`lrpc:http/plugin`'s `handle`, `lrpc:kv/store`, ...) with the static shape
//! the stub compiler generated for it from its plan (`super::generated`).
//!
//! The binding's checks, the server's deadline and fuel, and the failure answers are the same
//! on both paths: a failed call answers the result type's zero value (0, an empty string or
//! list), as the general path does for those types, and is recorded as a failure.

use super::binding::ImportBinding;
use super::failure::record_failure;
use super::generated::{self, LeadArgs, Shape, ShapeVisitor};
use super::record::{ComponentData, Shared};
use super::values::{AStackArgs, AStackTuple};
use lrpc_abi::Status;
use lrpc_presentation::layout::Extent;
use lrpc_presentation::layout::is_bytes;
use lrpc_presentation::{InterfacePlan, Prim, ProcPlan, Ty};
use std::sync::Arc;
use wasmtime::component::types::{ComponentFunc, Type};
use wasmtime::component::{ComponentNamedList, Lift, LinkerInstance, Lower, WasmList};
use wasmtime::{AsContext as _, StoreContext};

/// A value type the typed path carries.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Kind {
    U32,
    U64,
    Str,
    Bytes,
}

fn kind(t: &Type) -> Option<Kind> {
    match t {
        Type::U32 => Some(Kind::U32),
        Type::U64 => Some(Kind::U64),
        Type::String => Some(Kind::Str),
        Type::List(l) if l.ty() == Type::U8 => Some(Kind::Bytes),
        _ => None,
    }
}

/// Runs `$body` with `$t` the Rust type of kind `$k`, a byte list lifted as `$bytes`.
macro_rules! with_kind {
    ($k:expr, $bytes:ty, $t:ident => $body:expr) => {
        match $k {
            Kind::U32 => {
                type $t = u32;
                $body
            }
            Kind::U64 => {
                type $t = u64;
                $body
            }
            Kind::Str => {
                type $t = String;
                $body
            }
            Kind::Bytes => {
                type $t = $bytes;
                $body
            }
        }
    };
}

/// Runs `$body` with `$r` the Rust results tuple of an optional kind (`()` or `(T,)`).
macro_rules! with_result {
    ($k:expr, $r:ident => $body:expr) => {
        match $k {
            None => {
                type $r = ();
                $body
            }
            Some(k) => with_kind!(k, Vec<u8>, T => {
                type $r = (T,);
                $body
            }),
        }
    };
}

/// Runs `$body` with `$p` and `$r` the Rust parameter and result tuples of a function with
/// parameter kinds `$params` and result kind `$result`, byte list parameters lifted as
/// `$bytes`; returns `Ok(false)` from the enclosing function for more than two parameters.
macro_rules! with_signature {
    ($params:expr, $result:expr, $bytes:ty, $p:ident, $r:ident => $body:expr) => {
        match $params[..] {
            [] => with_result!($result, $r => {
                type $p = ();
                $body
            }),
            [a] => with_kind!(a, $bytes, A => with_result!($result, $r => {
                type $p = (A,);
                $body
            })),
            [a, b] => with_kind!(a, $bytes, A => with_kind!(b, $bytes, B => {
                with_result!($result, $r => {
                    type $p = (A, B);
                    $body
                })
            })),
            _ => return Ok(false),
        }
    };
}

/// What the typed path carries as parameters or results: `()`, `(A,)` or `(A, B)` of the
/// kinds above, lifted and lowered by the canonical ABI and encoded for an A-stack.
pub(super) trait Args:
    ComponentNamedList + Lift + Lower + AStackArgs + AStackTuple + Send + Sync + 'static
{
}

impl<T: ComponentNamedList + Lift + Lower + AStackArgs + AStackTuple + Send + Sync + 'static> Args
    for T
{
}

/// Parameters as an import bound to a core server receives them: byte lists still in the
/// client's memory.
pub(super) trait ViewArgs:
    ComponentNamedList + Lift + AStackArgs + Send + Sync + 'static
{
}

impl<T: ComponentNamedList + Lift + AStackArgs + Send + Sync + 'static> ViewArgs for T {}

/// Where a typed import's calls go: a component server's export.
pub(super) trait Forwarder: Send + Sync + 'static {
    /// One call; its results, or why it failed.
    fn call<P: Args, R: Args>(&self, params: P) -> Result<R, Status>;
    /// The interface and function, for the failure record.
    fn names(&self) -> (&str, &str);
}

/// Where a typed import's calls go when its parameters are read where they are (a mixed
/// pair: a core server's procedure).
pub(super) trait ViewForwarder: Send + Sync + 'static {
    /// One call with parameters in the memory of `client`, the calling component's store;
    /// its results, or why it failed.
    fn call<P: ViewArgs, R: Args>(
        &self,
        client: &StoreContext<'_, ComponentData>,
        params: P,
    ) -> Result<R, Status>;
    /// The interface and function, for the failure record.
    fn names(&self) -> (&str, &str);
}

/// The kinds of `ty`'s parameters and its result kind, when the typed path carries them.
fn signature(ty: &ComponentFunc) -> Option<(Vec<Kind>, Option<Kind>)> {
    let params: Option<Vec<Kind>> = ty.params().map(|(_, t)| kind(&t)).collect();
    let results: Option<Vec<Kind>> = ty.results().map(|t| kind(&t)).collect();
    let (params, results) = (params?, results?);
    (results.len() <= 1).then(|| (params, results.first().copied()))
}

/// A procedure's signature, when the typed path carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Signature {
    /// At most two parameters and a result among the kinds above.
    Kinds {
        params: Vec<Kind>,
        result: Option<Kind>,
    },
    /// A function of the kernel's embedded WIT: an index into `super::generated::FUNCTIONS`,
    /// carried with its generated shape.
    Generated(usize),
}

/// The [`Signature`] of procedure `p` of `plan`.
pub(super) fn plan_signature(plan: &InterfacePlan, p: &ProcPlan) -> Option<Signature> {
    fn kind(t: &Ty) -> Option<Kind> {
        match t {
            Ty::Prim(Prim::U32) => Some(Kind::U32),
            Ty::Prim(Prim::U64) => Some(Kind::U64),
            Ty::String => Some(Kind::Str),
            t if is_bytes(t) => Some(Kind::Bytes),
            _ => None,
        }
    }
    let kinds = || {
        let params: Vec<Kind> = p
            .params
            .iter()
            .map(|(_, t)| kind(t))
            .collect::<Option<_>>()?;
        let result = match &p.result {
            None => None,
            Some(t) => Some(kind(t)?),
        };
        (params.len() <= 2).then_some(Signature::Kinds { params, result })
    };
    // A function of the embedded WIT, checked by its interface's fingerprint: the shape was
    // generated from that very interface.
    kinds().or_else(|| {
        generated::FUNCTIONS
            .iter()
            .position(|&(i, fp, f)| i == plan.name && fp == plan.fingerprint && f == p.name)
            .map(Signature::Generated)
    })
}

/// Serves one call of a core client on the component `server`'s function `idx` with static
/// types: the parameters are decoded off the A-stack `request` (which they take `extent`
/// of) straight into the values the canonical ABI lowers, and the result is
/// appended to `reply` in the A-stack layout. A byte list crosses as a copy each way, not as
/// a dynamic value per byte. `Ok(false)`: the signature is not one this path carries.
pub(super) fn serve_typed(
    server: &Shared,
    idx: usize,
    sig: &Signature,
    request: &[u8],
    extent: Extent,
    reply: &mut Vec<u8>,
) -> Result<bool, Status> {
    match sig {
        // One byte list: lowered from where it lies in `request`, not from a copy of it.
        Signature::Kinds { params, result } if params[..] == [Kind::Bytes] => {
            with_result!(*result, R => {
                serve_as::<(), R>(server, idx, request, extent, reply, true)?
            });
        }
        Signature::Kinds { params, result } => {
            with_signature!(params, *result, Vec<u8>, P, R => {
                serve_as::<P, R>(server, idx, request, extent, reply, false)?
            });
        }
        Signature::Generated(i) => {
            let serve = Serve {
                server,
                idx,
                request,
                extent,
                reply,
            };
            generated::visit(*i, serve).ok_or(Status::ServerRejected)??;
        }
    }
    Ok(true)
}

/// A call of a component server's function with a generated shape, for [`serve_typed`].
struct Serve<'a> {
    server: &'a Shared,
    idx: usize,
    request: &'a [u8],
    extent: Extent,
    reply: &'a mut Vec<u8>,
}

impl ShapeVisitor for Serve<'_> {
    type Out = Result<(), Status>;

    fn visit<S: Shape>(self) -> Result<(), Status> {
        let Serve {
            server,
            idx,
            request,
            extent,
            reply,
        } = self;
        serve_as::<S::Lead, S::Results>(server, idx, request, extent, reply, S::BYTES_LAST)
    }
}

/// Serves one call of function `idx` of `server` with parameters `L` decoded off `request`
/// (which they take `extent` of) and, when `bytes_last`, a byte list after them lowered from
/// where it lies in `request`, not from a copy; appends the results `R` to `reply`.
fn serve_as<L, R>(
    server: &Shared,
    idx: usize,
    request: &[u8],
    extent: Extent,
    reply: &mut Vec<u8>,
    bytes_last: bool,
) -> Result<(), Status>
where
    L: ComponentNamedList + Lower + AStackTuple + LeadArgs,
    R: ComponentNamedList + Lift + AStackTuple + 'static,
{
    let results: R = if bytes_last {
        let mut src = request;
        let lead = L::take(&mut src).ok_or(Status::ServerRejected)?;
        let bytes = last_bytes(src, extent).ok_or(Status::ServerRejected)?;
        server.run_typed_by::<L::With, R, _>(idx, |f, store| lead.call_with(f, store, bytes))
    } else {
        let params = L::get(request, extent).ok_or(Status::ServerRejected)?;
        server.run_typed::<L, R>(idx, params)
    }
    .map_err(|e| e.status())?;
    results.put_all(reply);
    Ok(())
}

/// [`serve_typed`] for a request lent where the client's stub laid it out: a lone byte list
/// parameter is lowered into the component straight from there. `Ok(false)`: the signature
/// is another; the caller serves a private copy of the request.
pub(super) fn serve_lent(
    server: &Shared,
    idx: usize,
    sig: &Signature,
    request: super::lent::Lent,
    extent: Extent,
    reply: &mut super::codec::EncodedResult,
) -> Result<bool, Status> {
    let Signature::Kinds { params, result } = sig else {
        return Ok(false);
    };
    if params[..] != [Kind::Bytes] {
        return Ok(false);
    }
    let len = request.head::<4>().ok_or(Status::ServerRejected)?;
    let len = u32::from_le_bytes(len) as usize;
    if extent.check(request.len().saturating_sub(4 + len)).is_err() {
        return Err(Status::ServerRejected);
    }
    let bytes = request.sub(4, len).ok_or(Status::ServerRejected)?;
    type In = (super::lent::Lent,);
    if *result == Some(Kind::Bytes) {
        // The result lands in the client's `out` segment as it is lifted, when the caller
        // gave a room there (`LiftedBytes::onto`), else goes from the vector it was lifted into.
        use super::lent::LiftedBytes;
        let (out,) = server
            .run_typed_by::<In, (LiftedBytes,), _>(idx, |f, store| f.call(store, (bytes,)))
            .map_err(|e| e.status())?;
        let n = match &out {
            LiftedBytes::InRoom(n) => *n,
            LiftedBytes::Owned(v) => v.len(),
        };
        let n32 = u32::try_from(n).map_err(|_| Status::ResourceExhausted)?;
        reply.head.extend_from_slice(&n32.to_le_bytes());
        match out {
            LiftedBytes::InRoom(n) => reply.landed = Some(n),
            LiftedBytes::Owned(v) => reply.tail = v,
        }
        return Ok(true);
    }
    with_result!(*result, R => {
        server
            .run_typed_by::<In, R, R>(idx, |f, store| f.call(store, (bytes,)))
            .map_err(|e| e.status())?
            .put_all(&mut reply.head)
    });
    Ok(true)
}

/// The byte list at the front of `src` (a `u32` length, then the bytes), borrowed, which
/// takes `extent` of `src`.
fn last_bytes(src: &[u8], extent: Extent) -> Option<&[u8]> {
    let (len, rest) = src.split_first_chunk::<4>()?;
    let bytes = rest.get(..u32::from_le_bytes(*len) as usize)?;
    extent.check(rest.len() - bytes.len()).ok().map(|()| bytes)
}

/// An imported function to link: the linker instance it goes in, its name and its type.
pub(super) struct Import<'l, 'a> {
    pub li: &'l mut LinkerInstance<'a, ComponentData>,
    pub name: &'l str,
    pub ty: &'l ComponentFunc,
}

/// Links `at` with a typed host function forwarding through `f`, when its signature is one
/// the typed path carries. `Ok(false)`: it is not; the caller links the general path.
pub(super) fn link<F: Forwarder>(at: Import<'_, '_>, f: F) -> wasmtime::Result<bool> {
    let Some((params, result)) = signature(at.ty) else {
        return Ok(false);
    };
    with_signature!(params, result, Vec<u8>, P, R => {
        wrap(at.li, at.name, f, |to: &F, _, params: P| to.call::<P, R>(params), F::names, |_| R::default())
    })?;
    Ok(true)
}

/// [`link`] for a forwarder that reads byte list parameters where they are, in the client's
/// memory. `sig` is the server procedure's signature (see [`plan_signature`]): with it the
/// functions with a generated shape are carried too, a failed call answering what the
/// general path answers (an `error` result's `call-failed` case, else the zero value).
pub(super) fn link_view<F: ViewForwarder>(
    at: Import<'_, '_>,
    sig: Option<&Signature>,
    f: F,
) -> wasmtime::Result<bool> {
    if let Some(Signature::Generated(i)) = sig {
        let link = Link { at, f };
        return generated::visit(*i, link).map_or(Ok(false), |r| r.map(|()| true));
    }
    let Some((params, result)) = signature(at.ty) else {
        return Ok(false);
    };
    with_signature!(params, result, WasmList<u8>, P, R => {
        wrap(at.li, at.name, f, F::call::<P, R>, F::names, |_| R::default())
    })?;
    Ok(true)
}

/// An import linked with a function's generated shape, for [`link_view`].
struct Link<'l, 'a, F> {
    at: Import<'l, 'a>,
    f: F,
}

impl<F: ViewForwarder> ShapeVisitor for Link<'_, '_, F> {
    type Out = wasmtime::Result<()>;

    fn visit<S: Shape>(self) -> wasmtime::Result<()> {
        let Link { at, f } = self;
        wrap(
            at.li,
            at.name,
            f,
            F::call::<S::View, S::Results>,
            F::names,
            S::failed,
        )
    }
}

/// A typed import of a component server's export: the binding and the server's function.
pub(super) struct ToComponent {
    pub binding: Arc<ImportBinding>,
    pub idx: usize,
    pub function: String,
}

impl Forwarder for ToComponent {
    fn call<P: Args, R: Args>(&self, params: P) -> Result<R, Status> {
        self.binding.call_typed::<P, R>(self.idx, params)
    }

    fn names(&self) -> (&str, &str) {
        (&self.binding.interface, &self.function)
    }
}

/// Links `name` with a host function that forwards each call through `call` on `to` (given
/// the client's store) and answers a failure with `failed` of a text naming the function and
/// the status (as the general path does), recording it.
fn wrap<T, P, R>(
    li: &mut LinkerInstance<'_, ComponentData>,
    name: &str,
    to: T,
    call: impl Fn(&T, &StoreContext<'_, ComponentData>, P) -> Result<R, Status> + Send + Sync + 'static,
    names: fn(&T) -> (&str, &str),
    failed: fn(&str) -> R,
) -> wasmtime::Result<()>
where
    T: Send + Sync + 'static,
    P: ComponentNamedList + Lift + 'static,
    R: Args,
{
    li.func_wrap(name, move |mut ctx, params: P| {
        match call(&to, &ctx.as_context(), params) {
            Ok(r) => Ok(r),
            Err(status) => {
                let (interface, function) = names(&to);
                let answer = failed(&format!("{interface}#{function}: {status:?}"));
                record_failure(ctx.data_mut(), interface, function, status);
                Ok(answer)
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_kinds() {
        assert_eq!(kind(&Type::U32), Some(Kind::U32));
        assert_eq!(kind(&Type::U64), Some(Kind::U64));
        assert_eq!(kind(&Type::String), Some(Kind::Str));
        assert_eq!(kind(&Type::S32), None);
        assert_eq!(kind(&Type::Bool), None);
    }
}
