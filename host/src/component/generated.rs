//! Static shapes of every function of the kernel's embedded WIT, for the typed path
//! (`typed`), written by the stub compiler's host back end (`lrpc_presentation::host`) into
//! `shapes.generated.rs` beside this file: no interface is written by hand here.
//!
//! The kernel has no build script (an embedder needs Rust alone), so the generated file is
//! kept in the repository, and a test fails when it differs from what the stub compiler
//! makes of `wit/` today. `LRPC_REGENERATE=1 cargo test -p lrpc-kernel --lib generated`
//! writes it afresh.
//!
//! A function's [`Shape`] names the Rust tuples of its parameters and results, whose records,
//! variants, enums and flags the generated modules define with wasmtime's derives and the
//! A-stack layout (`values`). `FUNCTIONS` lists every function with a shape and the
//! fingerprint of its interface, and `visit` runs a [`ShapeVisitor`] with one of them: the
//! typed path looks a procedure up once, when it links or serves it, and keeps its index.

use super::record::ComponentData;
use super::values::{AStackArgs, AStackTuple};
use wasmtime::Store;
use wasmtime::component::{ComponentNamedList, ComponentType, Lift, Lower, TypedFunc};

/// The static types of one function.
pub(crate) trait Shape: 'static {
    /// Whether the last parameter is a `list<u8>`: a server's typed function then takes it
    /// as a slice, lowered from where the caller put it.
    const BYTES_LAST: bool;
    /// The parameters, without the last when it is a `list<u8>` ([`Shape::BYTES_LAST`]).
    type Lead: ComponentNamedList + Lower + AStackTuple + LeadArgs + Send + Sync + 'static;
    /// The parameters as an import receives them: each `list<u8>` still in the caller's
    /// memory.
    type View: ComponentNamedList + Lift + AStackArgs + Send + Sync + 'static;
    /// The results.
    type Results: ComponentNamedList
        + Lift
        + Lower
        + AStackArgs
        + AStackTuple
        + Send
        + Sync
        + 'static;
    /// What a failed call answers (as the dynamic path does, `failure`): an error channel's
    /// `call-failed` case or `text`, else the zero value.
    fn failed(text: &str) -> Self::Results;
}

/// Something to do with a function's [`Shape`].
pub(crate) trait ShapeVisitor {
    /// What it makes.
    type Out;
    /// Does it with shape `S`.
    fn visit<S: Shape>(self) -> Self::Out;
}

/// Parameters that a borrowed byte list follows: calls a typed function taking them and it.
pub(crate) trait LeadArgs: Sized + 'static {
    /// These parameters, then the byte list.
    type With: ComponentNamedList + Lower + 'static;
    /// Calls `f` with these parameters and `bytes`.
    fn call_with<R: ComponentNamedList + Lift + 'static>(
        self,
        f: TypedFunc<Self::With, R>,
        store: &mut Store<ComponentData>,
        bytes: &[u8],
    ) -> wasmtime::Result<R>;
}

/// [`LeadArgs`] for tuples of the given element names.
macro_rules! lead_args {
    ($(($($a:ident)*))*) => {$(
        impl<$($a: ComponentType + Lower + Send + Sync + 'static,)*> LeadArgs for ($($a,)*) {
            type With = ($($a,)* &'static [u8],);
            #[allow(non_snake_case)]
            fn call_with<R: ComponentNamedList + Lift + 'static>(
                self,
                f: TypedFunc<Self::With, R>,
                store: &mut Store<ComponentData>,
                bytes: &[u8],
            ) -> wasmtime::Result<R> {
                // A typed function is covariant in its parameters: the slice may live shorter.
                let f: TypedFunc<($($a,)* &[u8],), R> = f;
                let ($($a,)*) = self;
                f.call(store, ($($a,)* bytes,))
            }
        }
    )*};
}

lead_args! {
    ()
    (A)
    (A B)
    (A B C)
    (A B C D)
    (A B C D E)
    (A B C D E F)
}

/// What the generated code builds on.
mod rt {
    pub(crate) use super::super::values::{AStackValue, Zero, disc_get, disc_put};
    pub(crate) use super::{Shape, ShapeVisitor};
    pub(crate) use wasmtime::component::{ComponentType, Lift, Lower, WasmList};
}

include!("shapes.generated.rs");

#[cfg(test)]
mod tests {
    use super::super::codec;
    use super::super::values::{AStackValue, Zero};
    use super::*;
    use lrpc_presentation::layout::Extent;
    use lrpc_presentation::{InterfacePlan, Wit};
    use wasmtime::component::Val;

    /// The project's WIT, which the kernel embeds (`EMBEDDED_WIT`).
    fn wit() -> Wit {
        Wit::load_dir(&lrpc_presentation::build::project_wit_dir()).unwrap()
    }

    fn plan(name: &str) -> InterfacePlan {
        wit().interface(name).unwrap()
    }

    /// The committed `shapes.generated.rs` is what the stub compiler makes of `wit/` today.
    #[test]
    fn the_generated_shapes_are_current() {
        let wit = wit();
        let mut names = wit.interface_names();
        names.sort();
        let plans: Vec<_> = names.iter().map(|n| wit.interface(n).unwrap()).collect();
        let want = lrpc_presentation::host::generate_host(&plans);
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/component/shapes.generated.rs");
        if std::env::var_os("LRPC_REGENERATE").is_some() {
            std::fs::write(&path, &want).unwrap();
        }
        let have = std::fs::read_to_string(&path).unwrap();
        assert!(
            have == want,
            "{} is stale: run `LRPC_REGENERATE=1 cargo test -p lrpc-kernel --lib generated`",
            path.display()
        );
    }

    /// Every function of every embedded interface has a shape, under its interface's
    /// current fingerprint.
    #[test]
    fn every_embedded_function_has_a_shape() {
        let wit = wit();
        let mut want = Vec::new();
        for name in wit.interface_names() {
            let plan = wit.interface(&name).unwrap();
            for p in &plan.procs {
                want.push((plan.name.clone(), plan.fingerprint, p.name.clone()));
            }
        }
        let mut got: Vec<_> = FUNCTIONS
            .iter()
            .map(|(i, f, p)| (i.to_string(), *f, p.to_string()))
            .collect();
        want.sort();
        got.sort();
        assert_eq!(got, want);
        struct Name;
        impl ShapeVisitor for Name {
            type Out = &'static str;
            fn visit<S: Shape>(self) -> &'static str {
                std::any::type_name::<S>()
            }
        }
        assert!(visit(FUNCTIONS.len() - 1, Name).is_some());
        assert!(visit(FUNCTIONS.len(), Name).is_none());
    }

    fn s(v: &str) -> Val {
        Val::String(v.into())
    }

    fn bytes(b: &[u8]) -> Val {
        Val::List(b.iter().map(|b| Val::U8(*b)).collect())
    }

    /// `handle` of `lrpc:http/plugin`: the generated shapes read and write exactly what the
    /// dynamic codec does, for the parameters and each case of the result.
    #[test]
    fn the_http_shapes_agree_with_the_codec() {
        use lrpc_http_plugin::{Action, Head, Header, Response};
        let plan = plan("lrpc:http/plugin");
        let p = plan.procs.iter().find(|p| p.name == "handle").unwrap();
        let header =
            |n: &str, v: &str| Val::Record(vec![("name".into(), s(n)), ("value".into(), s(v))]);
        let head_val = Val::Record(vec![
            ("method".into(), s("POST")),
            ("path".into(), s("/a/b?c")),
            (
                "headers".into(),
                Val::List(vec![header("host", "x"), header("zoë", "ü")]),
            ),
        ]);
        let head = Head {
            method: "POST".into(),
            path: "/a/b?c".into(),
            headers: [("host", "x"), ("zoë", "ü")]
                .map(|(n, v)| Header {
                    name: n.into(),
                    value: v.into(),
                })
                .into(),
        };
        let tys: Vec<&_> = p.params.iter().map(|(_, t)| t).collect();
        let mut want = Vec::new();
        codec::encode(&plan, &tys, &[head_val.clone(), bytes(b"body")], &mut want).unwrap();
        let mut got = Vec::new();
        (head.clone(), b"body".to_vec()).put_all(&mut got);
        assert_eq!(got, want);
        let back = <(Head, Vec<u8>) as AStackTuple>::get(&want, Extent::Whole);
        assert_eq!(back, Some((head.clone(), b"body".to_vec())));

        let response = Val::Record(vec![
            ("status".into(), Val::U16(503)),
            ("headers".into(), Val::List(vec![])),
            ("body".into(), bytes(&[0, 255])),
        ]);
        let cases = [
            (
                Val::Variant("continue".into(), Some(Box::new(head_val.clone()))),
                Action::Continue(head.clone()),
            ),
            (
                Val::Variant(
                    "rewrite".into(),
                    Some(Box::new(Val::Tuple(vec![head_val, bytes(b"new")]))),
                ),
                Action::Rewrite((head, b"new".to_vec())),
            ),
            (
                Val::Variant("respond".into(), Some(Box::new(response))),
                Action::Respond(Response {
                    status: 503,
                    headers: vec![],
                    body: vec![0, 255],
                }),
            ),
        ];
        let ty = p.result.as_ref().unwrap();
        for (val, action) in cases {
            let mut want = Vec::new();
            codec::encode(&plan, &[ty], &[val], &mut want).unwrap();
            let mut got = Vec::new();
            action.put(&mut got);
            assert_eq!(got, want, "{action:?}");
            assert_eq!(Action::get(&mut &want[..]), Some(action));
        }
        // A failed call answers the first case, zero.
        let (zero,) = lrpc_http_plugin::func::Handle::failed("x");
        assert_eq!(zero, Action::Continue(Zero::zero()));
    }

    /// The byte version's shapes agree with its codec, for a value that is not UTF-8 too;
    /// the string version's refuse that value.
    #[test]
    fn byte_values_agree_with_the_codec() {
        use lrpc_http_plugin_0_2_0 as v2;
        let plan = plan("lrpc:http/plugin@0.2.0");
        let p = plan.procs.iter().find(|p| p.name == "handle").unwrap();
        let tys: Vec<&_> = p.params.iter().map(|(_, t)| t).collect();
        let header = Val::Record(vec![
            ("name".into(), s("x-user")),
            ("value".into(), bytes(b"caf\xe9")),
        ]);
        let head_val = Val::Record(vec![
            ("method".into(), s("GET")),
            ("path".into(), s("/")),
            ("headers".into(), Val::List(vec![header])),
        ]);
        let mut want = Vec::new();
        codec::encode(&plan, &tys, &[head_val, bytes(b"")], &mut want).unwrap();
        let head = v2::Head {
            method: "GET".into(),
            path: "/".into(),
            headers: vec![v2::Header {
                name: "x-user".into(),
                value: b"caf\xe9".to_vec(),
            }],
        };
        let mut got = Vec::new();
        (head.clone(), Vec::<u8>::new()).put_all(&mut got);
        assert_eq!(got, want);
        let back = <(v2::Head, Vec<u8>) as AStackTuple>::get(&want, Extent::Whole);
        assert_eq!(back, Some((head, Vec::new())));
        type V1 = (lrpc_http_plugin::Head, Vec<u8>);
        assert!(<V1 as AStackTuple>::get(&want, Extent::Whole).is_none());
    }

    /// `lrpc:kv/store`: an enum, flags, a record and a variant agree with the dynamic codec,
    /// and a failed call answers the error's first case.
    #[test]
    fn the_kv_shapes_agree_with_the_codec() {
        use lrpc_kv_store::{Access, Entry, Error, Kind};
        let plan = plan("lrpc:kv/store");
        let get = plan.procs.iter().find(|p| p.name == "get").unwrap();
        let ty = get.result.as_ref().unwrap();
        let entry = Val::Record(vec![
            ("key".into(), s("k")),
            ("value".into(), bytes(&[7])),
            ("kind".into(), Val::Enum("binary".into())),
            ("version".into(), Val::U64(u64::MAX)),
        ]);
        let denied = Val::Variant(
            "denied".into(),
            Some(Box::new(Val::Flags(vec!["read".into(), "scan".into()]))),
        );
        let cases: [(Val, Result<Entry, Error>); 3] = [
            (
                Val::Result(Ok(Some(Box::new(entry)))),
                Ok(Entry {
                    key: "k".into(),
                    value: vec![7],
                    kind: Kind::Binary,
                    version: u64::MAX,
                }),
            ),
            (
                Val::Result(Err(Some(Box::new(denied)))),
                Err(Error::Denied(Access::READ | Access::SCAN)),
            ),
            (
                Val::Result(Err(Some(Box::new(Val::Variant(
                    "invalid-key".into(),
                    None,
                ))))),
                Err(Error::InvalidKey),
            ),
        ];
        for (val, typed) in cases {
            let mut want = Vec::new();
            codec::encode(&plan, &[ty], &[val], &mut want).unwrap();
            let mut got = Vec::new();
            typed.put(&mut got);
            assert_eq!(got, want, "{typed:?}");
            assert_eq!(AStackValue::get(&mut &want[..]), Some(typed));
        }
        // Unknown flag bits, a case past the last, an enum value past the last.
        assert_eq!(Access::get(&mut &[0b1000u8][..]), None);
        assert_eq!(Error::get(&mut &[4u8][..]), None);
        assert_eq!(Kind::get(&mut &[2u8][..]), None);
        let (failed,) = lrpc_kv_store::func::Get::failed("x");
        assert_eq!(failed, Err(Error::NotFound(String::new())));
        const { assert!(!lrpc_kv_store::func::Put::BYTES_LAST) };
        const { assert!(lrpc_http_plugin::func::Handle::BYTES_LAST) };
    }

    /// Truncated or lying bytes are refused, never a panic or a large allocation.
    #[test]
    fn malformed_bytes_are_refused() {
        use lrpc_http_plugin::{Action, Head};
        let head = Head {
            method: "GET".into(),
            path: "/".into(),
            headers: vec![],
        };
        let mut b = Vec::new();
        (head, b"body".to_vec()).put_all(&mut b);
        for n in 0..b.len() {
            assert!(<(Head, Vec<u8>) as AStackTuple>::get(&b[..n], Extent::Whole).is_none());
        }
        // A header count of 2^32 - 1 with 8 bytes left.
        let mut lie = Vec::new();
        "GET".to_string().put(&mut lie);
        "/".to_string().put(&mut lie);
        lie.extend_from_slice(&u32::MAX.to_le_bytes());
        lie.extend_from_slice(&[0; 8]);
        assert!(Head::get(&mut &lie[..]).is_none());
        assert!(Action::get(&mut &[3u8][..]).is_none());
    }
}
