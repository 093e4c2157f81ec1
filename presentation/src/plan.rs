//! Middle stage: an interface under a presentation becomes a plan — the types the stubs use,
//! and per procedure the facts the kernel's procedure descriptor list needs.
//!
//! **Encoding** (what the plan's bounds measure; the same in both directions): packed little
//! endian, no padding. `bool` is one byte, 0 or 1 (anything else is refused); integers take
//! their width; `f32`/`f64` 4/8 bytes; `char` a `u32` that must be a Unicode scalar value;
//! `string` a `u32` byte length then UTF-8 (validated); `list<T>` a `u32` element count then
//! the elements (`list<u8>` is a raw byte copy); records and tuples their fields in order;
//! an enum its discriminant — `u8` up to 256 cases, `u16` up to 65536, else `u32` — which
//! must be below the case count; a variant the same discriminant then the case's payload;
//! `option` a `u8` (0 none, 1 some) then the payload; `result` a `u8` (0 ok, 1 err) then the
//! payload; flags a `u8` up to 8 flags, a `u16` up to 16, else `u32` words, least significant
//! first (unknown bits are refused). Parameters are encoded one after another; the result is
//! the function's single result type.
//!
//! **Fingerprint.** Client stubs embed it and the kernel compares it with the server's at bind
//! time. It is `lrpc_abi::fnv1a64` of a canonical text of the interface:
//! `interface <name>;` then, per function in declaration order,
//! `<fn>(<param>:<type>,...)-><type or _>;`, where a type is written structurally — `u32`,
//! `string`, `list<T>`, `tuple<A,B>`, `option<T>`, `result<T|_,E|_>`,
//! `record{f:T,...}`, `enum{a,b}`, `flags{a,b}`, `variant{a(T),b}` — so that any change to a
//! name, a parameter, a field, a case or a type changes it, and aliases do not.

use crate::Error;
use lrpc_abi::{DEFAULT_ASTACK_COUNT, DEFAULT_VARIABLE_ASTACK_SIZE, MIN_ASTACK_SIZE};
use std::collections::HashMap;
use std::fmt::Write as _;
use wit_parser::{InterfaceId, Resolve, Type, TypeDefKind, TypeId};

/// Scalar types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prim {
    /// `bool`.
    Bool,
    /// `u8`.
    U8,
    /// `s8`.
    S8,
    /// `u16`.
    U16,
    /// `s16`.
    S16,
    /// `u32`.
    U32,
    /// `s32`.
    S32,
    /// `u64`.
    U64,
    /// `s64`.
    S64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `char`: a Unicode scalar value.
    Char,
}

impl Prim {
    /// Encoded size in bytes.
    pub fn size(self) -> usize {
        match self {
            Prim::Bool | Prim::U8 | Prim::S8 => 1,
            Prim::U16 | Prim::S16 => 2,
            Prim::U32 | Prim::S32 | Prim::F32 | Prim::Char => 4,
            Prim::U64 | Prim::S64 | Prim::F64 => 8,
        }
    }

    /// WIT name.
    pub fn wit(self) -> &'static str {
        match self {
            Prim::Bool => "bool",
            Prim::U8 => "u8",
            Prim::S8 => "s8",
            Prim::U16 => "u16",
            Prim::S16 => "s16",
            Prim::U32 => "u32",
            Prim::S32 => "s32",
            Prim::U64 => "u64",
            Prim::S64 => "s64",
            Prim::F32 => "f32",
            Prim::F64 => "f64",
            Prim::Char => "char",
        }
    }
}

/// A type as the stubs see it. Aliases are resolved away.
#[derive(Debug, Clone, PartialEq)]
pub enum Ty {
    /// A scalar.
    Prim(Prim),
    /// `string`.
    String,
    /// `list<T>`.
    List(Box<Ty>),
    /// `tuple<...>`.
    Tuple(Vec<Ty>),
    /// `option<T>`.
    Option(Box<Ty>),
    /// `result<T, E>` (either side may be absent).
    Result(Option<Box<Ty>>, Option<Box<Ty>>),
    /// A named type: index into [`InterfacePlan::defs`].
    Named(usize),
}

/// A named type definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Def {
    /// WIT name (kebab case).
    pub name: String,
    /// What it is.
    pub kind: DefKind,
}

/// The kinds of named types.
#[derive(Debug, Clone, PartialEq)]
pub enum DefKind {
    /// Fields in order.
    Record(Vec<(String, Ty)>),
    /// Cases in order.
    Enum(Vec<String>),
    /// Flags in order.
    Flags(Vec<String>),
    /// Cases in order, each with an optional payload.
    Variant(Vec<(String, Option<Ty>)>),
}

/// Per-side presentation of an interface: how this side wants to program against it. Only
/// the default presentation exists so far; annotations (copy or borrow of `in` data, who
/// allocates `out` data, trust, A-stack overrides) plug in here.
#[derive(Debug, Clone, Default)]
pub struct Presentation {
    /// A-stack count and size overrides per function (LRPC 5.2).
    pub astacks: HashMap<String, (Option<u32>, Option<u32>)>,
}

/// One procedure of the procedure descriptor list.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcPlan {
    /// WIT name, e.g. `big-in`.
    pub name: String,
    /// Export name of the server's entry stub.
    pub entry: String,
    /// Parameters, in order.
    pub params: Vec<(String, Ty)>,
    /// The result, if any.
    pub result: Option<Ty>,
    /// Largest encoded size of the parameters, when bounded.
    pub in_bound: Option<usize>,
    /// Largest encoded size of the result, when bounded.
    pub out_bound: Option<usize>,
    /// Both bounded: A-stacks carry no header.
    pub bounded: bool,
    /// Bytes per A-stack.
    pub astack_size: u32,
    /// A-stacks allocated at bind time.
    pub astack_count: u32,
    /// The register entry, when every parameter and the result are scalars.
    pub register: Option<RegisterEntry>,
}

/// A core value type of a register entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreType {
    /// `i32`: `bool`, 8-, 16- and 32-bit integers.
    I32,
    /// `i64`: 64-bit integers.
    I64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl CoreType {
    /// The core type of `p` in a register entry; `None` for `char` (a code point must be
    /// validated, which the A-stack path does).
    pub fn of(p: Prim) -> Option<CoreType> {
        Some(match p {
            Prim::Bool | Prim::U8 | Prim::S8 | Prim::U16 | Prim::S16 | Prim::U32 | Prim::S32 => {
                CoreType::I32
            }
            Prim::U64 | Prim::S64 => CoreType::I64,
            Prim::F32 => CoreType::F32,
            Prim::F64 => CoreType::F64,
            Prim::Char => return None,
        })
    }

    /// Its Rust type.
    pub fn rust(self) -> &'static str {
        match self {
            CoreType::I32 => "i32",
            CoreType::I64 => "i64",
            CoreType::F32 => "f32",
            CoreType::F64 => "f64",
        }
    }
}

/// A procedure's register entry (see `lrpc_abi::fast_entry_name`): parameters and result as
/// core values, for direct-linked bindings.
#[derive(Debug, Clone, PartialEq)]
pub struct RegisterEntry {
    /// Export name in the server module.
    pub entry: String,
    /// Core types of the parameters, in order.
    pub params: Vec<CoreType>,
    /// Core type of the result, if any.
    pub result: Option<CoreType>,
}

impl RegisterEntry {
    /// The register entry of a procedure with these parameters and result, if they are all
    /// scalars.
    pub fn of(
        interface: &str,
        function: &str,
        params: &[(String, Ty)],
        result: Option<&Ty>,
    ) -> Option<RegisterEntry> {
        let core = |t: &Ty| match t {
            Ty::Prim(p) => CoreType::of(*p),
            _ => None,
        };
        let params = params
            .iter()
            .map(|(_, t)| core(t))
            .collect::<Option<Vec<_>>>()?;
        let result = match result {
            Some(t) => Some(core(t)?),
            None => None,
        };
        let mut entry = String::new();
        lrpc_abi::fast_entry_name(interface, function, &mut entry).expect("writing to a String");
        Some(RegisterEntry {
            entry,
            params,
            result,
        })
    }
}

/// An interface ready for stub generation and binding.
#[derive(Debug, Clone, PartialEq)]
pub struct InterfacePlan {
    /// Full name, e.g. `lrpc:bench/bench`.
    pub name: String,
    /// Fingerprint of the canonical text (see the module docs).
    pub fingerprint: u64,
    /// The canonical text the fingerprint hashes.
    pub canonical: String,
    /// Named types used by the procedures.
    pub defs: Vec<Def>,
    /// Procedures, numbered in declaration order.
    pub procs: Vec<ProcPlan>,
}

/// Bytes of a discriminant for `cases` cases.
pub fn discriminant_size(cases: usize) -> usize {
    if cases <= 1 << 8 {
        1
    } else if cases <= 1 << 16 {
        2
    } else {
        4
    }
}

/// Most flags a flags type may have (four 32-bit words).
pub const MAX_FLAGS: usize = 128;

/// Bytes of a flags value with `n` flags (at most [`MAX_FLAGS`]): one byte up to 8, two up
/// to 16, else as many 32-bit words as needed.
pub fn flags_size(n: usize) -> usize {
    if n <= 8 {
        1
    } else if n <= 16 {
        2
    } else {
        4 * n.div_ceil(32)
    }
}

/// Converts WIT types to plan types, collecting named definitions once each.
struct Types<'a> {
    resolve: &'a Resolve,
    interface: &'a str,
    defs: Vec<Def>,
    seen: HashMap<TypeId, usize>,
}

impl Types<'_> {
    fn ty(&mut self, t: &Type, place: &str) -> Result<Ty, Error> {
        Ok(match t {
            Type::Bool => Ty::Prim(Prim::Bool),
            Type::U8 => Ty::Prim(Prim::U8),
            Type::S8 => Ty::Prim(Prim::S8),
            Type::U16 => Ty::Prim(Prim::U16),
            Type::S16 => Ty::Prim(Prim::S16),
            Type::U32 => Ty::Prim(Prim::U32),
            Type::S32 => Ty::Prim(Prim::S32),
            Type::U64 => Ty::Prim(Prim::U64),
            Type::S64 => Ty::Prim(Prim::S64),
            Type::F32 => Ty::Prim(Prim::F32),
            Type::F64 => Ty::Prim(Prim::F64),
            Type::Char => Ty::Prim(Prim::Char),
            Type::String => Ty::String,
            Type::ErrorContext => return Err(self.unsupported(place, "error-context")),
            Type::Id(id) => self.id(*id, place)?,
        })
    }

    fn unsupported(&self, place: &str, what: &str) -> Error {
        Error::Unsupported {
            interface: self.interface.to_string(),
            place: place.to_string(),
            reason: format!("{what} can not cross a protection domain by value"),
        }
    }

    fn opt(&mut self, t: &Option<Type>, place: &str) -> Result<Option<Box<Ty>>, Error> {
        t.as_ref()
            .map(|t| self.ty(t, place).map(Box::new))
            .transpose()
    }

    fn id(&mut self, id: TypeId, place: &str) -> Result<Ty, Error> {
        if let Some(&i) = self.seen.get(&id) {
            return Ok(Ty::Named(i));
        }
        let def = &self.resolve.types[id];
        let named = |kind: DefKind| (def.name.clone().unwrap_or_else(|| "anon".into()), kind);
        let (name, kind) = match &def.kind {
            TypeDefKind::Type(t) => return self.ty(t, place),
            TypeDefKind::List(t) => return Ok(Ty::List(Box::new(self.ty(t, place)?))),
            TypeDefKind::Option(t) => return Ok(Ty::Option(Box::new(self.ty(t, place)?))),
            TypeDefKind::Result(r) => {
                return Ok(Ty::Result(
                    self.opt(&r.ok, place)?,
                    self.opt(&r.err, place)?,
                ));
            }
            TypeDefKind::Tuple(t) => {
                let ts = t
                    .types
                    .iter()
                    .map(|t| self.ty(t, place))
                    .collect::<Result<_, _>>()?;
                return Ok(Ty::Tuple(ts));
            }
            TypeDefKind::Record(r) => {
                let mut fs = Vec::with_capacity(r.fields.len());
                for f in &r.fields {
                    fs.push((f.name.clone(), self.ty(&f.ty, place)?));
                }
                named(DefKind::Record(fs))
            }
            TypeDefKind::Enum(e) => named(DefKind::Enum(
                e.cases.iter().map(|c| c.name.clone()).collect(),
            )),
            TypeDefKind::Flags(f) => {
                if f.flags.len() > MAX_FLAGS {
                    return Err(self.unsupported(
                        place,
                        &format!("a flags type with more than {MAX_FLAGS} flags"),
                    ));
                }
                named(DefKind::Flags(
                    f.flags.iter().map(|c| c.name.clone()).collect(),
                ))
            }
            TypeDefKind::Variant(v) => {
                let mut cs = Vec::with_capacity(v.cases.len());
                for c in &v.cases {
                    let t = c.ty.as_ref().map(|t| self.ty(t, place)).transpose()?;
                    cs.push((c.name.clone(), t));
                }
                named(DefKind::Variant(cs))
            }
            TypeDefKind::Resource | TypeDefKind::Handle(_) => {
                return Err(self.unsupported(place, "a resource or handle"));
            }
            TypeDefKind::Future(_) => return Err(self.unsupported(place, "a future")),
            TypeDefKind::Stream(_) => return Err(self.unsupported(place, "a stream")),
            TypeDefKind::Map(..) => return Err(self.unsupported(place, "a map")),
            TypeDefKind::FixedLengthList(..) => {
                return Err(self.unsupported(place, "a fixed-length list"));
            }
            TypeDefKind::Unknown => return Err(self.unsupported(place, "an unresolved type")),
        };
        let i = self.defs.len();
        self.seen.insert(id, i);
        if let Some(prev) = self.defs.iter().find(|d| d.name == name) {
            return Err(Error::Unsupported {
                interface: self.interface.to_string(),
                place: place.to_string(),
                reason: format!("two different types are named `{}`", prev.name),
            });
        }
        self.defs.push(Def { name, kind });
        Ok(Ty::Named(i))
    }
}

/// Builds the plan of interface `id`.
pub(crate) fn plan_interface(
    resolve: &Resolve,
    id: InterfaceId,
    name: &str,
    presentation: &Presentation,
) -> Result<InterfacePlan, Error> {
    let iface = &resolve.interfaces[id];
    let mut types = Types {
        resolve,
        interface: name,
        defs: Vec::new(),
        seen: HashMap::new(),
    };
    let mut procs = Vec::with_capacity(iface.functions.len());
    for (fname, f) in &iface.functions {
        if !matches!(f.kind, wit_parser::FunctionKind::Freestanding) {
            return Err(Error::Unsupported {
                interface: name.to_string(),
                place: format!("function `{fname}`"),
                reason: "only freestanding functions are supported (no resource methods or async)"
                    .into(),
            });
        }
        let mut params = Vec::with_capacity(f.params.len());
        for p in &f.params {
            let place = format!("function `{fname}`, parameter `{}`", p.name);
            params.push((p.name.clone(), types.ty(&p.ty, &place)?));
        }
        let result = f
            .result
            .as_ref()
            .map(|t| types.ty(t, &format!("function `{fname}`, result")))
            .transpose()?;
        let mut entry = String::new();
        lrpc_abi::entry_name(name, fname, &mut entry).expect("writing to a String");
        let register = RegisterEntry::of(name, fname, &params, result.as_ref());
        procs.push(ProcPlan {
            name: fname.clone(),
            entry,
            params,
            result,
            in_bound: None,
            out_bound: None,
            bounded: false,
            astack_size: 0,
            astack_count: DEFAULT_ASTACK_COUNT,
            register,
        });
    }
    let mut plan = InterfacePlan {
        name: name.to_string(),
        fingerprint: 0,
        canonical: String::new(),
        defs: types.defs,
        procs,
    };
    for i in 0..plan.procs.len() {
        let p = &plan.procs[i];
        let in_bound = p
            .params
            .iter()
            .map(|(_, t)| plan.bound(t))
            .sum::<Option<usize>>();
        let out_bound = p.result.as_ref().map_or(Some(0), |t| plan.bound(t));
        let bounded = in_bound.is_some() && out_bound.is_some();
        let size = match (in_bound, out_bound) {
            (Some(i), Some(o)) => {
                let need = i.max(o).max(MIN_ASTACK_SIZE as usize).next_multiple_of(8);
                u32::try_from(need).map_err(|_| Error::Unsupported {
                    interface: name.to_string(),
                    place: format!("function `{}`", p.name),
                    reason: "arguments larger than 4 GiB".into(),
                })?
            }
            _ => DEFAULT_VARIABLE_ASTACK_SIZE,
        };
        // An override may enlarge a bounded procedure's A-stacks, or resize an unbounded
        // one's (the header must still fit).
        let (count, size) = match presentation.astacks.get(&p.name) {
            Some(&(c, s)) => (
                c.unwrap_or(DEFAULT_ASTACK_COUNT).max(1),
                s.map_or(size, |s| {
                    if bounded {
                        s.max(size)
                    } else {
                        s.max(lrpc_abi::header::LEN as u32 + 8)
                    }
                }),
            ),
            None => (DEFAULT_ASTACK_COUNT, size),
        };
        let p = &mut plan.procs[i];
        p.in_bound = in_bound;
        p.out_bound = out_bound;
        p.bounded = bounded;
        p.astack_size = size;
        p.astack_count = count;
    }
    plan.canonical = canonical(&plan);
    plan.fingerprint = lrpc_abi::fnv1a64(plan.canonical.as_bytes());
    Ok(plan)
}

fn canonical(plan: &InterfacePlan) -> String {
    let mut s = format!("interface {};", plan.name);
    for p in &plan.procs {
        let _ = write!(s, "{}(", p.name);
        for (i, (n, t)) in p.params.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            let _ = write!(s, "{n}:");
            write_ty(plan, t, &mut s);
        }
        s.push_str(")->");
        match &p.result {
            Some(t) => write_ty(plan, t, &mut s),
            None => s.push('_'),
        }
        s.push(';');
    }
    s
}

fn write_ty(plan: &InterfacePlan, t: &Ty, s: &mut String) {
    let opt = |t: &Option<Box<Ty>>, s: &mut String| match t {
        Some(t) => write_ty(plan, t, s),
        None => s.push('_'),
    };
    match t {
        Ty::Prim(p) => s.push_str(p.wit()),
        Ty::String => s.push_str("string"),
        Ty::List(t) => {
            s.push_str("list<");
            write_ty(plan, t, s);
            s.push('>');
        }
        Ty::Tuple(ts) => {
            s.push_str("tuple<");
            for (i, t) in ts.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                write_ty(plan, t, s);
            }
            s.push('>');
        }
        Ty::Option(t) => {
            s.push_str("option<");
            write_ty(plan, t, s);
            s.push('>');
        }
        Ty::Result(ok, err) => {
            s.push_str("result<");
            opt(ok, s);
            s.push(',');
            opt(err, s);
            s.push('>');
        }
        Ty::Named(i) => {
            let list = |kw: &str, names: &mut dyn Iterator<Item = &String>, s: &mut String| {
                let _ = write!(s, "{kw}{{");
                for (i, n) in names.enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    s.push_str(n);
                }
                s.push('}');
            };
            match &plan.defs[*i].kind {
                DefKind::Record(fs) => {
                    s.push_str("record{");
                    for (i, (n, t)) in fs.iter().enumerate() {
                        if i > 0 {
                            s.push(',');
                        }
                        let _ = write!(s, "{n}:");
                        write_ty(plan, t, s);
                    }
                    s.push('}');
                }
                DefKind::Enum(cs) => list("enum", &mut cs.iter(), s),
                DefKind::Flags(fs) => list("flags", &mut fs.iter(), s),
                DefKind::Variant(cs) => {
                    s.push_str("variant{");
                    for (i, (n, t)) in cs.iter().enumerate() {
                        if i > 0 {
                            s.push(',');
                        }
                        s.push_str(n);
                        if let Some(t) = t {
                            s.push('(');
                            write_ty(plan, t, s);
                            s.push(')');
                        }
                    }
                    s.push('}');
                }
            }
        }
    }
}
