//! WIT → plan → stubs: arbitrary WIT text, and a generator of valid interfaces that use
//! every type the stub compiler supports.

use arbitrary::{Arbitrary, Result as AResult, Unstructured};
use lrpc_presentation::{Error, Side, SidePresentation, Wit, combine, generate_rust};
use std::fmt::Write as _;

/// Runs one fuzzer input: a first byte of 0 means the rest is WIT text (the seed corpus
/// holds the project's WIT files this way); anything else builds an interface of supported
/// types with [`GenInterface`], which the stub compiler must accept. Every interface goes
/// through `interface()`, `combine` with the default presentations, and the Rust back end.
/// Panics only on a broken promise (a generated interface refused, a plan inconsistent
/// with itself).
pub fn run(data: &[u8]) {
    match data.split_first() {
        Some((0, text)) => {
            let _ = plan_all(&[("fuzz.wit", &String::from_utf8_lossy(text))]);
        }
        Some((_, rest)) => {
            let Ok(g) = GenInterface::arbitrary_take_rest(Unstructured::new(rest)) else {
                return;
            };
            let text = g.render();
            match plan_all(&[("gen.wit", &text)]) {
                Ok(n) => assert_eq!(n, 1, "one interface expected in\n{text}"),
                Err(e) => panic!("a valid interface was refused: {e}\n{text}"),
            }
        }
        None => {}
    }
}

/// Loads the sources and runs every interface through the pipeline. Returns the number of
/// interfaces planned.
pub fn plan_all(sources: &[(&str, &str)]) -> Result<usize, Error> {
    let wit = Wit::load_sources(sources)?;
    let names = wit.interface_names();
    for name in &names {
        let plan = wit.interface(name)?;
        check_plan(&plan);
        let client = SidePresentation::default_for(name, Side::Client);
        let server = SidePresentation::default_for(name, Side::Server);
        let comb = combine(&plan, &client, &server).expect("default presentations combine");
        assert_eq!(comb.procs.len(), plan.procs.len());
        let code = generate_rust(&plan);
        assert!(code.contains(&plan.name), "stubs name their interface");
    }
    Ok(names.len())
}

/// Facts every plan must satisfy, whatever its WIT.
pub fn check_plan(plan: &lrpc_presentation::InterfacePlan) {
    assert_eq!(
        plan.fingerprint,
        lrpc_abi::fnv1a64(plan.canonical.as_bytes()),
        "fingerprint of the canonical text"
    );
    for p in &plan.procs {
        assert!(p.astack_size >= lrpc_abi::MIN_ASTACK_SIZE, "{p:?}");
        assert!(p.astack_count >= 1, "{p:?}");
        assert_eq!(p.bounded, p.in_bound.is_some() && p.out_bound.is_some());
        // A bounded procedure carries no header and has no out-of-band segment: its
        // arguments and results must fit its A-stack. (Unbounded ones may spill out of band.)
        if let (true, Some(i), Some(o)) = (p.bounded, p.in_bound, p.out_bound) {
            assert!(i.max(o) <= p.astack_size as usize, "bounds fit: {p:?}");
        }
    }
}

const WORDS: &[&str] = &[
    "alpha",
    "beta",
    "gamma",
    "delta",
    "type",
    "move",
    "self",
    "loop",
    "list",
    "string",
    "result",
    "option",
    "record",
    "enum",
    "flags",
    "variant",
    "use",
    "func",
    "interface",
    "world",
    "a-b",
];

/// A kebab-case identifier (escaped with `%` when it is a keyword), unique by its index.
fn ident(prefix: &str, word: u8, i: usize) -> String {
    let w = WORDS[usize::from(word) % WORDS.len()];
    if i == 0 && prefix.is_empty() {
        format!("%{w}")
    } else {
        format!("{prefix}{w}{i}")
    }
}

/// A type expression over the scalars, `string`, the built-in generics and the named types
/// defined so far.
#[derive(Debug, Clone)]
pub enum GenTy {
    /// `bool`, `u8`, …, `char`, `string` by index.
    Prim(u8),
    /// `list<T>`.
    List(Box<GenTy>),
    /// `option<T>`.
    Option(Box<GenTy>),
    /// `result<T, E>`, either side optional.
    Result(Option<Box<GenTy>>, Option<Box<GenTy>>),
    /// `tuple<…>`.
    Tuple(Vec<GenTy>),
    /// A named type, by index modulo the types defined before this use.
    Named(u8),
}

const PRIMS: &[&str] = &[
    "bool", "u8", "s8", "u16", "s16", "u32", "s32", "u64", "s64", "f32", "f64", "char", "string",
];

impl GenTy {
    fn generate(u: &mut Unstructured<'_>, depth: u32) -> AResult<GenTy> {
        let pick = if depth >= 3 {
            0
        } else {
            u.int_in_range(0..=5)?
        };
        Ok(match pick {
            0 => GenTy::Prim(u.arbitrary()?),
            1 => GenTy::List(Box::new(GenTy::generate(u, depth + 1)?)),
            2 => GenTy::Option(Box::new(GenTy::generate(u, depth + 1)?)),
            3 => {
                let ok = if u.arbitrary()? {
                    Some(Box::new(GenTy::generate(u, depth + 1)?))
                } else {
                    None
                };
                let err = if u.arbitrary()? {
                    Some(Box::new(GenTy::generate(u, depth + 1)?))
                } else {
                    None
                };
                GenTy::Result(ok, err)
            }
            4 => {
                let n = u.int_in_range(1..=4)?;
                GenTy::Tuple(
                    (0..n)
                        .map(|_| GenTy::generate(u, depth + 1))
                        .collect::<AResult<_>>()?,
                )
            }
            _ => GenTy::Named(u.arbitrary()?),
        })
    }

    fn render(&self, defined: &[String], out: &mut String) {
        match self {
            GenTy::Prim(p) => out.push_str(PRIMS[usize::from(*p) % PRIMS.len()]),
            GenTy::Named(i) if !defined.is_empty() => {
                out.push_str(&defined[usize::from(*i) % defined.len()])
            }
            GenTy::Named(_) => out.push_str("u32"),
            GenTy::List(t) => {
                out.push_str("list<");
                t.render(defined, out);
                out.push('>');
            }
            GenTy::Option(t) => {
                out.push_str("option<");
                t.render(defined, out);
                out.push('>');
            }
            GenTy::Result(ok, err) => {
                out.push_str("result");
                match (ok, err) {
                    (None, None) => {}
                    (Some(t), None) => {
                        out.push('<');
                        t.render(defined, out);
                        out.push('>');
                    }
                    (ok, Some(e)) => {
                        out.push('<');
                        match ok {
                            Some(t) => t.render(defined, out),
                            None => out.push('_'),
                        }
                        out.push_str(", ");
                        e.render(defined, out);
                        out.push('>');
                    }
                }
            }
            GenTy::Tuple(ts) => {
                out.push_str("tuple<");
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    t.render(defined, out);
                }
                out.push('>');
            }
        }
    }
}

impl<'a> Arbitrary<'a> for GenTy {
    fn arbitrary(u: &mut Unstructured<'a>) -> AResult<Self> {
        GenTy::generate(u, 0)
    }
}

/// A named type definition.
#[derive(Debug, Arbitrary)]
pub enum GenDef {
    /// `record` with these field types.
    Record(Vec<GenTy>),
    /// `enum` with this many cases (1 + n).
    Enum(u16),
    /// `flags` with this many flags (1 + n % 128).
    Flags(u8),
    /// `variant` with these cases (payload or none).
    Variant(Vec<Option<GenTy>>),
    /// `type x = T`.
    Alias(GenTy),
}

/// A function.
#[derive(Debug, Arbitrary)]
pub struct GenFunc {
    word: u8,
    params: Vec<GenTy>,
    result: Option<GenTy>,
}

/// An interface: named types, then functions.
#[derive(Debug, Arbitrary)]
pub struct GenInterface {
    words: Vec<u8>,
    defs: Vec<GenDef>,
    funcs: Vec<GenFunc>,
}

impl GenInterface {
    /// The WIT text: one package `fuzz:gen` with one interface `api`.
    pub fn render(&self) -> String {
        let mut o = String::from("package fuzz:gen;\n\ninterface api {\n");
        let word = |i: usize| self.words.get(i).copied().unwrap_or(i as u8);
        let mut defined: Vec<String> = Vec::new();
        for (i, d) in self.defs.iter().take(24).enumerate() {
            let name = ident("t-", word(i), i);
            match d {
                GenDef::Record(fs) => {
                    let _ = write!(o, "    record {name} {{ ");
                    if fs.is_empty() {
                        o.push_str("x0: u8, ");
                    }
                    for (k, f) in fs.iter().take(12).enumerate() {
                        let _ = write!(o, "{}: ", ident("", word(k + 1), k));
                        f.render(&defined, &mut o);
                        o.push_str(", ");
                    }
                    o.push_str("}\n");
                }
                GenDef::Enum(n) => {
                    let n = 1 + usize::from(*n % 300);
                    let _ = write!(o, "    enum {name} {{ ");
                    for k in 0..n {
                        let _ = write!(o, "{}, ", ident("c", word(k), k));
                    }
                    o.push_str("}\n");
                }
                GenDef::Flags(n) => {
                    let n = 1 + usize::from(*n % 128);
                    let _ = write!(o, "    flags {name} {{ ");
                    for k in 0..n {
                        let _ = write!(o, "{}, ", ident("f", word(k), k));
                    }
                    o.push_str("}\n");
                }
                GenDef::Variant(cs) => {
                    let _ = write!(o, "    variant {name} {{ ");
                    if cs.is_empty() {
                        o.push_str("none0, ");
                    }
                    for (k, c) in cs.iter().take(12).enumerate() {
                        o.push_str(&ident("v", word(k), k));
                        if let Some(t) = c {
                            o.push('(');
                            t.render(&defined, &mut o);
                            o.push(')');
                        }
                        o.push_str(", ");
                    }
                    o.push_str("}\n");
                }
                GenDef::Alias(t) => {
                    let _ = write!(o, "    type {name} = ");
                    t.render(&defined, &mut o);
                    o.push_str(";\n");
                }
            }
            defined.push(name);
        }
        for (i, f) in self.funcs.iter().take(16).enumerate() {
            let _ = write!(o, "    {}: func(", ident("", f.word, i));
            for (k, p) in f.params.iter().take(12).enumerate() {
                if k > 0 {
                    o.push_str(", ");
                }
                let _ = write!(o, "{}: ", ident("", word(k + 3), k));
                p.render(&defined, &mut o);
            }
            o.push(')');
            if let Some(r) = &f.result {
                o.push_str(" -> ");
                r.render(&defined, &mut o);
            }
            o.push_str(";\n");
        }
        o.push_str("}\n");
        o
    }
}
