//! The one walker of the A-stack layout: the encoding [`crate::plan`] describes, seen one
//! node at a time.
//!
//! * [`Layout::node`] says what the encoding holds where a value of a type sits — a scalar, a
//!   length and bytes, a count and elements, fields in order, a tag and a payload, flag bits —
//!   with every width (scalar sizes, [`Cases::tag_size`], [`flags_size`]) computed here and
//!   nowhere else.
//! * [`Reader`] walks bytes in that layout, checks what the layout itself requires (bounds,
//!   `bool` bytes, code points, UTF-8, tags and discriminants, flag bits, counts against the
//!   bytes that remain) and hands a [`Decode`] visitor each node's contents.
//! * [`Writer`] walks a type and asks an [`Encode`] source for the contents of each node
//!   (which scalar, which case, how many elements), and writes them in that layout.
//!
//! Visitors only say what they do at each node: the component codec turns nodes into
//! component values and back, the wire translation into wRPC's encoding and back, the
//! runtime into value text and back; the stub compiler writes code per [`Node`].
//!
//! Bytes handed to a [`Reader`] are untrusted: a malformed or truncated encoding is a
//! [`Fault`], never a panic, and no count is believed before the bytes that remain could hold
//! its elements.

use crate::plan::{DefKind, InterfacePlan, Prim, ProcPlan, Ty, discriminant_size, flags_size};
use std::borrow::Cow;

/// Most elements a list of elements without bytes may claim: such a count is not bounded by
/// the bytes that carry it.
const MAX_EMPTY_ELEMENTS: usize = 1 << 16;

/// Why bytes are not an encoding of a type, or a value can not be encoded as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Fault {
    /// The bytes end inside the value.
    #[error("the encoding ends early")]
    Short,
    /// A list's count is more than the bytes that remain could hold.
    #[error("a list of {0} elements does not fit in the bytes that remain")]
    Count(u32),
    /// A `bool` byte other than 0 or 1.
    #[error("bool byte {0} not 0 or 1")]
    Bool(u8),
    /// A `char` that is not a Unicode scalar value.
    #[error("{0:#x} is not a Unicode scalar value")]
    Char(u32),
    /// A string that is not UTF-8.
    #[error("a string is not UTF-8")]
    Utf8,
    /// An `option` tag other than 0 or 1.
    #[error("option tag {0} not 0 or 1")]
    OptionTag(u32),
    /// A `result` tag other than 0 or 1.
    #[error("result tag {0} not 0 or 1")]
    ResultTag(u32),
    /// An enum or variant discriminant not below the case count.
    #[error("discriminant {value} of {cases} cases")]
    Discriminant {
        /// The discriminant.
        value: u32,
        /// The case count.
        cases: usize,
    },
    /// Bits set beyond the flags the type has.
    #[error("unknown flag bits")]
    Flags,
    /// A source gave a value of another type (a scalar of another width, a case or field
    /// twice or not at all, a payload the case has not).
    #[error("a value of another type")]
    Mismatch,
    /// The encoding would be larger than its limit (at most 4 GiB, what a `u32` length can
    /// describe).
    #[error("the value is larger than the limit of {0} bytes")]
    TooLarge(usize),
    /// The plan names a type it does not define.
    #[error("the interface plan has no type {0}")]
    UnknownType(usize),
    /// Bytes follow the last value where the values must take all of them
    /// ([`Extent::Whole`]).
    #[error("{0} trailing bytes")]
    Trailing(usize),
}

impl Fault {
    /// A short fixed description, for error types that carry a `&'static str`.
    pub fn reason(self) -> &'static str {
        match self {
            Fault::Short | Fault::Count(_) => "the encoding ends early",
            Fault::Bool(_) => "bool not 0 or 1",
            Fault::Char(_) => "char not a Unicode scalar value",
            Fault::Utf8 => "string: bad UTF-8",
            Fault::OptionTag(_) => "option tag not 0 or 1",
            Fault::ResultTag(_) => "result tag not 0 or 1",
            Fault::Discriminant { .. } => "discriminant out of range",
            Fault::Flags => "unknown flag bits",
            Fault::Mismatch => "a value of another type",
            Fault::TooLarge(_) => "the value is too large",
            Fault::UnknownType(_) => "the plan has no such type",
            Fault::Trailing(_) => "bytes follow the value",
        }
    }
}

/// A scalar's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scalar {
    /// `bool`.
    Bool(bool),
    /// `u8`.
    U8(u8),
    /// `s8`.
    S8(i8),
    /// `u16`.
    U16(u16),
    /// `s16`.
    S16(i16),
    /// `u32`.
    U32(u32),
    /// `s32`.
    S32(i32),
    /// `u64`.
    U64(u64),
    /// `s64`.
    S64(i64),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
    /// `char`.
    Char(char),
}

impl Scalar {
    /// Its type.
    pub fn prim(self) -> Prim {
        match self {
            Scalar::Bool(_) => Prim::Bool,
            Scalar::U8(_) => Prim::U8,
            Scalar::S8(_) => Prim::S8,
            Scalar::U16(_) => Prim::U16,
            Scalar::S16(_) => Prim::S16,
            Scalar::U32(_) => Prim::U32,
            Scalar::S32(_) => Prim::S32,
            Scalar::U64(_) => Prim::U64,
            Scalar::S64(_) => Prim::S64,
            Scalar::F32(_) => Prim::F32,
            Scalar::F64(_) => Prim::F64,
            Scalar::Char(_) => Prim::Char,
        }
    }

    fn put(self, out: &mut Vec<u8>) {
        match self {
            Scalar::Bool(b) => out.push(u8::from(b)),
            Scalar::U8(x) => out.push(x),
            Scalar::S8(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::S16(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::S32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::S64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
            Scalar::Char(c) => out.extend_from_slice(&u32::from(c).to_le_bytes()),
        }
    }

    /// The scalar of type `p` encoded in `b` (`p.size()` bytes), checked.
    fn get(p: Prim, b: &[u8]) -> Result<Scalar, Fault> {
        let mut w = [0u8; 8];
        w.get_mut(..b.len()).ok_or(Fault::Short)?.copy_from_slice(b);
        let u = u64::from_le_bytes(w);
        Ok(match p {
            Prim::Bool => match u {
                0 | 1 => Scalar::Bool(u == 1),
                _ => return Err(Fault::Bool(u as u8)),
            },
            Prim::U8 => Scalar::U8(u as u8),
            Prim::S8 => Scalar::S8(u as u8 as i8),
            Prim::U16 => Scalar::U16(u as u16),
            Prim::S16 => Scalar::S16(u as u16 as i16),
            Prim::U32 => Scalar::U32(u as u32),
            Prim::S32 => Scalar::S32(u as u32 as i32),
            Prim::U64 => Scalar::U64(u),
            Prim::S64 => Scalar::S64(u as i64),
            Prim::F32 => Scalar::F32(f32::from_bits(u as u32)),
            Prim::F64 => Scalar::F64(f64::from_bits(u)),
            Prim::Char => Scalar::Char(char::from_u32(u as u32).ok_or(Fault::Char(u as u32))?),
        })
    }
}

/// The cases of a tagged node: a tag of [`Cases::tag_size`] bytes, below [`Cases::count`],
/// then the chosen case's payload, if it has one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cases<'t> {
    /// `option<T>`: `none` (0), `some(T)` (1).
    Option(&'t Ty),
    /// `result<T, E>`: `ok` (0), `err` (1), each with its payload if any.
    Result(Option<&'t Ty>, Option<&'t Ty>),
    /// An enum's cases.
    Enum(&'t [String]),
    /// A variant's cases, each with its payload if any.
    Variant(&'t [(String, Option<Ty>)]),
}

impl<'t> Cases<'t> {
    /// How many cases.
    pub fn count(self) -> usize {
        match self {
            Cases::Option(_) | Cases::Result(..) => 2,
            Cases::Enum(cs) => cs.len(),
            Cases::Variant(cs) => cs.len(),
        }
    }

    /// Bytes of the tag.
    pub fn tag_size(self) -> usize {
        discriminant_size(self.count())
    }

    /// The name of case `k` (`none`/`some`, `ok`/`err` for options and results); empty when
    /// there is no such case.
    pub fn name(self, k: usize) -> &'t str {
        match self {
            Cases::Option(_) => ["none", "some"].get(k).copied().unwrap_or(""),
            Cases::Result(..) => ["ok", "err"].get(k).copied().unwrap_or(""),
            Cases::Enum(cs) => cs.get(k).map_or("", String::as_str),
            Cases::Variant(cs) => cs.get(k).map_or("", |(n, _)| n.as_str()),
        }
    }

    /// The payload type of case `k`, if it has one.
    pub fn payload(self, k: usize) -> Option<&'t Ty> {
        match (self, k) {
            (Cases::Option(t), 1) => Some(t),
            (Cases::Result(ok, _), 0) => ok,
            (Cases::Result(_, err), 1) => err,
            (Cases::Variant(cs), k) => cs.get(k).and_then(|(_, t)| t.as_ref()),
            _ => None,
        }
    }

    /// The case named `name`.
    pub fn find(self, name: &str) -> Option<usize> {
        (0..self.count()).find(|&k| self.name(k) == name)
    }

    /// The fault of tag `value`, which is not below [`Cases::count`].
    fn fault(self, value: u32) -> Fault {
        match self {
            Cases::Option(_) => Fault::OptionTag(value),
            Cases::Result(..) => Fault::ResultTag(value),
            _ => Fault::Discriminant {
                value,
                cases: self.count(),
            },
        }
    }
}

/// What the encoding holds where a value of a type sits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Node<'t> {
    /// A scalar: [`Prim::size`] bytes, little endian (a `char` as its `u32`).
    Prim(Prim),
    /// A `u32` byte length, then UTF-8.
    String,
    /// A `u32` element count, then the elements (those of a `list<u8>` are its bytes).
    List(&'t Ty),
    /// A tuple's fields, in order.
    Tuple(&'t [Ty]),
    /// A record's fields, in order.
    Record(&'t [(String, Ty)]),
    /// An `option`, `result`, enum or variant: a tag, then the case's payload.
    Cases(Cases<'t>),
    /// Flags: [`flags_size`] bytes, flag `k` in bit `k % 8` of byte `k / 8`.
    Flags(&'t [String]),
}

/// The layout of the types of an interface plan.
#[derive(Debug, Clone, Copy)]
pub struct Layout<'t> {
    plan: &'t InterfacePlan,
}

impl<'t> Layout<'t> {
    /// The layout of `plan`'s types.
    pub fn new(plan: &'t InterfacePlan) -> Layout<'t> {
        Layout { plan }
    }

    /// The node a value of `ty` is, named types resolved.
    pub fn node<'n>(self, ty: &'n Ty) -> Result<Node<'n>, Fault>
    where
        't: 'n,
    {
        Ok(match ty {
            Ty::Prim(p) => Node::Prim(*p),
            Ty::String => Node::String,
            Ty::List(t) => Node::List(t),
            Ty::Tuple(ts) => Node::Tuple(ts),
            Ty::Option(t) => Node::Cases(Cases::Option(t)),
            Ty::Result(ok, err) => Node::Cases(Cases::Result(ok.as_deref(), err.as_deref())),
            Ty::Named(i) => {
                let def = self.plan.defs.get(*i).ok_or(Fault::UnknownType(*i))?;
                match &def.kind {
                    DefKind::Record(fs) => Node::Record(fs),
                    DefKind::Enum(cs) => Node::Cases(Cases::Enum(cs)),
                    DefKind::Variant(cs) => Node::Cases(Cases::Variant(cs)),
                    DefKind::Flags(fs) => Node::Flags(fs),
                }
            }
        })
    }
}

/// Whether `ty` is a byte list (`list<u8>`): a list whose elements are its bytes, which the
/// layout reads and writes as one run ([`Decode::bytes`], [`ListOut::bytes`]).
pub fn is_bytes(ty: &Ty) -> bool {
    matches!(ty, Ty::List(el) if byte_element(el))
}

/// Whether a list of `el` is a byte list ([`is_bytes`]).
pub(crate) fn byte_element(el: &Ty) -> bool {
    *el == Ty::Prim(Prim::U8)
}

/// Whether flag `k` is set in `bits`, a flags value's bytes.
pub fn flag_set(bits: &[u8], k: usize) -> bool {
    bits.get(k / 8).is_some_and(|b| b & (1 << (k % 8)) != 0)
}

/// A visitor of values read by a [`Reader`]: one method per kind of node, each given the
/// node's checked contents. The children of a list, tuple, record or case are read through
/// the [`Seq`] handed in, with any visitor; those left unread are stepped over (and checked)
/// when the method returns.
pub trait Decode<'t, 'b> {
    /// What a value becomes.
    type Out;
    /// The visitor's error; a [`Fault`] of the bytes converts into it.
    type Error: From<Fault>;
    /// A scalar.
    fn scalar(&mut self, v: Scalar) -> Result<Self::Out, Self::Error>;
    /// A string (UTF-8 checked).
    fn string(&mut self, s: &'b str) -> Result<Self::Out, Self::Error>;
    /// A `list<u8>`.
    fn bytes(&mut self, b: &'b [u8]) -> Result<Self::Out, Self::Error>;
    /// Any other list: its elements.
    fn list(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<Self::Out, Self::Error>;
    /// A tuple: its fields.
    fn tuple(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<Self::Out, Self::Error>;
    /// A record of `fields`: their values.
    fn record(
        &mut self,
        fields: &'t [(String, Ty)],
        values: &mut Seq<'_, 't, 'b>,
    ) -> Result<Self::Out, Self::Error>;
    /// Case `k` (below `cases.count()`) of `cases`, and its payload (none or one value).
    fn case(
        &mut self,
        cases: Cases<'t>,
        k: usize,
        payload: &mut Seq<'_, 't, 'b>,
    ) -> Result<Self::Out, Self::Error>;
    /// Flags `names`, their bits as [`flag_set`] reads them (no bit beyond the names is set).
    fn flags(&mut self, names: &'t [String], bits: &'b [u8]) -> Result<Self::Out, Self::Error>;
}

/// How much of its bytes a run of values must take: the one place the codecs' "decode
/// exactly" and "decode a prefix" differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// All of them: bytes after the last value are a [`Fault::Trailing`].
    Whole,
    /// A prefix: bytes after the last value are ignored (the A-stack of a procedure of
    /// bounded size holds its largest encoding, and a smaller value leaves bytes unused).
    Prefix,
}

impl Extent {
    /// How much of its A-stack `proc`'s encodings take: a prefix for a bounded procedure
    /// (its A-stacks hold its largest encodings), else all of the bytes sent.
    pub fn of(proc: &ProcPlan) -> Extent {
        if proc.bounded {
            Extent::Prefix
        } else {
            Extent::Whole
        }
    }

    /// Checks the `rest` bytes left after the last value.
    pub fn check(self, rest: usize) -> Result<(), Fault> {
        match (self, rest) {
            (Extent::Whole, n) if n > 0 => Err(Fault::Trailing(n)),
            _ => Ok(()),
        }
    }
}

/// Reads values of the layout off untrusted bytes.
#[derive(Debug)]
pub struct Reader<'t, 'b> {
    layout: Layout<'t>,
    bytes: &'b [u8],
    at: usize,
}

impl<'t, 'b> Reader<'t, 'b> {
    /// A reader of `bytes` from their start.
    pub fn new(layout: Layout<'t>, bytes: &'b [u8]) -> Reader<'t, 'b> {
        Reader {
            layout,
            bytes,
            at: 0,
        }
    }

    /// How many bytes the values read so far took.
    pub fn at(&self) -> usize {
        self.at
    }

    /// The bytes after those read.
    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Reads one value of each of `tys`, in order, with `v`, then checks the bytes that
    /// remain against `extent` (none may remain for [`Extent::Whole`]).
    pub fn read_values<V: Decode<'t, 'b>>(
        &mut self,
        tys: &[&'t Ty],
        v: &mut V,
        extent: Extent,
    ) -> Result<Vec<V::Out>, V::Error> {
        let vals = tys
            .iter()
            .map(|t| self.read(t, v))
            .collect::<Result<Vec<_>, _>>()?;
        extent.check(self.remaining())?;
        Ok(vals)
    }

    fn take(&mut self, n: usize) -> Result<&'b [u8], Fault> {
        let end = self.at.checked_add(n).ok_or(Fault::Short)?;
        let s = self.bytes.get(self.at..end).ok_or(Fault::Short)?;
        self.at = end;
        Ok(s)
    }

    /// An unsigned little-endian number of `n` (at most 4) bytes.
    fn uint(&mut self, n: usize) -> Result<u32, Fault> {
        let mut w = [0u8; 4];
        w.get_mut(..n)
            .ok_or(Fault::Short)?
            .copy_from_slice(self.take(n)?);
        Ok(u32::from_le_bytes(w))
    }

    /// A count of elements of `el`, checked against the bytes that remain.
    fn count(&mut self, el: &Ty) -> Result<usize, Fault> {
        let n = self.uint(4)?;
        let fits = match self.layout.plan.min_size(el) {
            0 => n as usize <= MAX_EMPTY_ELEMENTS,
            min => n as usize <= self.remaining() / min,
        };
        if fits {
            Ok(n as usize)
        } else {
            Err(Fault::Count(n))
        }
    }

    /// Reads one value of `ty`, handing its nodes to `v`.
    pub fn read<V: Decode<'t, 'b>>(&mut self, ty: &'t Ty, v: &mut V) -> Result<V::Out, V::Error> {
        match self.layout.node(ty)? {
            Node::Prim(p) => {
                let s = Scalar::get(p, self.take(p.size())?)?;
                v.scalar(s)
            }
            Node::String => {
                let n = self.uint(4)? as usize;
                let s = std::str::from_utf8(self.take(n)?).map_err(|_| Fault::Utf8)?;
                v.string(s)
            }
            Node::List(el) if byte_element(el) => {
                let n = self.uint(4)? as usize;
                let b = self.take(n)?;
                v.bytes(b)
            }
            Node::List(el) => {
                let n = self.count(el)?;
                Seq::new(self, Items::List(el), n).run(|s| v.list(s))
            }
            Node::Tuple(ts) => Seq::new(self, Items::Tuple(ts), ts.len()).run(|s| v.tuple(s)),
            Node::Record(fs) => {
                Seq::new(self, Items::Record(fs), fs.len()).run(|s| v.record(fs, s))
            }
            Node::Cases(cases) => {
                let tag = self.uint(cases.tag_size())?;
                let k = tag as usize;
                if k >= cases.count() {
                    return Err(cases.fault(tag).into());
                }
                let payload = match cases.payload(k) {
                    Some(t) => std::slice::from_ref(t),
                    None => &[],
                };
                Seq::new(self, Items::Tuple(payload), payload.len()).run(|s| v.case(cases, k, s))
            }
            Node::Flags(names) => {
                let bits = self.take(flags_size(names.len()))?;
                if (names.len()..bits.len() * 8).any(|k| flag_set(bits, k)) {
                    return Err(Fault::Flags.into());
                }
                v.flags(names, bits)
            }
        }
    }
}

/// The types of a [`Seq`]'s values.
#[derive(Debug, Clone, Copy)]
enum Items<'t> {
    List(&'t Ty),
    Tuple(&'t [Ty]),
    Record(&'t [(String, Ty)]),
}

/// The values inside a node being read: a list's elements, a tuple's or record's fields, a
/// case's payload.
#[derive(Debug)]
pub struct Seq<'r, 't, 'b> {
    reader: &'r mut Reader<'t, 'b>,
    items: Items<'t>,
    next: usize,
    len: usize,
}

impl<'r, 't, 'b> Seq<'r, 't, 'b> {
    fn new(reader: &'r mut Reader<'t, 'b>, items: Items<'t>, len: usize) -> Seq<'r, 't, 'b> {
        Seq {
            reader,
            items,
            next: 0,
            len,
        }
    }

    /// Hands the sequence to `visit`, then steps over what it left unread.
    fn run<O, E: From<Fault>>(
        mut self,
        visit: impl FnOnce(&mut Self) -> Result<O, E>,
    ) -> Result<O, E> {
        let out = visit(&mut self)?;
        self.each(&mut Skip)?;
        Ok(out)
    }

    /// How many values it has.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it has none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the next value with `v`; `None` after the last.
    pub fn next<V: Decode<'t, 'b>>(&mut self, v: &mut V) -> Option<Result<V::Out, V::Error>> {
        if self.next >= self.len {
            return None;
        }
        let ty = match self.items {
            Items::List(t) => Some(t),
            Items::Tuple(ts) => ts.get(self.next),
            Items::Record(fs) => fs.get(self.next).map(|(_, t)| t),
        }?;
        self.next += 1;
        Some(self.reader.read(ty, v))
    }

    /// Reads the values that remain with `v`, dropping what it makes of them.
    pub fn each<V: Decode<'t, 'b>>(&mut self, v: &mut V) -> Result<(), V::Error> {
        while let Some(x) = self.next(v) {
            x?;
        }
        Ok(())
    }
}

/// Steps over values, checking them.
struct Skip;

impl<'t, 'b> Decode<'t, 'b> for Skip {
    type Out = ();
    type Error = Fault;
    fn scalar(&mut self, _: Scalar) -> Result<(), Fault> {
        Ok(())
    }
    fn string(&mut self, _: &'b str) -> Result<(), Fault> {
        Ok(())
    }
    fn bytes(&mut self, _: &'b [u8]) -> Result<(), Fault> {
        Ok(())
    }
    fn list(&mut self, _: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
        Ok(())
    }
    fn tuple(&mut self, _: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
        Ok(())
    }
    fn record(&mut self, _: &'t [(String, Ty)], _: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
        Ok(())
    }
    fn case(&mut self, _: Cases<'t>, _: usize, _: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
        Ok(())
    }
    fn flags(&mut self, _: &'t [String], _: &'b [u8]) -> Result<(), Fault> {
        Ok(())
    }
}

/// A source of values for a [`Writer`]: one method per kind of node, each saying what the
/// value holds there. Children are written through the handle handed in, each from any
/// source; what the handle is not given (a missing field, case or payload) is a
/// [`Fault::Mismatch`].
pub trait Encode<'t> {
    /// The source's error; a [`Fault`] converts into it.
    type Error: From<Fault>;
    /// The scalar of type `p` (one of another type is refused).
    fn scalar(&mut self, p: Prim) -> Result<Scalar, Self::Error>;
    /// The string.
    fn string(&mut self) -> Result<Cow<'_, str>, Self::Error>;
    /// A list's elements, through [`ListOut::item`] or [`ListOut::bytes`].
    fn list(&mut self, items: &mut ListOut<'_, '_, 't>) -> Result<(), Self::Error>;
    /// A tuple's fields, through [`FieldsOut::field`].
    fn tuple(&mut self, fields: &mut FieldsOut<'_, '_, 't>) -> Result<(), Self::Error>;
    /// The fields of a record of `fields`, through [`FieldsOut::field`], in any order.
    fn record(
        &mut self,
        fields: &'t [(String, Ty)],
        out: &mut FieldsOut<'_, '_, 't>,
    ) -> Result<(), Self::Error>;
    /// The case, through [`CaseOut::case`], then its payload through [`CaseOut::payload`].
    fn case(&mut self, case: &mut CaseOut<'_, '_, 't>) -> Result<(), Self::Error>;
    /// The flags set, through [`FlagsOut::set`].
    fn flags(&mut self, flags: &mut FlagsOut<'_>) -> Result<(), Self::Error>;
}

/// Writes values in the layout.
#[derive(Debug)]
pub struct Writer<'t, 'o> {
    layout: Layout<'t>,
    out: &'o mut Vec<u8>,
    limit: usize,
}

impl<'t, 'o> Writer<'t, 'o> {
    /// A writer appending to `out`.
    pub fn new(layout: Layout<'t>, out: &'o mut Vec<u8>) -> Writer<'t, 'o> {
        Writer {
            layout,
            out,
            limit: usize::MAX,
        }
    }

    /// Refuses to let `out` grow beyond `limit` bytes ([`Fault::TooLarge`]).
    pub fn limit(self, limit: usize) -> Writer<'t, 'o> {
        Writer { limit, ..self }
    }

    fn check(&self) -> Result<(), Fault> {
        if self.out.len() > self.limit {
            Err(Fault::TooLarge(self.limit))
        } else {
            Ok(())
        }
    }

    fn len(&mut self, n: usize) -> Result<(), Fault> {
        let n = u32::try_from(n).map_err(|_| Fault::TooLarge(u32::MAX as usize))?;
        self.out.extend_from_slice(&n.to_le_bytes());
        Ok(())
    }

    /// Writes one value of `ty`, asking `s` for its contents.
    pub fn write<S: Encode<'t>>(&mut self, ty: &'t Ty, s: &mut S) -> Result<(), S::Error> {
        self.check()?;
        match self.layout.node(ty)? {
            Node::Prim(p) => {
                let v = s.scalar(p)?;
                if v.prim() != p {
                    return Err(Fault::Mismatch.into());
                }
                v.put(self.out);
            }
            Node::String => {
                let text = s.string()?;
                self.len(text.len())?;
                self.out.extend_from_slice(text.as_bytes());
            }
            Node::List(el) => {
                let at = self.out.len();
                self.out.extend_from_slice(&[0; 4]);
                let mut items = ListOut {
                    writer: self,
                    el,
                    n: 0,
                };
                s.list(&mut items)?;
                let n = u32::try_from(items.n).map_err(|_| Fault::TooLarge(u32::MAX as usize))?;
                self.out[at..at + 4].copy_from_slice(&n.to_le_bytes());
            }
            Node::Tuple(ts) => {
                let mut f = FieldsOut::new(self, Items::Tuple(ts), ts.len());
                s.tuple(&mut f)?;
                f.finish()?;
            }
            Node::Record(fs) => {
                let mut f = FieldsOut::new(self, Items::Record(fs), fs.len());
                s.record(fs, &mut f)?;
                f.finish()?;
            }
            Node::Cases(cases) => {
                let mut c = CaseOut {
                    writer: self,
                    cases,
                    chosen: None,
                    paid: false,
                };
                s.case(&mut c)?;
                match c.chosen {
                    Some(k) if cases.payload(k).is_some() == c.paid => {}
                    _ => return Err(Fault::Mismatch.into()),
                }
            }
            Node::Flags(names) => {
                let at = self.out.len();
                self.out.resize(at + flags_size(names.len()), 0);
                s.flags(&mut FlagsOut {
                    names,
                    bits: &mut self.out[at..],
                })?;
            }
        }
        self.check()?;
        Ok(())
    }
}

/// The elements of a list being written.
#[derive(Debug)]
pub struct ListOut<'w, 'o, 't> {
    writer: &'w mut Writer<'t, 'o>,
    el: &'t Ty,
    n: usize,
}

impl<'t> ListOut<'_, '_, 't> {
    /// The elements' type.
    pub fn element(&self) -> &'t Ty {
        self.el
    }

    /// Whether the list is a byte list ([`is_bytes`]), whose bytes [`ListOut::bytes`] writes.
    pub fn is_bytes(&self) -> bool {
        byte_element(self.el)
    }

    /// Writes the next element, from `s`.
    pub fn item<S: Encode<'t>>(&mut self, s: &mut S) -> Result<(), S::Error> {
        self.n += 1;
        self.writer.write(self.el, s)
    }

    /// Writes elements that are bytes (`u8` or `s8`) as they are.
    pub fn bytes(&mut self, b: &[u8]) -> Result<(), Fault> {
        if !matches!(self.el, Ty::Prim(Prim::U8 | Prim::S8)) {
            return Err(Fault::Mismatch);
        }
        self.n += b.len();
        self.writer.out.extend_from_slice(b);
        self.writer.check()
    }
}

/// The fields of a tuple or record being written.
#[derive(Debug)]
pub struct FieldsOut<'w, 'o, 't> {
    writer: &'w mut Writer<'t, 'o>,
    items: Items<'t>,
    len: usize,
    /// Fields `0..next` are written, in order.
    next: usize,
    /// Fields written out of order: index and bytes in the output.
    late: Vec<(usize, std::ops::Range<usize>)>,
}

impl<'w, 'o, 't> FieldsOut<'w, 'o, 't> {
    fn new(writer: &'w mut Writer<'t, 'o>, items: Items<'t>, len: usize) -> Self {
        FieldsOut {
            writer,
            items,
            len,
            next: 0,
            late: Vec::new(),
        }
    }

    /// Whether field `k` is written.
    pub fn written(&self, k: usize) -> bool {
        k < self.next || self.late.iter().any(|(j, _)| *j == k)
    }

    /// Writes field `k` from `s`. Fields may come in any order, each once.
    pub fn field<S: Encode<'t>>(&mut self, k: usize, s: &mut S) -> Result<(), S::Error> {
        let ty = match self.items {
            Items::Tuple(ts) => ts.get(k),
            Items::Record(fs) => fs.get(k).map(|(_, t)| t),
            Items::List(_) => None,
        };
        let Some(ty) = ty.filter(|_| !self.written(k)) else {
            return Err(Fault::Mismatch.into());
        };
        let start = self.writer.out.len();
        self.writer.write(ty, s)?;
        if k == self.next && self.late.is_empty() {
            self.next += 1;
        } else {
            self.late.push((k, start..self.writer.out.len()));
        }
        Ok(())
    }

    /// Writes the fields not written yet, in order, from `s`.
    pub fn rest<S: Encode<'t>>(&mut self, s: &mut S) -> Result<(), S::Error> {
        while let Some(k) = self.missing() {
            self.field(k, s)?;
        }
        Ok(())
    }

    /// The first field not written yet.
    pub fn missing(&self) -> Option<usize> {
        (0..self.len).find(|&k| !self.written(k))
    }

    /// Checks every field was written and puts those written out of order in place.
    fn finish(self) -> Result<(), Fault> {
        if self.missing().is_some() {
            return Err(Fault::Mismatch);
        }
        let Some(first) = self.late.iter().map(|(_, r)| r.start).min() else {
            return Ok(());
        };
        let mut late = self.late;
        late.sort_by_key(|(k, _)| *k);
        let out = &mut *self.writer.out;
        let mut fields = Vec::with_capacity(out.len() - first);
        for (_, r) in &late {
            fields.extend_from_slice(&out[r.clone()]);
        }
        out.truncate(first);
        out.extend_from_slice(&fields);
        Ok(())
    }
}

/// The case of a tagged value being written.
#[derive(Debug)]
pub struct CaseOut<'w, 'o, 't> {
    writer: &'w mut Writer<'t, 'o>,
    cases: Cases<'t>,
    chosen: Option<usize>,
    paid: bool,
}

impl<'t> CaseOut<'_, '_, 't> {
    /// The cases.
    pub fn cases(&self) -> Cases<'t> {
        self.cases
    }

    /// Chooses case `k` and writes its tag; returns its payload's type, if it has one. A
    /// `k` past the cases is refused as a bad tag would be.
    pub fn case(&mut self, k: usize) -> Result<Option<&'t Ty>, Fault> {
        let tag = u32::try_from(k).unwrap_or(u32::MAX);
        if k >= self.cases.count() {
            return Err(self.cases.fault(tag));
        }
        if self.chosen.replace(k).is_some() {
            return Err(Fault::Mismatch);
        }
        let out = &mut *self.writer.out;
        out.extend_from_slice(&tag.to_le_bytes()[..self.cases.tag_size()]);
        Ok(self.cases.payload(k))
    }

    /// Writes the chosen case's payload from `s`.
    pub fn payload<S: Encode<'t>>(&mut self, s: &mut S) -> Result<(), S::Error> {
        let ty = self.chosen.and_then(|k| self.cases.payload(k));
        match ty {
            Some(t) if !self.paid => {
                self.paid = true;
                self.writer.write(t, s)
            }
            _ => Err(Fault::Mismatch.into()),
        }
    }
}

/// The flags being written.
#[derive(Debug)]
pub struct FlagsOut<'o> {
    names: &'o [String],
    bits: &'o mut [u8],
}

impl FlagsOut<'_> {
    /// The flags' names.
    pub fn names(&self) -> &[String] {
        self.names
    }

    /// Sets flag `k`; one past the flags is [`Fault::Flags`].
    pub fn set(&mut self, k: usize) -> Result<(), Fault> {
        match self.bits.get_mut(k / 8) {
            Some(b) if k < self.names.len() => {
                *b |= 1 << (k % 8);
                Ok(())
            }
            _ => Err(Fault::Flags),
        }
    }
}

// The plan's size facts are read off the layout's nodes, so they live here: `plan` defines
// the types and the layout walks them.
/// What the stubs and the kernel need to know of a type's encoding, found in one walk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Facts {
    /// Largest encoded size, `None` when unbounded.
    bound: Option<usize>,
    /// Smallest encoded size.
    min: usize,
    /// Whether a `string` appears anywhere in it.
    has_string: bool,
}

impl Facts {
    /// A type that always encodes to `size` bytes.
    fn fixed(size: usize) -> Facts {
        Facts {
            bound: Some(size),
            min: size,
            has_string: false,
        }
    }

    /// Fields one after another (a tuple, a record).
    fn seq(fields: impl Iterator<Item = Facts>) -> Facts {
        fields.fold(Facts::fixed(0), |a, f| Facts {
            bound: a.bound.zip(f.bound).map(|(a, b)| a + b),
            min: a.min + f.min,
            has_string: a.has_string || f.has_string,
        })
    }

    /// A discriminant of `tag` bytes then one case's payload (an option, a result, an enum, a
    /// variant); `None` for a case without payload.
    fn tagged(tag: usize, cases: impl Iterator<Item = Option<Facts>>) -> Facts {
        cases.fold(Facts::fixed(tag), |a, c| {
            let c = c.unwrap_or(Facts::fixed(0));
            Facts {
                bound: a.bound.zip(c.bound).map(|(a, b)| a.max(tag + b)),
                min: tag,
                has_string: a.has_string || c.has_string,
            }
        })
    }
}

impl InterfacePlan {
    /// The encoding facts of `ty`, from its layout's nodes.
    fn facts(&self, ty: &Ty) -> Facts {
        let Ok(node) = Layout::new(self).node(ty) else {
            // A type the plan does not define: nothing is known of it (it decodes to no
            // value at all).
            return Facts::fixed(0);
        };
        match node {
            Node::Prim(p) => Facts::fixed(p.size()),
            // A length, then the bytes or elements.
            Node::String => Facts {
                bound: None,
                min: 4,
                has_string: true,
            },
            Node::List(e) => Facts {
                bound: None,
                min: 4,
                has_string: self.facts(e).has_string,
            },
            Node::Tuple(ts) => Facts::seq(ts.iter().map(|t| self.facts(t))),
            Node::Record(fs) => Facts::seq(fs.iter().map(|(_, t)| self.facts(t))),
            Node::Cases(c) => Facts::tagged(
                c.tag_size(),
                (0..c.count()).map(|k| c.payload(k).map(|t| self.facts(t))),
            ),
            Node::Flags(fs) => Facts::fixed(flags_size(fs.len())),
        }
    }

    /// Largest encoded size of `ty`, or `None` when unbounded.
    pub fn bound(&self, ty: &Ty) -> Option<usize> {
        self.facts(ty).bound
    }

    /// Smallest encoded size of `ty` (used to refuse impossible list lengths).
    pub fn min_size(&self, ty: &Ty) -> usize {
        self.facts(ty).min
    }

    /// Whether a `string` appears anywhere in `ty`.
    pub fn has_string(&self, ty: &Ty) -> bool {
        self.facts(ty).has_string
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Wit;

    fn kv() -> InterfacePlan {
        let wit = Wit::load_sources(&[("kv.wit", include_str!("../../wit/kv.wit"))])
            .expect("kv.wit loads");
        wit.interface("lrpc:kv/store").expect("kv plan")
    }

    /// Writes what it reads: a visitor and a source in one.
    #[derive(Default)]
    struct Echo {
        scalars: Vec<Scalar>,
        strings: Vec<String>,
        counts: Vec<usize>,
        cases: Vec<usize>,
        flags: Vec<Vec<usize>>,
    }

    impl<'t, 'b> Decode<'t, 'b> for Echo {
        type Out = ();
        type Error = Fault;
        fn scalar(&mut self, v: Scalar) -> Result<(), Fault> {
            self.scalars.push(v);
            Ok(())
        }
        fn string(&mut self, s: &'b str) -> Result<(), Fault> {
            self.strings.push(s.into());
            Ok(())
        }
        fn bytes(&mut self, b: &'b [u8]) -> Result<(), Fault> {
            self.counts.push(b.len());
            self.scalars.extend(b.iter().map(|&b| Scalar::U8(b)));
            Ok(())
        }
        fn list(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
            self.counts.push(items.len());
            items.each(self)
        }
        fn tuple(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
            items.each(self)
        }
        fn record(&mut self, _: &'t [(String, Ty)], v: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
            v.each(self)
        }
        fn case(&mut self, _: Cases<'t>, k: usize, p: &mut Seq<'_, 't, 'b>) -> Result<(), Fault> {
            self.cases.push(k);
            p.each(self)
        }
        fn flags(&mut self, names: &'t [String], bits: &'b [u8]) -> Result<(), Fault> {
            let set = (0..names.len()).filter(|&k| flag_set(bits, k)).collect();
            self.flags.push(set);
            Ok(())
        }
    }

    impl<'t> Encode<'t> for Echo {
        type Error = Fault;
        fn scalar(&mut self, _: Prim) -> Result<Scalar, Fault> {
            Ok(self.scalars.remove(0))
        }
        fn string(&mut self) -> Result<Cow<'_, str>, Fault> {
            Ok(Cow::Owned(self.strings.remove(0)))
        }
        fn list(&mut self, items: &mut ListOut<'_, '_, 't>) -> Result<(), Fault> {
            for _ in 0..self.counts.remove(0) {
                items.item(self)?;
            }
            Ok(())
        }
        fn tuple(&mut self, f: &mut FieldsOut<'_, '_, 't>) -> Result<(), Fault> {
            f.rest(self)
        }
        fn record(&mut self, _: &'t [(String, Ty)], f: &mut FieldsOut<'_, '_, 't>) -> Fallible {
            f.rest(self)
        }
        fn case(&mut self, c: &mut CaseOut<'_, '_, 't>) -> Result<(), Fault> {
            if c.case(self.cases.remove(0))?.is_some() {
                c.payload(self)?;
            }
            Ok(())
        }
        fn flags(&mut self, f: &mut FlagsOut<'_>) -> Result<(), Fault> {
            for k in self.flags.remove(0) {
                f.set(k)?;
            }
            Ok(())
        }
    }

    type Fallible = Result<(), Fault>;

    fn result_of<'p>(plan: &'p InterfacePlan, f: &str) -> &'p Ty {
        let p = plan.procs.iter().find(|p| p.name == f).expect("function");
        p.result.as_ref().expect("a result")
    }

    #[test]
    fn what_is_read_writes_back_the_same() {
        let plan = kv();
        let layout = Layout::new(&plan);
        let get = result_of(&plan, "get");
        // ok(entry { key: "", value: [1, 2], kind: binary, version: 2^40 }), then
        // err(denied(read | scan)).
        let ok = [
            &[0][..],
            &[0; 4],
            &[2, 0, 0, 0, 1, 2],
            &[1],
            &(1u64 << 40).to_le_bytes(),
        ]
        .concat();
        for bytes in [ok, vec![1, 3, 0b101]] {
            let mut echo = Echo::default();
            let mut r = Reader::new(layout, &bytes);
            r.read(get, &mut echo).expect("reads");
            assert_eq!(r.at(), bytes.len());
            let mut out = Vec::new();
            Writer::new(layout, &mut out)
                .write(get, &mut echo)
                .expect("writes");
            assert_eq!(out, bytes);
        }
    }

    #[test]
    fn untrusted_bytes_are_faults() {
        let plan = kv();
        let layout = Layout::new(&plan);
        let get = result_of(&plan, "get");
        let read = |b: &[u8]| Reader::new(layout, b).read(get, &mut Skip);
        assert_eq!(read(&[2]), Err(Fault::ResultTag(2)));
        assert!(matches!(
            read(&[1, 4]),
            Err(Fault::Discriminant { value: 4, .. })
        ));
        assert_eq!(read(&[1, 3, 0b1000]), Err(Fault::Flags));
        assert_eq!(read(&[0, 5, 0, 0, 0, b'a']), Err(Fault::Short));
        assert_eq!(read(&[0, 1, 0, 0, 0, 0xff]), Err(Fault::Utf8));
        let list = Ty::List(Box::new(Ty::String));
        assert_eq!(
            Reader::new(layout, &[0xff; 4]).read(&list, &mut Skip),
            Err(Fault::Count(u32::MAX))
        );
        let c = Ty::Prim(Prim::Char);
        assert_eq!(
            Reader::new(layout, &0xd800u32.to_le_bytes()).read(&c, &mut Skip),
            Err(Fault::Char(0xd800))
        );
        assert_eq!(
            Reader::new(layout, &[2]).read(&Ty::Prim(Prim::Bool), &mut Skip),
            Err(Fault::Bool(2))
        );
        // Every truncation of a good value is refused.
        let good = [1, 3, 0b101];
        for n in 0..good.len() {
            assert!(read(&good[..n]).is_err(), "{n}");
        }
    }

    #[test]
    fn a_whole_extent_refuses_trailing_bytes_a_prefix_ignores_them() {
        let plan = kv();
        let layout = Layout::new(&plan);
        let (b, u) = (Ty::Prim(Prim::Bool), Ty::Prim(Prim::U8));
        let read = |bytes: &[u8], extent| {
            let mut r = Reader::new(layout, bytes);
            r.read_values(&[&b, &u], &mut Skip, extent)
                .map(|v| (v.len(), r.at()))
        };
        assert_eq!(read(&[1, 7], Extent::Whole), Ok((2, 2)));
        assert_eq!(read(&[1, 7], Extent::Prefix), Ok((2, 2)));
        assert_eq!(read(&[1, 7, 0, 0], Extent::Whole), Err(Fault::Trailing(2)));
        assert_eq!(read(&[1, 7, 0, 0], Extent::Prefix), Ok((2, 2)));
        assert_eq!(read(&[1], Extent::Prefix), Err(Fault::Short));
    }

    #[test]
    fn fields_out_of_order_land_in_order() {
        struct Backwards;
        impl<'t> Encode<'t> for Backwards {
            type Error = Fault;
            fn scalar(&mut self, p: Prim) -> Result<Scalar, Fault> {
                Ok(match p {
                    Prim::U8 => Scalar::U8(1),
                    _ => Scalar::U32(2),
                })
            }
            fn string(&mut self) -> Result<Cow<'_, str>, Fault> {
                Ok("s".into())
            }
            fn list(&mut self, _: &mut ListOut<'_, '_, 't>) -> Result<(), Fault> {
                Ok(())
            }
            fn tuple(&mut self, f: &mut FieldsOut<'_, '_, 't>) -> Result<(), Fault> {
                for k in (0..3).rev() {
                    f.field(k, self)?;
                }
                Ok(())
            }
            fn record(
                &mut self,
                _: &'t [(String, Ty)],
                _: &mut FieldsOut<'_, '_, 't>,
            ) -> Result<(), Fault> {
                Ok(())
            }
            fn case(&mut self, _: &mut CaseOut<'_, '_, 't>) -> Result<(), Fault> {
                Ok(())
            }
            fn flags(&mut self, _: &mut FlagsOut<'_>) -> Result<(), Fault> {
                Ok(())
            }
        }
        let plan = kv();
        let layout = Layout::new(&plan);
        let t = Ty::Tuple(vec![Ty::Prim(Prim::U8), Ty::String, Ty::Prim(Prim::U32)]);
        let mut out = vec![7];
        Writer::new(layout, &mut out)
            .write(&t, &mut Backwards)
            .expect("writes");
        assert_eq!(out, [7, 1, 1, 0, 0, 0, b's', 2, 0, 0, 0]);
        // A record whose source gives no field is refused, as is a case never chosen.
        let get = result_of(&plan, "get");
        let mut out = Vec::new();
        assert_eq!(
            Writer::new(layout, &mut out).write(get, &mut Backwards),
            Err(Fault::Mismatch)
        );
    }
}
