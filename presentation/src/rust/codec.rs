//! The wire code of every WIT type, one place per type: [`Codec`] holds everything the stubs
//! need to carry a value of one type — its Rust types, how to encode it, measure it, decode it
//! and step over it — and [`Gen::node_codec`] writes all of it in one arm per node of the
//! layout ([`crate::layout::Node`]; named types are written once, as functions
//! [`Gen::def_codec`] gives the bodies of). Adding a type is adding a node there.
//!
//! Generated code uses writer `__w`, reader `__r` (`Reader`), and returns `DecodeError` from
//! decoding; the layout is the one the plan's module docs describe.

use super::Gen;
use super::names::{camel, def_fn};
use crate::layout::{Cases, Layout, Node, byte_element};
use crate::plan::{Prim, Ty, flags_size};

/// The code the stubs need for values of one type.
#[derive(Debug, Clone)]
pub(crate) struct Codec {
    /// The owned Rust type.
    pub ty: String,
    /// The type a client passes an `in` parameter as, when it passes it by reference
    /// (`&str`, `&[T]`, `&Record`); `None` when by value, as [`Codec::ty`].
    pub param: Option<String>,
    /// Statements encoding the value (an expression of type `&T`) with `__w`.
    pub enc: String,
    /// An expression of the value's encoded size.
    pub size: String,
    /// An expression decoding an owned `T` from `__r`.
    pub dec: String,
    /// An expression decoding a `T` whose strings and byte lists are lent from the reader's
    /// bytes (`Cow::Borrowed`); the same as [`Codec::dec`] when the types are owned.
    pub lend: String,
    /// For `string` and `list<u8>`: a view of the value into the reader's bytes.
    pub view: Option<View>,
    /// Statements stepping `__r` over one encoded `T`, checking only its framing.
    pub skip: String,
}

/// A borrowed form of a value, decoded without a copy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct View {
    /// Its Rust type (`&str`, `&[u8]`).
    pub ty: &'static str,
    /// An expression decoding it from `__r`.
    pub dec: &'static str,
}

impl Codec {
    /// The decoding expression, as a view into the reader's bytes where the type has one.
    pub fn dec_view(&self) -> &str {
        match self.view {
            Some(v) => v.dec,
            None => &self.dec,
        }
    }

    /// How a server's stub decodes a parameter of this type: a view where the type has one,
    /// lent from the reader's bytes otherwise (a copy when the types are owned).
    pub fn dec_lent(&self) -> &str {
        match self.view {
            Some(v) => v.dec,
            None => &self.lend,
        }
    }
}

/// One case of a tagged type (option, result, enum, variant).
struct Case {
    /// The pattern matching it in a `&T`; binds `__x` to the payload.
    pat: String,
    /// The value built from a decoded payload (`Some`, applied to it), or the whole value
    /// when there is no payload (`None`).
    value: String,
    /// The payload's code, for the value `__x`.
    payload: Option<Codec>,
}

impl Case {
    /// A case written `{path}(payload)` or `{path}` in both patterns and values.
    fn named(path: String, payload: Option<Codec>) -> Case {
        let pat = match payload {
            Some(_) => format!("{path}(__x)"),
            None => path.clone(),
        };
        Case {
            pat,
            value: path,
            payload,
        }
    }

    /// A case of `Result`, whose sides without payload hold `()`.
    fn result(ctor: &str, payload: Option<Codec>) -> Case {
        match payload {
            Some(_) => Case::named(ctor.into(), payload),
            None => Case {
                pat: format!("{ctor}(_)"),
                value: format!("{ctor}(())"),
                payload,
            },
        }
    }

    /// The Rust type of the payload, `()` without one.
    fn ty(&self) -> &str {
        self.payload.as_ref().map_or("()", |x| &x.ty)
    }
}

/// The writer method of a scalar and the cast into its argument: signed integers are written
/// as their unsigned counterparts. (Its reader method is named as in WIT: `__r.s8()`.)
fn prim_writer(p: Prim) -> (String, String) {
    let wit = p.wit();
    match p {
        Prim::S8 | Prim::S16 | Prim::S32 | Prim::S64 => {
            let unsigned = wit.replacen('s', "u", 1);
            let cast = format!(" as {unsigned}");
            (unsigned, cast)
        }
        _ => (wit.into(), String::new()),
    }
}

/// The Rust type of a scalar.
pub(crate) fn prim_rust(p: Prim) -> &'static str {
    match p {
        Prim::S8 => "i8",
        Prim::S16 => "i16",
        Prim::S32 => "i32",
        Prim::S64 => "i64",
        p => p.wit(),
    }
}

/// The integer a flags value with `n` flags is held in, and how many bytes encode it.
pub(crate) fn flags_repr(n: usize) -> (String, usize) {
    // Up to 64 flags in the integer of the encoding's width; more in a `u128` of which the
    // encoding holds the low `size` bytes (its 32-bit words).
    match flags_size(n) {
        size @ (1 | 2 | 4 | 8) => (format!("u{}", size * 8), size),
        size => ("u128".into(), size),
    }
}

/// The code of a byte sequence (`string`, `list<u8>`) for the value `e`: a length, then the
/// bytes, written with writer method `write`; decoded as `view`, copied when owned.
fn bytes(e: &str, ty: &str, write: &str, view: View) -> Codec {
    let dec = format!("::lrpc_sdk::rt::Owned::owned({})", view.dec);
    Codec {
        ty: ty.into(),
        param: Some(view.ty.into()),
        enc: format!("__w.{write}({e});"),
        size: format!("(4 + {e}.len())"),
        lend: dec.clone(),
        dec,
        view: Some(view),
        skip: "__r.list_u8()?;".into(),
    }
}

/// [`bytes`] under borrowed types: a `Cow` of `unsized_ty` (`str`, `[u8]`), lent from the
/// reader's bytes or owned.
fn cow_bytes(e: &str, unsized_ty: &str, write: &str, view: View) -> Codec {
    let cow = "::std::borrow::Cow";
    Codec {
        ty: format!("{cow}<'a, {unsized_ty}>"),
        param: Some(view.ty.into()),
        enc: format!("__w.{write}({e});"),
        size: format!("(4 + {e}.len())"),
        dec: format!("{cow}::Owned(::lrpc_sdk::rt::Owned::owned({}))", view.dec),
        lend: format!("{cow}::Borrowed({})", view.dec),
        view: Some(view),
        skip: "__r.list_u8()?;".into(),
    }
}

/// Decoding a list of `min`-byte-or-larger elements, each decoded by `el`.
fn list_dec(min: usize, el: &str) -> String {
    format!(
        "{{ let __n = __r.count({min})?; let mut __v = Vec::with_capacity(__n); for _ in 0..__n {{ __v.push({el}); }} __v }}"
    )
}

/// One piece of each of `xs`.
fn each(xs: &[Codec], piece: fn(&Codec) -> &String) -> Vec<String> {
    xs.iter().map(piece).cloned().collect()
}

/// `(parts)`, with the trailing comma a one-element tuple needs.
pub(crate) fn tuple_of(parts: &[String]) -> String {
    let comma = if parts.len() == 1 { "," } else { "" };
    format!("({}{comma})", parts.join(", "))
}

impl Gen<'_> {
    /// The layout node of `t`: the plan defines every type it names.
    fn node<'t>(&'t self, t: &'t Ty) -> Node<'t> {
        Layout::new(self.plan)
            .node(t)
            .expect("the plan defines the types it names")
    }

    /// The code of type `t` for the value `e` (an expression of type `&T`).
    pub(crate) fn codec(&self, t: &Ty, e: &str) -> Codec {
        let mut c = match t {
            Ty::Named(i) => {
                let d = self.def(*i);
                let f = def_fn(&d.name);
                let ty = self.def_type(*i);
                let by_ref = matches!(
                    self.node(t),
                    Node::Record(_) | Node::Cases(Cases::Variant(_))
                );
                let lend = if self.lends(t) { "lend" } else { "dec" };
                Codec {
                    param: by_ref.then(|| format!("&{ty}")),
                    ty,
                    enc: format!("__enc_{f}(__w, {e});"),
                    size: format!("__size_{f}({e})"),
                    dec: format!("__dec_{f}(__r)?"),
                    lend: format!("__{lend}_{f}(__r)?"),
                    view: None,
                    skip: format!("__skip_{f}(__r)?;"),
                }
            }
            _ => self.node_codec(self.node(t), e, ""),
        };
        self.fixed_size(t, &mut c);
        c
    }

    /// The code of layout node `n` for the value `e`; `name` is the Rust type of a record,
    /// enum, variant or flags node (whose decoding expressions are bare values, but for
    /// flags a `Result`).
    fn node_codec(&self, n: Node<'_>, e: &str, name: &str) -> Codec {
        match n {
            Node::Prim(p) => {
                let (w, cast) = prim_writer(p);
                Codec {
                    ty: prim_rust(p).into(),
                    param: None,
                    enc: format!("__w.{w}(*{e}{cast});"),
                    size: p.size().to_string(),
                    dec: format!("__r.{}()?", p.wit()),
                    lend: format!("__r.{}()?", p.wit()),
                    view: None,
                    skip: format!("__r.take({})?;", p.size()),
                }
            }
            Node::String => self.bytes(e, ["str", "String"], "str", "&str", "__r.str()?"),
            Node::List(el) if byte_element(el) => {
                self.bytes(e, ["[u8]", "Vec<u8>"], "list_u8", "&[u8]", "__r.list_u8()?")
            }
            Node::List(el) => {
                let x = self.codec(el, "__x");
                let min = self.plan.min_size(el);
                let size = match self.plan.bound(el) {
                    Some(b) if b == min => format!("(4 + {e}.len() * {b})"),
                    _ => format!("(4 + {e}.iter().map(|__x| {}).sum::<usize>())", x.size),
                };
                Codec {
                    param: Some(format!("&[{}]", x.ty)),
                    ty: format!("Vec<{}>", x.ty),
                    enc: format!(
                        "{{ __w.len_prefix({e}.len()); for __x in {e}.iter() {{ {} }} }}",
                        x.enc
                    ),
                    size,
                    dec: list_dec(min, &x.dec),
                    lend: list_dec(min, &x.lend),
                    view: None,
                    skip: format!(
                        "{{ let __n = __r.count({min})?; for _ in 0..__n {{ {} }} }}",
                        x.skip
                    ),
                }
            }
            Node::Tuple(ts) => {
                let xs: Vec<Codec> = ts
                    .iter()
                    .enumerate()
                    .map(|(i, t)| self.codec(t, &format!("(&__t.{i})")))
                    .collect();
                Codec {
                    ty: tuple_of(&each(&xs, |x| &x.ty)),
                    param: None,
                    enc: format!("{{ let __t = {e}; {} }}", each(&xs, |x| &x.enc).join(" ")),
                    size: format!(
                        "{{ let __t = {e}; {} }}",
                        each(&xs, |x| &x.size).join(" + ")
                    ),
                    dec: tuple_of(&each(&xs, |x| &x.dec)),
                    lend: tuple_of(&each(&xs, |x| &x.lend)),
                    view: None,
                    skip: each(&xs, |x| &x.skip).join(" "),
                }
            }
            Node::Record(fs) => {
                let names: Vec<String> = fs.iter().map(|(f, _)| super::names::snake(f)).collect();
                let xs: Vec<Codec> = fs
                    .iter()
                    .zip(&names)
                    .map(|((_, t), f)| self.codec(t, &format!("(&{e}.{f})")))
                    .collect();
                let fields = |dec: fn(&Codec) -> &String| -> String {
                    names
                        .iter()
                        .zip(each(&xs, dec))
                        .map(|(f, dec)| format!("{f}: {dec}, "))
                        .collect()
                };
                Codec {
                    ty: name.into(),
                    param: None,
                    enc: each(&xs, |x| &x.enc).join(" "),
                    size: [vec!["0".into()], each(&xs, |x| &x.size)]
                        .concat()
                        .join(" + "),
                    dec: format!("{name} {{ {}}}", fields(|x| &x.dec)),
                    lend: format!("{name} {{ {}}}", fields(|x| &x.lend)),
                    view: None,
                    skip: each(&xs, |x| &x.skip).join(" "),
                }
            }
            Node::Cases(cases) => {
                let case = |k: usize| {
                    let payload = cases.payload(k).map(|t| self.codec(t, "__x"));
                    match cases {
                        Cases::Option(_) => Case::named(["None", "Some"][k].into(), payload),
                        Cases::Result(..) => Case::result(["Ok", "Err"][k], payload),
                        Cases::Enum(_) | Cases::Variant(_) => {
                            Case::named(format!("{name}::{}", camel(cases.name(k))), payload)
                        }
                    }
                };
                let cs: Vec<Case> = (0..cases.count()).map(case).collect();
                let ty = match cases {
                    Cases::Option(_) => format!("Option<{}>", cs[1].ty()),
                    Cases::Result(..) => format!("Result<{}, {}>", cs[0].ty(), cs[1].ty()),
                    Cases::Enum(_) | Cases::Variant(_) => name.into(),
                };
                tagged(ty, e, cases.tag_size(), &cs)
            }
            Node::Flags(fs) => {
                let (repr, size) = flags_repr(fs.len());
                let (enc, bits) = if repr == "u128" {
                    (
                        format!("__w.bytes(&{e}.bits.to_le_bytes()[..{size}]);"),
                        format!(
                            "{{ let mut __b = [0u8; 16]; __b[..{size}].copy_from_slice(__r.take({size})?); u128::from_le_bytes(__b) }}"
                        ),
                    )
                } else {
                    (format!("__w.{repr}({e}.bits);"), format!("__r.{repr}()?"))
                };
                Codec {
                    ty: name.into(),
                    param: None,
                    enc,
                    size: size.to_string(),
                    // Unknown bits are refused.
                    dec: format!("{name}::from_bits({bits}).ok_or(DecodeError)"),
                    lend: format!("{name}::from_bits({bits}).ok_or(DecodeError)"),
                    view: None,
                    skip: format!("__r.take({size})?;"),
                }
            }
        }
    }

    /// The code of a byte sequence whose Rust types are `[unsized, owned]`, written with
    /// writer method `write` and viewed as `view` (decoded by `dec`): a `Cow` under borrowed
    /// types.
    fn bytes(
        &self,
        e: &str,
        [unsized_ty, owned]: [&str; 2],
        write: &str,
        view: &'static str,
        dec: &'static str,
    ) -> Codec {
        let view = View { ty: view, dec };
        if self.borrowed {
            cow_bytes(e, unsized_ty, write, view)
        } else {
            bytes(e, owned, write, view)
        }
    }

    /// Makes `c.size` a constant when every value of `t` encodes to the same size.
    fn fixed_size(&self, t: &Ty, c: &mut Codec) {
        if let Some(b) = self.plan.bound(t)
            && b == self.plan.min_size(t)
        {
            c.size = b.to_string();
        }
    }

    /// The code of named type `d` for the value `__v` (of type `&Name`): the bodies of its
    /// `__enc_`, `__size_`, `__dec_` (an expression of type `Result<Name, DecodeError>`)
    /// and `__skip_` functions.
    pub(crate) fn def_codec(&self, i: usize) -> Codec {
        let t = Ty::Named(i);
        let node = self.node(&t);
        let mut c = self.node_codec(node, "__v", &camel(&self.def(i).name));
        if !matches!(node, Node::Flags(_)) {
            c.dec = format!("Ok({})", c.dec);
            c.lend = format!("Ok({})", c.lend);
        }
        self.fixed_size(&t, &mut c);
        c
    }
}

/// The code of a tagged type: a discriminant of `tag_size` bytes then the case's payload. A
/// discriminant out of range is refused.
fn tagged(ty: String, e: &str, tag_size: usize, cases: &[Case]) -> Codec {
    let width = 8 * tag_size;
    let (mut enc, mut size, mut dec, mut lend, mut skip) = (
        String::new(),
        String::new(),
        String::new(),
        String::new(),
        String::new(),
    );
    for (k, c) in cases.iter().enumerate() {
        let pat = &c.pat;
        let value = &c.value;
        match &c.payload {
            Some(x) => {
                enc += &format!("{pat} => {{ __w.u{width}({k}); {} }} ", x.enc);
                size += &format!("{pat} => {}, ", x.size);
                dec += &format!("{k} => {value}({}), ", x.dec);
                lend += &format!("{k} => {value}({}), ", x.lend);
                skip += &format!("{k} => {{ {} }} ", x.skip);
            }
            None => {
                enc += &format!("{pat} => __w.u{width}({k}), ");
                size += &format!("{pat} => 0, ");
                dec += &format!("{k} => {value}, ");
                lend += &format!("{k} => {value}, ");
                skip += &format!("{k} => {{}} ");
            }
        }
    }
    let tag = format!("__r.u{width}()?");
    Codec {
        ty,
        param: None,
        enc: format!("match {e} {{ {enc}}}"),
        size: format!("({} + match {e} {{ {size}}})", width / 8),
        dec: format!("match {tag} {{ {dec}_ => return Err(DecodeError) }}"),
        lend: format!("match {tag} {{ {lend}_ => return Err(DecodeError) }}"),
        view: None,
        skip: format!("match {tag} {{ {skip}_ => return Err(DecodeError) }}"),
    }
}
