//! Checks a component's function types against the WIT the kernel knows.
//!
//! A component carries its own types; wasmtime compares two components' types structurally
//! (`Type: PartialEq`), which is how an import is checked against the export it is bound to.
//! At export time the kernel checks the exported functions against the WIT interface of the
//! same name, so that clients written against the kernel's WIT get what they expect.

use wasmtime::component::types::{ComponentFunc, Type as C};
use wit_parser::{Function, Handle, InterfaceId, Resolve, Type as W, TypeDefKind, TypeId};

/// The interface called `name` (like `lrpc:kv/store`) in `resolve`.
pub(crate) fn interface_id(resolve: &Resolve, name: &str) -> Option<InterfaceId> {
    resolve
        .interfaces
        .iter()
        .find(|(id, _)| resolve.id_of(*id).as_deref() == Some(name))
        .map(|(id, _)| id)
}

/// Checks that the component function `have` has the signature of the WIT function `want`.
pub(crate) fn check_func(
    resolve: &Resolve,
    want: &Function,
    have: &ComponentFunc,
) -> Result<(), String> {
    let params: Vec<(&str, C)> = have.params().collect();
    if params.len() != want.params.len() {
        return Err(format!(
            "{} parameters where the WIT has {}",
            params.len(),
            want.params.len()
        ));
    }
    for (p, (_, ty)) in want.params.iter().zip(&params) {
        check(resolve, &p.ty, ty).map_err(|e| format!("parameter `{}`: {e}", p.name))?;
    }
    let results: Vec<C> = have.results().collect();
    match (&want.result, results.as_slice()) {
        (None, []) => Ok(()),
        (Some(w), [h]) => check(resolve, w, h).map_err(|e| format!("result: {e}")),
        (None, _) => Err("returns a value where the WIT returns nothing".into()),
        (Some(_), _) => Err(format!("{} results where the WIT has one", results.len())),
    }
}

fn mismatch(want: &str, have: &C) -> String {
    format!("expected {want}, found {}", kind(have))
}

fn check(resolve: &Resolve, want: &W, have: &C) -> Result<(), String> {
    let same = match (want, have) {
        (W::Id(id), _) => return check_def(resolve, *id, have),
        (W::Bool, C::Bool)
        | (W::U8, C::U8)
        | (W::U16, C::U16)
        | (W::U32, C::U32)
        | (W::U64, C::U64)
        | (W::S8, C::S8)
        | (W::S16, C::S16)
        | (W::S32, C::S32)
        | (W::S64, C::S64)
        | (W::F32, C::Float32)
        | (W::F64, C::Float64)
        | (W::Char, C::Char)
        | (W::String, C::String)
        | (W::ErrorContext, C::ErrorContext) => true,
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(mismatch(&format!("{want:?}").to_lowercase(), have))
    }
}

fn names_equal<'a>(
    what: &str,
    want: impl ExactSizeIterator<Item = &'a str>,
    have: impl ExactSizeIterator<Item = &'a str>,
) -> Result<(), String> {
    let (want, have): (Vec<&str>, Vec<&str>) = (want.collect(), have.collect());
    if want == have {
        Ok(())
    } else {
        Err(format!("{what} {want:?} expected, found {have:?}"))
    }
}

fn check_opt(resolve: &Resolve, want: Option<&W>, have: Option<C>) -> Result<(), String> {
    match (want, have) {
        (None, None) => Ok(()),
        (Some(w), Some(h)) => check(resolve, w, &h),
        (None, Some(h)) => Err(format!("no payload expected, found {}", kind(&h))),
        (Some(_), None) => Err("a payload expected, found none".into()),
    }
}

fn check_def(resolve: &Resolve, id: TypeId, have: &C) -> Result<(), String> {
    let Some(def) = resolve.types.get(id) else {
        return Err("an unknown WIT type".into());
    };
    match (&def.kind, have) {
        (TypeDefKind::Type(t), _) => check(resolve, t, have),
        (TypeDefKind::Record(r), C::Record(h)) => {
            let fields: Vec<_> = h.fields().collect();
            names_equal(
                "record fields",
                r.fields.iter().map(|f| f.name.as_str()),
                fields.iter().map(|f| f.name),
            )?;
            for (w, f) in r.fields.iter().zip(&fields) {
                check(resolve, &w.ty, &f.ty).map_err(|e| format!("field `{}`: {e}", w.name))?;
            }
            Ok(())
        }
        (TypeDefKind::Tuple(t), C::Tuple(h)) => {
            let types: Vec<C> = h.types().collect();
            if types.len() != t.types.len() {
                return Err(format!(
                    "a tuple of {} expected, found one of {}",
                    t.types.len(),
                    types.len()
                ));
            }
            for (i, (w, h)) in t.types.iter().zip(&types).enumerate() {
                check(resolve, w, h).map_err(|e| format!("tuple element {i}: {e}"))?;
            }
            Ok(())
        }
        (TypeDefKind::Flags(f), C::Flags(h)) => {
            names_equal("flags", f.flags.iter().map(|f| f.name.as_str()), h.names())
        }
        (TypeDefKind::Enum(e), C::Enum(h)) => names_equal(
            "enum cases",
            e.cases.iter().map(|c| c.name.as_str()),
            h.names(),
        ),
        (TypeDefKind::Variant(v), C::Variant(h)) => {
            let cases: Vec<_> = h.cases().collect();
            names_equal(
                "variant cases",
                v.cases.iter().map(|c| c.name.as_str()),
                cases.iter().map(|c| c.name),
            )?;
            for (w, c) in v.cases.iter().zip(cases) {
                check_opt(resolve, w.ty.as_ref(), c.ty)
                    .map_err(|e| format!("case `{}`: {e}", w.name))?;
            }
            Ok(())
        }
        (TypeDefKind::Option(t), C::Option(h)) => {
            check(resolve, t, &h.ty()).map_err(|e| format!("option: {e}"))
        }
        (TypeDefKind::Result(r), C::Result(h)) => {
            check_opt(resolve, r.ok.as_ref(), h.ok()).map_err(|e| format!("ok: {e}"))?;
            check_opt(resolve, r.err.as_ref(), h.err()).map_err(|e| format!("err: {e}"))
        }
        (TypeDefKind::List(t), C::List(h)) => {
            check(resolve, t, &h.ty()).map_err(|e| format!("list: {e}"))
        }
        // A handle of a resource the interface defines: the resource types of two
        // components never compare equal, so handles are matched by kind (and, at bind
        // time, by the resource's name in the interface).
        (TypeDefKind::Handle(Handle::Own(_)), C::Own(_))
        | (TypeDefKind::Resource, C::Own(_))
        | (TypeDefKind::Handle(Handle::Borrow(_)), C::Borrow(_)) => Ok(()),
        (kind_w, _) => Err(mismatch(wit_kind(kind_w), have)),
    }
}

fn wit_kind(k: &TypeDefKind) -> &'static str {
    match k {
        TypeDefKind::Record(_) => "a record",
        TypeDefKind::Resource => "a resource",
        TypeDefKind::Handle(Handle::Own(_)) => "an own handle",
        TypeDefKind::Handle(Handle::Borrow(_)) => "a borrow handle",
        TypeDefKind::Flags(_) => "flags",
        TypeDefKind::Tuple(_) => "a tuple",
        TypeDefKind::Variant(_) => "a variant",
        TypeDefKind::Enum(_) => "an enum",
        TypeDefKind::Option(_) => "an option",
        TypeDefKind::Result(_) => "a result",
        TypeDefKind::List(_) => "a list",
        TypeDefKind::Map(..) => "a map",
        TypeDefKind::FixedLengthList(..) => "a fixed-length list",
        TypeDefKind::Future(_) => "a future",
        TypeDefKind::Stream(_) => "a stream",
        TypeDefKind::Type(_) => "a type alias",
        TypeDefKind::Unknown => "an unknown type",
    }
}

/// A short name of a component type's kind, for messages.
pub(crate) fn kind(t: &C) -> &'static str {
    match t {
        C::Bool => "bool",
        C::S8 => "s8",
        C::U8 => "u8",
        C::S16 => "s16",
        C::U16 => "u16",
        C::S32 => "s32",
        C::U32 => "u32",
        C::S64 => "s64",
        C::U64 => "u64",
        C::Float32 => "f32",
        C::Float64 => "f64",
        C::Char => "char",
        C::String => "string",
        C::List(_) => "a list",
        C::Map(_) => "a map",
        C::Record(_) => "a record",
        C::Tuple(_) => "a tuple",
        C::Variant(_) => "a variant",
        C::Enum(_) => "an enum",
        C::Option(_) => "an option",
        C::Result(_) => "a result",
        C::Flags(_) => "flags",
        C::Own(_) => "an own handle",
        C::Borrow(_) => "a borrow handle",
        C::Future(_) => "a future",
        C::Stream(_) => "a stream",
        C::ErrorContext => "an error-context",
        C::FixedLengthList(_) => "a fixed-length list",
    }
}
