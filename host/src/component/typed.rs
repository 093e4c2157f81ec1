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
//! vector it was lifted into. Both ways also
//! carry `lrpc:http/plugin`'s `handle` (both versions) and `lrpc:kv/store` with the shapes of
//! `super::shapes`.
//!
//! The binding's checks, the server's deadline and fuel, and the failure answers are the same
//! on both paths: a failed call answers the result type's zero value (0, an empty string or
//! list), as the general path does for those types, and is recorded as a failure.

use super::binding::ImportBinding;
use super::codec::{AStackArgs, AStackTuple, AStackValue as _};
use super::failure::record_failure;
use super::record::{ComponentData, Shared};
use lrpc_abi::Status;
use lrpc_presentation::layout::Extent;
use lrpc_presentation::layout::is_bytes;
use lrpc_presentation::{InterfacePlan, Prim, ProcPlan, Ty};
use std::sync::Arc;
use wasmtime::component::types::{ComponentFunc, Type};
use wasmtime::component::{ComponentNamedList, Lift, LinkerInstance, Lower, TypedFunc, WasmList};
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

/// Serves `lrpc:http/plugin`'s `handle` with the typed shapes of module `$shape` of
/// `super::shapes` (`strings` or `bytes`), for [`serve_typed`].
macro_rules! http_handle {
    ($shape:ident, $server:expr, $idx:expr, $request:expr, $extent:expr, $reply:expr) => {{
        let (server, idx, request, extent, reply) = ($server, $idx, $request, $extent, $reply);
        use super::shapes::$shape::{Action, Head};
        let mut src = request;
        let head = Head::get(&mut src).ok_or(Status::ServerRejected)?;
        let body = last_bytes(src, extent).ok_or(Status::ServerRejected)?;
        let (action,) = server
            .run_typed_by::<(Head, &'static [u8]), (Action,), _>(idx, |f, store| {
                let f: TypedFunc<(Head, &[u8]), (Action,)> = f;
                f.call(store, (head, body))
            })
            .map_err(|e| e.status())?;
        action.put(reply);
    }};
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
    /// `lrpc:http/plugin`'s `handle`, carried with the shapes of `super::shapes::strings`.
    HttpHandle,
    /// `lrpc:http/plugin@0.2.0`'s `handle` (header values as bytes), carried with the shapes
    /// of `super::shapes::bytes`.
    HttpHandleBytes,
    /// A function of `lrpc:kv/store`, carried with the shapes of `super::shapes::kv`.
    Kv(KvFn),
}

/// The functions of `lrpc:kv/store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KvFn {
    Put,
    Get,
    Delete,
    Keys,
    Stats,
    Rights,
    Measure,
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
    // The kernel's own WIT defines the interface, so its types are the shapes'.
    if plan.name == super::shapes::HTTP_PLUGIN && p.name == "handle" {
        return Some(Signature::HttpHandle);
    }
    if plan.name == super::shapes::HTTP_PLUGIN_BYTES && p.name == "handle" {
        return Some(Signature::HttpHandleBytes);
    }
    if plan.name == super::shapes::KV_STORE {
        let f = match p.name.as_str() {
            "put" => KvFn::Put,
            "get" => KvFn::Get,
            "delete" => KvFn::Delete,
            "keys" => KvFn::Keys,
            "stats" => KvFn::Stats,
            "rights" => KvFn::Rights,
            "measure" => KvFn::Measure,
            _ => return None,
        };
        return Some(Signature::Kv(f));
    }
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
    fn serve<P, R>(
        server: &Shared,
        idx: usize,
        request: &[u8],
        extent: Extent,
        reply: &mut Vec<u8>,
    ) -> Result<(), Status>
    where
        P: ComponentNamedList + Lower + AStackTuple + 'static,
        R: ComponentNamedList + Lift + AStackTuple + 'static,
    {
        let params = P::get(request, extent).ok_or(Status::ServerRejected)?;
        let results: R = server.run_typed(idx, params).map_err(|e| e.status())?;
        results.put_all(reply);
        Ok(())
    }
    match sig {
        // One byte list: lowered from where it lies in `request`, not from a copy of it.
        Signature::Kinds { params, result } if params[..] == [Kind::Bytes] => {
            let bytes = last_bytes(request, extent).ok_or(Status::ServerRejected)?;
            with_result!(*result, R => {
                server
                    .run_typed_by::<(&'static [u8],), R, R>(idx, |f, store| {
                        let f: TypedFunc<(&[u8],), R> = f;
                        f.call(store, (bytes,))
                    })
                    .map_err(|e| e.status())?
                    .put_all(reply)
            });
        }
        Signature::Kinds { params, result } => {
            with_signature!(params, *result, Vec<u8>, P, R => {
                serve::<P, R>(server, idx, request, extent, reply)?
            });
        }
        // The two versions of `lrpc:http/plugin` differ only in their header values' type.
        Signature::HttpHandle => http_handle!(strings, server, idx, request, extent, reply),
        Signature::HttpHandleBytes => {
            http_handle!(bytes, server, idx, request, extent, reply)
        }
        Signature::Kv(f) => {
            use super::shapes::kv::{Access, Entry, Error, Kind};
            let (s, i, e, r) = (server, idx, extent, reply);
            match f {
                KvFn::Put => {
                    serve::<(String, Vec<u8>, Kind), (Result<u64, Error>,)>(s, i, request, e, r)
                }
                KvFn::Get => serve::<(String,), (Result<Entry, Error>,)>(s, i, request, e, r),
                KvFn::Delete => serve::<(String,), (bool,)>(s, i, request, e, r),
                KvFn::Keys => serve::<(Option<String>,), (Vec<String>,)>(s, i, request, e, r),
                KvFn::Stats => serve::<(), ((u32, u64),)>(s, i, request, e, r),
                KvFn::Rights => serve::<(), (Access,)>(s, i, request, e, r),
                KvFn::Measure => {
                    serve::<(char, i64, f64), ((char, i64, f64),)>(s, i, request, e, r)
                }
            }?;
        }
    }
    Ok(true)
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
        wrap(at.li, at.name, f, |to: &F, _, params: P| to.call::<P, R>(params), F::names, R::default)
    })?;
    Ok(true)
}

/// [`link`] for a forwarder that reads byte list parameters where they are, in the client's
/// memory. `sig` is the server procedure's signature (see [`plan_signature`]): with it the
/// records and variants of `lrpc:http/plugin`'s `handle` and of `lrpc:kv/store` are carried
/// too, a failed call answering what the general path answers (an `error` result's first
/// case, else the zero value).
pub(super) fn link_view<F: ViewForwarder>(
    at: Import<'_, '_>,
    sig: Option<&Signature>,
    f: F,
) -> wasmtime::Result<bool> {
    use super::shapes::kv::{Access, Entry, Error, Kind as KvKind};
    use super::shapes::{bytes, strings};
    type Failed<T> = Result<T, Error>;
    fn not_found<T>() -> (Failed<T>,) {
        (Err(Error::NotFound(String::new())),)
    }
    let (li, name) = (at.li, at.name);
    match sig {
        Some(Signature::HttpHandle) => wrap(
            li,
            name,
            f,
            F::call::<(strings::Head, WasmList<u8>), (strings::Action,)>,
            F::names,
            || (strings::Action::zero(),),
        )?,
        Some(Signature::HttpHandleBytes) => wrap(
            li,
            name,
            f,
            F::call::<(bytes::Head, WasmList<u8>), (bytes::Action,)>,
            F::names,
            || (bytes::Action::zero(),),
        )?,
        Some(Signature::Kv(kv)) => match kv {
            KvFn::Put => wrap(
                li,
                name,
                f,
                F::call::<(String, WasmList<u8>, KvKind), (Failed<u64>,)>,
                F::names,
                not_found,
            )?,
            KvFn::Get => wrap(
                li,
                name,
                f,
                F::call::<(String,), (Failed<Entry>,)>,
                F::names,
                not_found,
            )?,
            KvFn::Delete => wrap(li, name, f, F::call::<(String,), (bool,)>, F::names, || {
                (false,)
            })?,
            KvFn::Keys => wrap(
                li,
                name,
                f,
                F::call::<(Option<String>,), (Vec<String>,)>,
                F::names,
                || (Vec::new(),),
            )?,
            KvFn::Stats => wrap(li, name, f, F::call::<(), ((u32, u64),)>, F::names, || {
                ((0, 0),)
            })?,
            KvFn::Rights => wrap(li, name, f, F::call::<(), (Access,)>, F::names, || {
                (Access::default(),)
            })?,
            KvFn::Measure => wrap(
                li,
                name,
                f,
                F::call::<(char, i64, f64), ((char, i64, f64),)>,
                F::names,
                || (('\0', 0, 0.0),),
            )?,
        },
        _ => {
            let Some((params, result)) = signature(at.ty) else {
                return Ok(false);
            };
            with_signature!(params, result, WasmList<u8>, P, R => {
                wrap(li, name, f, F::call::<P, R>, F::names, R::default)
            })?;
        }
    }
    Ok(true)
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
/// the client's store) and answers a failure with the result's zero value, recording it.
fn wrap<T, P, R>(
    li: &mut LinkerInstance<'_, ComponentData>,
    name: &str,
    to: T,
    call: impl Fn(&T, &StoreContext<'_, ComponentData>, P) -> Result<R, Status> + Send + Sync + 'static,
    names: fn(&T) -> (&str, &str),
    failed: fn() -> R,
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
                record_failure(ctx.data_mut(), interface, function, status);
                Ok(failed())
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
