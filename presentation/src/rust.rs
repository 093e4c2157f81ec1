//! Back end: Rust client and server stubs for guests, written against `lrpc-sdk`.
//!
//! The generated file defines one module per interface (named after the interface's last
//! path segment, without the package version: see [`module_name`]) and must be included at
//! the crate root. Each module has the interface's types, a `Client` (one method per
//! function, `Result<_, CallError>`), a `Server` trait with `&self` methods (servers are
//! re-entrant: a handler may make calls that come back into its own domain), and an `export!`
//! macro that exports the entry stubs for a `Server + Default` type.
//!
//! What a value of each WIT type needs on the wire — encoding, size, decoding, skipping — is
//! written in one place per type by the `codec` submodule; this module assembles it into
//! stubs. Encoding code is generated per type, so `list<u8>` and `string` are single copies.

use crate::annot::{OutMode, SidePresentation, Types};
use crate::layout::is_bytes;
use crate::plan::{Def, DefKind, InterfacePlan, Prim, ProcPlan, Ty};
use std::fmt::Write as _;

mod codec;
pub(crate) mod names;

use codec::flags_repr;
pub(crate) use codec::prim_rust;
pub use names::module_name;
use names::{camel, def_fn, shout, snake};

struct Gen<'a> {
    plan: &'a InterfacePlan,
    client: Option<&'a SidePresentation>,
    server: Option<&'a SidePresentation>,
    /// Strings and byte lists inside the types are `Cow<'a, _>`s (either side's presentation
    /// asked for `types = "borrowed"`).
    borrowed: bool,
    out: String,
}

/// Generates the stubs of one interface under the default presentation.
pub fn generate_rust(plan: &InterfacePlan) -> String {
    generate_rust_with(plan, None, None)
}

/// Generates the stubs of one interface; the client stubs follow `client`'s presentation and
/// the server stubs `server`'s. What changes the Rust API:
///
/// * a client's `out = "caller-allocates"` on a `list<u8>` or `string` result: the method
///   takes a caller-provided `out: &mut [u8]` and returns the length written;
/// * a server's `out = "caller-allocates"`: the handler gets an `&mut OutBuf` and writes the
///   result straight onto the A-stack (no copy);
/// * a server's `out = "dealloc(never)"`: the handler returns a view (`&[u8]` or `&str`) into
///   its own storage, which the stub copies without allocating;
/// * `types = "borrowed"` (either side): strings and byte lists inside records, variants,
///   tuples, options, results and lists are `Cow<'a, str>` / `Cow<'a, [u8]>`, and the types
///   holding them carry the lifetime. The server's handlers are generic over `'a`: their
///   parameters are lent from the stub's private copy of the request (no allocation per
///   string) and their results may borrow from them; `into_owned()` detaches a value from
///   what it borrowed. A client passes such types by reference and receives its results
///   owned (`'static`).
///
/// `in` annotations (`trashable`, `preserved`, `stable`) do not change the API — a server
/// always receives byte-list parameters as `&[u8]` — they decide, with whether the call lends
/// its arguments, whether that slice is the A-stack (or the request segment) or a private copy. A request that also holds
/// strings has the rest copied into private memory around the borrowed byte lists.
pub fn generate_rust_with(
    plan: &InterfacePlan,
    client: Option<&SidePresentation>,
    server: Option<&SidePresentation>,
) -> String {
    let borrowed = [client, server]
        .iter()
        .any(|p| p.is_some_and(|p| p.types == Types::Borrowed));
    let mut g = Gen {
        plan,
        client,
        server,
        borrowed,
        out: String::new(),
    };
    g.module();
    g.out
}

impl Gen<'_> {
    fn def(&self, i: usize) -> &Def {
        &self.plan.defs[i]
    }

    /// Whether values of `t` may borrow the bytes they were decoded from: under borrowed
    /// types, when a string or byte list appears anywhere in it. Such types carry `'a`.
    fn lends(&self, t: &Ty) -> bool {
        if !self.borrowed {
            return false;
        }
        match t {
            Ty::Prim(_) => false,
            Ty::String => true,
            Ty::List(el) => is_bytes(t) || self.lends(el),
            Ty::Tuple(ts) => ts.iter().any(|t| self.lends(t)),
            Ty::Option(t) => self.lends(t),
            Ty::Result(ok, err) => [ok, err]
                .iter()
                .any(|t| t.as_ref().is_some_and(|t| self.lends(t))),
            Ty::Named(i) => match &self.def(*i).kind {
                DefKind::Record(fs) => fs.iter().any(|(_, t)| self.lends(t)),
                DefKind::Variant(cs) => cs
                    .iter()
                    .any(|(_, t)| t.as_ref().is_some_and(|t| self.lends(t))),
                DefKind::Enum(_) | DefKind::Flags(_) => false,
            },
        }
    }

    /// The Rust type of named type `i`, with its lifetime `'a` when it has one.
    fn def_type(&self, i: usize) -> String {
        let name = camel(&self.def(i).name);
        if self.lends(&Ty::Named(i)) {
            format!("{name}<'a>")
        } else {
            name
        }
    }

    /// `v`, of scalar type `t`, as the core value of a register entry.
    fn to_word(t: &Ty, v: &str) -> String {
        match t {
            Ty::Prim(Prim::S32 | Prim::S64 | Prim::F32 | Prim::F64) => v.to_string(),
            Ty::Prim(Prim::U64) => format!("{v} as i64"),
            _ => format!("{v} as i32"),
        }
    }

    /// `v`, a register entry's core value, as scalar type `t`.
    fn from_word(t: &Ty, v: &str) -> String {
        match t {
            Ty::Prim(Prim::S32 | Prim::S64 | Prim::F32 | Prim::F64) => v.to_string(),
            Ty::Prim(Prim::Bool) => format!("{v} != 0"),
            Ty::Prim(p) => format!("{v} as {}", prim_rust(*p)),
            _ => unreachable!("register entries carry scalars only"),
        }
    }

    /// The register entry's function type, e.g. `extern "C" fn(i32, i32) -> i32`.
    fn register_fn_type(f: &crate::plan::RegisterEntry) -> String {
        let params: Vec<&str> = f.params.iter().map(|w| w.rust()).collect();
        let ret = f
            .result
            .map_or(String::new(), |w| format!(" -> {}", w.rust()));
        format!("extern \"C\" fn({}){ret}", params.join(", "))
    }

    /// The Rust type, with lifetime `'a` where it may borrow.
    fn owned(&self, t: &Ty) -> String {
        self.codec(t, "").ty
    }

    /// The Rust type of a value decoded owned (a client's result): `'static`, and a result
    /// that is one string or byte list is a `String` or `Vec<u8>` whatever the types.
    fn decoded(&self, t: &Ty) -> String {
        match t {
            Ty::String => "String".into(),
            t if is_bytes(t) => "Vec<u8>".into(),
            t => self.owned(t).replace("'a", "'static"),
        }
    }

    /// Decoding a client's result, of type [`Gen::decoded`].
    fn decode_result(&self, t: &Ty) -> String {
        let c = self.codec(t, "");
        match c.view {
            Some(v) => format!("::lrpc_sdk::rt::Owned::owned({})", v.dec),
            None => c.dec,
        }
    }

    /// Whether parameter `k` of procedure `i` is marshaled by the programmer (`special`).
    fn special(p: Option<&SidePresentation>, i: usize, k: usize) -> bool {
        p.and_then(|p| p.functions.get(&i))
            .is_some_and(|f| f.special.contains(&k))
    }

    /// The `out` annotation of procedure `i` in a presentation.
    fn out_mode(p: Option<&SidePresentation>, i: usize) -> Option<OutMode> {
        p.and_then(|p| p.functions.get(&i)).and_then(|f| f.out)
    }

    /// The type of an `in` parameter as the client passes it.
    fn client_param(&self, t: &Ty) -> String {
        let c = self.codec(t, "");
        c.param.unwrap_or(c.ty).replace("'a", "'_")
    }

    /// The type of an `in` parameter as the server receives it (borrowed from its private
    /// copy of the request for strings and byte lists, or from the A-stack for a byte list
    /// the binding lets it borrow).
    fn server_param(&self, t: &Ty) -> String {
        let c = self.codec(t, "");
        match c.view {
            // Under borrowed types, views live as long as what the handler was lent.
            Some(v) if self.borrowed => v.ty.replacen('&', "&'a ", 1),
            Some(v) => v.ty.into(),
            None => c.ty,
        }
    }

    fn module(&mut self) {
        let plan = self.plan;
        let module = module_name(&plan.name);
        let _ = writeln!(
            self.out,
            "/// Stubs for `{}`, generated from WIT by `lrpc-presentation`.",
            plan.name
        );
        let _ = writeln!(
            self.out,
            "#[allow(dead_code, unused_imports, unused_variables, unused_mut, unused_braces, unused_parens, clippy::all, reason = \"generated code\")]"
        );
        let _ = writeln!(self.out, "pub mod {module} {{");
        let _ = writeln!(
            self.out,
            "    use ::lrpc_sdk::rt::{{DecodeError, Reader, Writer}};\n    pub use ::lrpc_sdk::CallError;"
        );
        let _ = writeln!(self.out, "    /// The interface's name.");
        let _ = writeln!(self.out, "    pub const INTERFACE: &str = {:?};", plan.name);
        let _ = writeln!(self.out, "    /// The interface's fingerprint.");
        let _ = writeln!(
            self.out,
            "    pub const FINGERPRINT: u64 = {:#018x};",
            plan.fingerprint
        );
        let _ = writeln!(self.out, "    /// Number of procedures.");
        let _ = writeln!(
            self.out,
            "    pub const PROCS: usize = {};",
            plan.procs.len()
        );
        for (i, p) in plan.procs.iter().enumerate() {
            let _ = writeln!(self.out, "    /// Procedure id of `{}`.", p.name);
            let _ = writeln!(
                self.out,
                "    pub const PROC_{}: u32 = {i};",
                shout(&p.name)
            );
        }
        for i in 0..plan.defs.len() {
            self.typedef(i);
        }
        self.client();
        self.server(&module);
        self.out.push_str("}\n");
    }

    /// The Rust type of named type `i` and its four wire functions.
    fn typedef(&mut self, i: usize) {
        let d = self.def(i);
        let name = camel(&d.name);
        // The type as declared (`Name<'a>` when it may borrow), and as its wire functions
        // take it.
        let decl = self.def_type(i);
        let lends = self.lends(&Ty::Named(i));
        let (any, owned) = if lends {
            (format!("{name}<'_>"), format!("{name}<'static>"))
        } else {
            (name.clone(), name.clone())
        };
        let o = &mut String::new();
        match &d.kind {
            DefKind::Record(fs) => {
                let _ = writeln!(o, "    /// WIT record `{}`.", d.name);
                let _ = writeln!(o, "    #[derive(Clone, Debug, PartialEq)]");
                let _ = writeln!(o, "    pub struct {decl} {{");
                for (f, t) in fs {
                    let _ = writeln!(o, "        /// Field `{f}`.");
                    let _ = writeln!(o, "        pub {}: {},", snake(f), self.owned(t));
                }
                let _ = writeln!(o, "    }}");
            }
            DefKind::Enum(cs) => {
                let _ = writeln!(o, "    /// WIT enum `{}`.", d.name);
                let _ = writeln!(o, "    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]");
                let _ = writeln!(o, "    pub enum {name} {{");
                for c in cs {
                    let _ = writeln!(o, "        /// Case `{c}`.");
                    let _ = writeln!(o, "        {},", camel(c));
                }
                let _ = writeln!(o, "    }}");
            }
            DefKind::Variant(cs) => {
                let _ = writeln!(o, "    /// WIT variant `{}`.", d.name);
                let _ = writeln!(o, "    #[derive(Clone, Debug, PartialEq)]");
                let _ = writeln!(o, "    pub enum {decl} {{");
                for (c, t) in cs {
                    let _ = writeln!(o, "        /// Case `{c}`.");
                    match t {
                        Some(t) => {
                            let _ = writeln!(o, "        {}({}),", camel(c), self.owned(t));
                        }
                        None => {
                            let _ = writeln!(o, "        {},", camel(c));
                        }
                    }
                }
                let _ = writeln!(o, "    }}");
            }
            DefKind::Flags(fs) => self.flags_type(o, &d.name, fs),
        }
        if lends {
            self.owned_fn(o, i);
        }
        let c = self.def_codec(i);
        let f = def_fn(&d.name);
        let _ = writeln!(
            o,
            "    fn __enc_{f}(__w: &mut Writer, __v: &{any}) {{ {} }}",
            c.enc
        );
        let _ = writeln!(
            o,
            "    fn __size_{f}(__v: &{any}) -> usize {{ {} }}",
            c.size
        );
        let _ = writeln!(
            o,
            "    fn __dec_{f}(__r: &mut Reader<'_>) -> Result<{owned}, DecodeError> {{ {} }}",
            c.dec
        );
        if lends {
            let _ = writeln!(
                o,
                "    fn __lend_{f}<'a>(__r: &mut Reader<'a>) -> Result<{decl}, DecodeError> {{ {} }}",
                c.lend
            );
        }
        let _ = writeln!(
            o,
            "    fn __skip_{f}(__r: &mut Reader<'_>) -> Result<(), DecodeError> {{ {} Ok(()) }}",
            c.skip
        );
        self.out.push_str(o);
    }

    /// `into_owned` of named type `i`, which may borrow: the same value with every string and
    /// byte list it holds owned, so that it outlives what it was lent from.
    fn owned_fn(&self, o: &mut String, i: usize) {
        let d = self.def(i);
        let name = camel(&d.name);
        let body = match &d.kind {
            DefKind::Record(fs) => {
                let fields: String = fs
                    .iter()
                    .map(|(f, t)| {
                        let f = snake(f);
                        format!("{f}: {}, ", self.own(t, &format!("self.{f}")))
                    })
                    .collect();
                format!("{name} {{ {fields}}}")
            }
            DefKind::Variant(cs) => {
                let arms: String = cs
                    .iter()
                    .map(|(c, t)| {
                        let c = camel(c);
                        match t {
                            Some(t) => {
                                format!("{name}::{c}(__x) => {name}::{c}({}), ", self.own(t, "__x"))
                            }
                            None => format!("{name}::{c} => {name}::{c}, "),
                        }
                    })
                    .collect();
                format!("match self {{ {arms}}}")
            }
            DefKind::Enum(_) | DefKind::Flags(_) => return,
        };
        let _ = writeln!(
            o,
            "    impl {name}<'_> {{\n        /// This value with every string and byte list it holds owned: it no longer borrows what it was lent from.\n        pub fn into_owned(self) -> {name}<'static> {{ {body} }}\n    }}"
        );
    }

    /// `e`, a value of type `t` (which may borrow), with every string and byte list it holds
    /// owned.
    fn own(&self, t: &Ty, e: &str) -> String {
        if !self.lends(t) {
            return e.into();
        }
        match t {
            Ty::String => format!("::std::borrow::Cow::Owned({e}.into_owned())"),
            t if is_bytes(t) => format!("::std::borrow::Cow::Owned({e}.into_owned())"),
            Ty::List(el) => format!(
                "{e}.into_iter().map(|__x| {}).collect::<Vec<_>>()",
                self.own(el, "__x")
            ),
            Ty::Tuple(ts) => {
                let parts: Vec<String> = ts
                    .iter()
                    .enumerate()
                    .map(|(k, t)| self.own(t, &format!("__t.{k}")))
                    .collect();
                format!("{{ let __t = {e}; {} }}", codec::tuple_of(&parts))
            }
            Ty::Option(t) => format!("{e}.map(|__x| {})", self.own(t, "__x")),
            Ty::Result(ok, err) => {
                // Only the sides that may borrow are mapped.
                let mut out = e.to_string();
                for (t, f) in [(ok, "map"), (err, "map_err")] {
                    if let Some(t) = t.as_ref().filter(|t| self.lends(t)) {
                        out += &format!(".{f}(|__x| {})", self.own(t, "__x"));
                    }
                }
                out
            }
            Ty::Named(_) => format!("{e}.into_owned()"),
            Ty::Prim(_) => e.into(),
        }
    }

    /// The Rust type of flags type `wit_name`: a struct over the integer of [`flags_repr`]
    /// with constants per flag and the set operations.
    fn flags_type(&self, o: &mut String, wit_name: &str, fs: &[String]) {
        let name = camel(wit_name);
        let (repr, _) = flags_repr(fs.len());
        let all: u128 = if fs.len() >= 128 {
            u128::MAX
        } else {
            (1u128 << fs.len()) - 1
        };
        let consts: String = fs
            .iter()
            .enumerate()
            .map(|(k, f)| {
                format!(
                    "        /// Flag `{f}`.\n        pub const {}: {name} = {name} {{ bits: 1 << {k} }};\n",
                    shout(f)
                )
            })
            .collect();
        let _ = write!(
            o,
            "    /// WIT flags `{wit_name}`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct {name} {{ bits: {repr} }}
    impl {name} {{
{consts}        /// No flag set.
        pub const fn empty() -> {name} {{ {name} {{ bits: 0 }} }}
        /// Every flag set.
        pub const fn all() -> {name} {{ {name} {{ bits: {all:#x}_{repr} }} }}
        /// The raw bits.
        pub const fn bits(self) -> {repr} {{ self.bits }}
        /// From raw bits, refusing unknown ones.
        pub const fn from_bits(bits: {repr}) -> Option<{name}> {{ if bits & !({all:#x}_{repr}) == 0 {{ Some({name} {{ bits }}) }} else {{ None }} }}
        /// Whether every flag of `other` is set.
        pub const fn contains(self, other: {name}) -> bool {{ self.bits & other.bits == other.bits }}
    }}
    impl ::core::ops::BitOr for {name} {{ type Output = {name}; fn bitor(self, o: {name}) -> {name} {{ {name} {{ bits: self.bits | o.bits }} }} }}
"
        );
    }

    fn client(&mut self) {
        let plan = self.plan;
        let o = &mut String::new();
        let _ = write!(
            o,
            "    /// A binding to `{}`, held by this domain as client.
    pub struct Client {{ binding: ::lrpc_sdk::Binding }}
    impl Client {{
        /// Binds to the interface exported under its own name.
        pub fn bind() -> Result<Client, CallError> {{ Client::bind_named(INTERFACE) }}
        /// Binds to the interface exported under `name`.
        pub fn bind_named(name: &str) -> Result<Client, CallError> {{
            Ok(Client {{ binding: ::lrpc_sdk::Binding::bind(name, FINGERPRINT, PROCS)? }})
        }}
        /// The underlying binding.
        pub fn binding(&self) -> &::lrpc_sdk::Binding {{ &self.binding }}
        /// Unbinds, reporting the kernel's answer (dropping also unbinds).
        pub fn unbind(self) -> Result<(), CallError> {{ ::lrpc_sdk::unbind(self.binding) }}
",
            plan.name
        );
        // The asynchronous client's methods and the MultiRPC calls, collected beside the
        // synchronous ones.
        let mut asyncs = String::new();
        let mut multis = String::new();
        for (id, p) in plan.procs.iter().enumerate() {
            let special = |k: usize| Self::special(self.client, id, k);
            let mut params: Vec<String> = p
                .params
                .iter()
                .enumerate()
                .map(|(k, (n, t))| {
                    if special(k) {
                        format!("{}: &impl ::lrpc_sdk::rt::Marshal", snake(n))
                    } else {
                        format!("{}: {}", snake(n), self.client_param(t))
                    }
                })
                .collect();
            let into = Self::out_mode(self.client, id) == Some(OutMode::CallerAllocates);
            if into {
                params.push("out: &mut [u8]".into());
            }
            let ret = if into {
                "usize".into()
            } else {
                p.result.as_ref().map_or("()".into(), |t| self.decoded(t))
            };
            let refexpr = |n: &str, t: &Ty| {
                let n = snake(n);
                if self.codec(t, "").param.is_some() {
                    n
                } else {
                    format!("(&{n})")
                }
            };
            // Each parameter's size and encoding: its own marshaler's when `special`.
            let (sizes, encs): (Vec<String>, Vec<String>) = p
                .params
                .iter()
                .enumerate()
                .map(|(k, (n, t))| {
                    if special(k) {
                        let n = snake(n);
                        (format!("{n}.size()"), format!("{n}.encode(__w);"))
                    } else {
                        let c = self.codec(t, &refexpr(n, t));
                        (c.size, c.enc)
                    }
                })
                .unzip();
            let size = if p.bounded {
                "0".to_string()
            } else {
                let sum: String = sizes.iter().map(|s| format!(" + {s}")).collect();
                format!("0{sum}")
            };
            let enc = encs.join(" ");
            let dec = match &p.result {
                // The caller's buffer: validate, then copy into it.
                Some(t) if into => format!(
                    "{{ let __b = {}; let __b: &[u8] = __b.as_ref(); if __b.len() > out.len() {{ return Err(DecodeError) }} out[..__b.len()].copy_from_slice(__b); __b.len() }}",
                    self.codec(t, "").dec_view()
                ),
                Some(t) => self.decode_result(t),
                None => "()".into(),
            };
            let signature = format!("(&self, {}) -> Result<{ret}, CallError>", params.join(", "));
            let name = snake(&p.name);
            // A result that is one string or byte list is copied once, straight out of shared
            // memory (`rt::invoke_whole`); others are decoded from a private copy of the reply.
            let whole = !into
                && p.result
                    .as_ref()
                    .is_some_and(|t| *t == Ty::String || is_bytes(t));
            let (f, dec_arg) = if whole {
                ("invoke_whole", String::new())
            } else {
                ("invoke", format!(", |__r: &mut Reader<'_>| Ok({dec})"))
            };
            let invoke = format!(
                "            ::lrpc_sdk::rt::{f}(&self.binding, {id}, {}, {size}, {}, |__w: &mut Writer| {{ {enc} }}{dec_arg})",
                p.bounded,
                p.out_bound.unwrap_or(0)
            );
            if !into {
                let ret = p.result.as_ref().map_or("()".into(), |t| self.decoded(t));
                let method = snake(&p.name);
                let method = method.trim_start_matches("r#");
                let (bounded, out_bound) = (p.bounded, p.out_bound.unwrap_or(0));
                // The same encoding on a channel slot's A-stack; the decoder captures
                // nothing, so it travels in the future as a function pointer.
                let _ = writeln!(
                    asyncs,
                    "        /// Sends a call of `{}`; the future resolves to its reply.
        pub fn {method}_async(&self, {}) -> ::lrpc_sdk::chan::Reply<{ret}> {{
            self.channel.submit({id}, {bounded}, {size}, {out_bound}, |__w: &mut Writer| {{ {enc} }}, |__r: &mut Reader<'_>| Ok({dec}))
        }}",
                    p.name,
                    params.join(", "),
                );
                // One call to many bindings: the same encoding, laid on each member's
                // A-stack by the runtime; each reply decoded as a single call's.
                let mut mparams = vec!["__members: &[&Client]".to_string()];
                mparams.extend(params.iter().cloned());
                let _ = writeln!(
                    multis,
                    "        /// Calls `{}` on every client of `__members` at once (MultiRPC): the arguments are
        /// encoded once; `__handler` runs once per member's reply or failure, in arrival order,
        /// and ends the call early by returning `Break`; `__timeout_ms` bounds the whole call.
        pub fn multi_{method}({}, __timeout_ms: u32, __handler: impl FnMut(usize, Result<{ret}, CallError>) -> ::core::ops::ControlFlow<()>) -> Result<::lrpc_sdk::rt::MultiOutcome, CallError> {{
            let __bs: Vec<&::lrpc_sdk::Binding> = __members.iter().map(|__c| &__c.binding).collect();
            ::lrpc_sdk::rt::multi_invoke(&__bs, {id}, {bounded}, {size}, {out_bound}, __timeout_ms, |__w: &mut Writer| {{ {enc} }}, |__r: &mut Reader<'_>| Ok({dec}), __handler)
        }}",
                    p.name,
                    mparams.join(", "),
                );
            }
            let _ = writeln!(o, "        /// Calls `{}`.", p.name);
            let fast = p
                .register
                .as_ref()
                .filter(|_| !into && (0..p.params.len()).all(|k| !special(k)));
            let Some(f) = fast else {
                let _ = writeln!(o, "        pub fn {name}{signature} {{");
                let _ = writeln!(o, "{invoke}");
                let _ = writeln!(o, "        }}");
                continue;
            };
            // Direct-linked: call the server copy's register entry, no A-stack. The check is
            // inlined into the caller; the A-stack path stays out of line.
            let args: Vec<String> = p
                .params
                .iter()
                .map(|(n, t)| Self::to_word(t, &snake(n)))
                .collect();
            let call = format!("__f({})", args.join(", "));
            let fast_ret = match &p.result {
                Some(t) => Self::from_word(t, &format!("({call})")),
                None => call,
            };
            let slow = format!("__{}", name.trim_start_matches("r#"));
            let names: Vec<String> = p.params.iter().map(|(n, _)| snake(n)).collect();
            let _ = writeln!(o, "        #[inline]");
            let _ = writeln!(o, "        pub fn {name}{signature} {{");
            let _ = writeln!(
                o,
                "            if let Some(__f) = self.binding.fast({id}) {{\n                // SAFETY: the kernel put the server copy's register entry for this procedure at\n                // this index of the function table, after checking that its type is this one.\n                let __f = unsafe {{ ::lrpc_sdk::rt::table_fn::<{}>(__f) }};\n                return Ok({fast_ret});\n            }}",
                Self::register_fn_type(f)
            );
            let _ = writeln!(o, "            self.{slow}({})", names.join(", "));
            let _ = writeln!(o, "        }}");
            let _ = writeln!(o, "        #[inline(never)]");
            let _ = writeln!(o, "        fn {slow}{signature} {{");
            let _ = writeln!(o, "{invoke}");
            let _ = writeln!(o, "        }}");
        }
        o.push_str(&multis);
        let _ = writeln!(o, "    }}");
        let _ = write!(
            o,
            "    /// An asynchronous binding to `{}` (a URPC channel), held by this domain as client:
    /// each `*_async` method sends its request at once and returns the future of its reply;
    /// run the futures on `::lrpc_sdk::exec`.
    pub struct AsyncClient {{ channel: ::lrpc_sdk::chan::Channel }}
    impl AsyncClient {{
        /// Binds asynchronously to the interface exported under its own name (with the
        /// client presentation's `channel-slots`, or the kernel's default).
        pub fn bind() -> Result<AsyncClient, CallError> {{ AsyncClient::bind_with(INTERFACE, {slots}) }}
        /// Binds asynchronously to the interface exported under `name`, with `slots` calls in
        /// flight at most (0: the kernel's default).
        pub fn bind_with(name: &str, slots: u32) -> Result<AsyncClient, CallError> {{
            Ok(AsyncClient {{ channel: ::lrpc_sdk::chan::Channel::bind(name, FINGERPRINT, PROCS, slots)? }})
        }}
        /// The underlying channel.
        pub fn channel(&self) -> &::lrpc_sdk::chan::Channel {{ &self.channel }}
        /// Unbinds, reporting the kernel's answer (dropping also unbinds).
        pub fn unbind(self) -> Result<(), CallError> {{ self.channel.unbind() }}
{asyncs}    }}
",
            plan.name,
            slots = self.client.and_then(|c| c.channel_slots).unwrap_or(0)
        );
        self.out.push_str(o);
    }

    /// The register entry the server exports for procedure `id`: none when this side's
    /// presentation handles a parameter or the result specially.
    fn server_register<'p>(
        &self,
        id: usize,
        p: &'p ProcPlan,
    ) -> Option<&'p crate::plan::RegisterEntry> {
        let plain = (0..p.params.len()).all(|k| !Self::special(self.server, id, k))
            && matches!(
                Self::out_mode(self.server, id),
                None | Some(OutMode::CalleeAllocates)
            );
        p.register.as_ref().filter(|_| plain)
    }

    fn server(&mut self, module: &str) {
        let plan = self.plan;
        let o = &mut String::new();
        let _ = writeln!(
            o,
            "    /// The server side of `{}`. Handlers take `&self`: a handler may make calls that come back into this domain.",
            plan.name
        );
        let _ = writeln!(o, "    pub trait Server {{");
        for (id, p) in plan.procs.iter().enumerate() {
            let mut params: Vec<String> = p
                .params
                .iter()
                .enumerate()
                .map(|(k, (n, t))| {
                    if Self::special(self.server, id, k) {
                        format!("{}: ::lrpc_sdk::rt::Raw<'_>", snake(n))
                    } else {
                        format!("{}: {}", snake(n), self.server_param(t))
                    }
                })
                .collect();
            let ret = match (Self::out_mode(self.server, id), &p.result) {
                (Some(OutMode::CallerAllocates), Some(_)) => {
                    params.push("out: &mut ::lrpc_sdk::rt::OutBuf<'_>".into());
                    String::new()
                }
                (Some(OutMode::DeallocNever), Some(Ty::String)) => " -> &str".into(),
                (Some(OutMode::DeallocNever), Some(_)) => " -> &[u8]".into(),
                (_, r) => r
                    .as_ref()
                    .map_or(String::new(), |t| format!(" -> {}", self.owned(t))),
            };
            let params = params.join(", ");
            // Generic over what the handler is lent when its signature borrows.
            let generics = if (params.clone() + &ret).contains("'a") {
                "<'a>"
            } else {
                ""
            };
            let _ = writeln!(o, "        /// Handles `{}`.", p.name);
            let _ = writeln!(
                o,
                "        fn {}{generics}(&self, {params}){ret};",
                snake(&p.name),
            );
        }
        let _ = writeln!(o, "    }}");
        for (id, p) in plan.procs.iter().enumerate() {
            let out_mode = Self::out_mode(self.server, id);
            let f = snake(&p.name).trim_start_matches("r#").to_string();
            let _ = writeln!(o, "    #[doc(hidden)]");
            let _ = writeln!(
                o,
                "    pub fn __serve_{f}<S: Server>(__s: &S, __a: i32, __c: i32, __o: i32, __oc: i32, __b: i32) -> i32 {{"
            );
            // Parameters whose data a borrow spares a copy of: byte lists. A request holding a
            // string is never read in place whole (its UTF-8 is validated on a private copy),
            // but its borrowed byte lists are, beside a private copy of the rest.
            // Under borrowed types, byte lists inside other parameters are lent too: such a
            // request is never read in place whole either, so that only the byte-list
            // parameters the binding lets this side borrow are views of shared memory.
            let has_string = p
                .params
                .iter()
                .any(|(_, t)| self.plan.has_string(t) || (!is_bytes(t) && self.lends(t)));
            let in_mask: u32 = p
                .params
                .iter()
                .enumerate()
                .filter(|(_, (_, t))| is_bytes(t))
                .fold(0, |m, (i, _)| m | (1u32 << i.min(31)));
            let _ = writeln!(
                o,
                "        let __e = ::lrpc_sdk::rt::Entry {{ astack: __a, cap: __c, oob: __o, oob_cap: __oc, borrow: __b }};\n        let __shape = ::lrpc_sdk::rt::Shape {{ in_mask: {in_mask:#x}, strings: {has_string}, has_result: {}, bounded: {}, in_bound: {} }};\n        ::lrpc_sdk::rt::serve(__e, __shape, |__r: &mut Reader<'_>, __reply: &mut ::lrpc_sdk::rt::Reply| {{",
                p.result.is_some(),
                p.bounded,
                p.in_bound.unwrap_or(0)
            );
            for (k, (n, t)) in p.params.iter().enumerate() {
                if Self::special(self.server, id, k) {
                    // The programmer's own routine decodes it from its encoded bytes.
                    let _ = writeln!(
                        o,
                        "            let {} = ::lrpc_sdk::rt::Raw::new(__r.raw(|__r| {{ {} Ok(()) }})?);",
                        snake(n),
                        self.codec(t, "").skip
                    );
                    continue;
                }
                // Strings and byte lists reach the handler as views; a byte list in place
                // when the binding lets this side borrow it.
                let dec = if is_bytes(t) && k < 32 {
                    format!("__r.list_u8_arg({k})?")
                } else {
                    self.codec(t, "").dec_lent().to_string()
                };
                let _ = writeln!(o, "            let {} = {dec};", snake(n));
            }
            if !p.bounded {
                let _ = writeln!(o, "            __r.finish()?;");
            }
            let mut args: Vec<String> = p.params.iter().map(|(n, _)| snake(n)).collect();
            if out_mode == Some(OutMode::CallerAllocates) && p.result.is_some() {
                args.push("&mut __out".into());
                let _ = writeln!(
                    o,
                    "            let mut __out = ::lrpc_sdk::rt::OutBuf::new(__reply);"
                );
                let _ = writeln!(
                    o,
                    "            __s.{}({});\n            __out.finish()\n        }})\n    }}",
                    snake(&p.name),
                    args.join(", ")
                );
                continue;
            }
            let _ = writeln!(
                o,
                "            let __ret = __s.{}({});",
                snake(&p.name),
                args.join(", ")
            );
            match &p.result {
                Some(Ty::String) if out_mode == Some(OutMode::DeallocNever) => {
                    let _ = writeln!(
                        o,
                        "            __reply.put(4 + __ret.len(), |__w: &mut Writer| __w.str(__ret))"
                    );
                }
                Some(_) if out_mode == Some(OutMode::DeallocNever) => {
                    let _ = writeln!(
                        o,
                        "            __reply.put(4 + __ret.len(), |__w: &mut Writer| __w.list_u8(__ret))"
                    );
                }
                Some(t) => {
                    let size = if p.bounded {
                        "0".into()
                    } else {
                        self.codec(t, "(&__ret)").size
                    };
                    let _ = writeln!(
                        o,
                        "            __reply.put({size}, |__w: &mut Writer| {{ {} }})",
                        self.codec(t, "(&__ret)").enc
                    );
                }
                None => {
                    let _ = writeln!(o, "            let () = __ret;");
                    let _ = writeln!(o, "            __reply.put(0, |__w: &mut Writer| {{}})");
                }
            }
            let _ = writeln!(o, "        }})\n    }}");
        }
        // Register entries: a function of the module, and its export (inside the macro).
        let mut fast_exports = String::new();
        for (id, p) in plan.procs.iter().enumerate() {
            let Some(f) = self.server_register(id, p) else {
                continue;
            };
            let name = snake(&p.name).trim_start_matches("r#").to_string();
            let words: Vec<&str> = f.params.iter().map(|w| w.rust()).collect();
            let params = |prefix: &str| -> String {
                words
                    .iter()
                    .enumerate()
                    .map(|(k, w)| format!("{prefix}{k}: {w}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let args: Vec<String> = p
                .params
                .iter()
                .enumerate()
                .map(|(k, (_, t))| Self::from_word(t, &format!("__p{k}")))
                .collect();
            let call = format!("__s.{}({})", snake(&p.name), args.join(", "));
            let ret = f
                .result
                .map_or(String::new(), |w| format!(" -> {}", w.rust()));
            let body = match &p.result {
                Some(t) => Self::to_word(t, &format!("({call})")),
                None => call,
            };
            let _ = writeln!(o, "    #[doc(hidden)]");
            let _ = writeln!(
                o,
                "    pub fn __fast_{name}<S: Server>(__s: &S, {}){ret} {{ {body} }}",
                params("__p")
            );
            let pass: Vec<String> = (0..words.len()).map(|k| format!("p{k}")).collect();
            let _ = writeln!(
                fast_exports,
                "            #[unsafe(export_name = {:?})]",
                f.entry
            );
            let _ = writeln!(
                fast_exports,
                "            extern \"C\" fn __fast_{name}({}){ret} {{ __SERVER.with(|s| crate::{module}::__fast_{name}(s, {})) }}",
                params("p"),
                pass.join(", ")
            );
        }
        let mac = format!("__lrpc_export_{}", module.trim_start_matches("r#"));
        let _ = writeln!(o, "    #[doc(hidden)]");
        let _ = writeln!(o, "    macro_rules! {mac} {{");
        let _ = writeln!(o, "        ($t:ty) => {{ const _: () = {{");
        let _ = writeln!(
            o,
            "            ::std::thread_local! {{ static __SERVER: $t = <$t as ::core::default::Default>::default(); }}"
        );
        for p in &plan.procs {
            let f = snake(&p.name).trim_start_matches("r#").to_string();
            let _ = writeln!(o, "            #[unsafe(export_name = {:?})]", p.entry);
            let _ = writeln!(
                o,
                "            extern \"C\" fn __entry_{f}(a: i32, c: i32, o: i32, oc: i32, b: i32) -> i32 {{ __SERVER.with(|s| crate::{module}::__serve_{f}(s, a, c, o, oc, b)) }}"
            );
        }
        o.push_str(&fast_exports);
        let _ = writeln!(o, "        }}; }};");
        let _ = writeln!(o, "    }}");
        let _ = writeln!(
            o,
            "    /// Exports the entry stubs of this interface for a `Server + Default` type."
        );
        let _ = writeln!(o, "    pub(crate) use {mac} as export;");
        self.out.push_str(o);
    }
}
