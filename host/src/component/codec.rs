//! The A-stack encoding of component values: the one translation between the canonical
//! ABI's values (`wasmtime::component::Val`) and the packed layout an interface plan gives
//! (`lrpc_presentation::plan`, described in that module's documentation), used by both mixed
//! pairings — a core client calling a component server, and a component client calling a
//! core server.
//!
//! Bytes read off an A-stack come from a guest and are untrusted: every length is checked
//! against the bytes that remain before anything is allocated for it, every `bool`, tag and
//! discriminant against its range, flag bits against the flags the type has, code points and
//! UTF-8 for validity, and the value must use every byte it was given. A failure is a
//! [`CodecError`], never a panic. Values from a component were lifted by the canonical ABI
//! against the same WIT; they are still checked against the plan's type, so a value of
//! another shape is refused rather than encoded wrongly.

use lrpc_presentation::plan::{discriminant_size, flags_size};
use lrpc_presentation::{DefKind, InterfacePlan, Prim, Ty};
use wasmtime::StoreContext;
use wasmtime::component::{Val, WasmList};

/// Why a value could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The bytes end inside the value.
    #[error("the encoding ends early")]
    Short,
    /// The bytes are not a value of the type, or the value is not of the type.
    #[error("malformed value: {0}")]
    Malformed(&'static str),
    /// Bytes follow the last value.
    #[error("{0} bytes follow the value")]
    Trailing(usize),
    /// The encoding would be larger than the A-stack encoding can describe (4 GiB).
    #[error("the value is too large to encode")]
    TooLarge,
}

/// Most elements a list of elements without bytes (empty tuples or records) may have: such
/// a list's length is not bounded by the bytes that carry it.
const MAX_EMPTY_ELEMENTS: usize = 1 << 16;

/// Encodes `vals` (one per type of `tys`, in order) onto `out`, as the plan lays them out.
pub fn encode(
    plan: &InterfacePlan,
    tys: &[&Ty],
    vals: &[Val],
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    if tys.len() != vals.len() {
        return Err(CodecError::Malformed("wrong number of values"));
    }
    for (t, v) in tys.iter().zip(vals) {
        put(plan, t, v, out)?;
    }
    Ok(())
}

/// Decodes values of types `tys` from all of `bytes`.
pub fn decode(plan: &InterfacePlan, tys: &[&Ty], bytes: &[u8]) -> Result<Vec<Val>, CodecError> {
    let mut src = Src { bytes, at: 0 };
    let mut vals = Vec::with_capacity(tys.len());
    for t in tys {
        vals.push(get(plan, t, &mut src)?);
    }
    match bytes.len() - src.at {
        0 => Ok(vals),
        n => Err(CodecError::Trailing(n)),
    }
}

/// Decodes values of types `tys` from the start of `bytes`, ignoring what follows them (an
/// A-stack of a bounded procedure holds its largest encoding; a smaller value leaves bytes
/// unused).
pub fn decode_prefix(
    plan: &InterfacePlan,
    tys: &[&Ty],
    bytes: &[u8],
) -> Result<Vec<Val>, CodecError> {
    let mut src = Src { bytes, at: 0 };
    tys.iter().map(|t| get(plan, t, &mut src)).collect()
}

fn def(plan: &InterfacePlan, i: usize) -> Result<&DefKind, CodecError> {
    plan.defs
        .get(i)
        .map(|d| &d.kind)
        .ok_or(CodecError::Malformed("the plan has no such type"))
}

fn len32(n: usize) -> Result<[u8; 4], CodecError> {
    u32::try_from(n)
        .map(u32::to_le_bytes)
        .map_err(|_| CodecError::TooLarge)
}

fn put_disc(out: &mut Vec<u8>, d: usize, cases: usize) {
    match discriminant_size(cases) {
        1 => out.push(d as u8),
        2 => out.extend_from_slice(&(d as u16).to_le_bytes()),
        _ => out.extend_from_slice(&(d as u32).to_le_bytes()),
    }
}

fn put(plan: &InterfacePlan, ty: &Ty, v: &Val, out: &mut Vec<u8>) -> Result<(), CodecError> {
    let wrong = || CodecError::Malformed("a value of another type");
    match (ty, v) {
        (Ty::Prim(p), v) => match (p, v) {
            (Prim::Bool, Val::Bool(b)) => out.push(u8::from(*b)),
            (Prim::U8, Val::U8(x)) => out.push(*x),
            (Prim::S8, Val::S8(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::U16, Val::U16(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::S16, Val::S16(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::U32, Val::U32(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::S32, Val::S32(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::U64, Val::U64(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::S64, Val::S64(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::F32, Val::Float32(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::F64, Val::Float64(x)) => out.extend_from_slice(&x.to_le_bytes()),
            (Prim::Char, Val::Char(c)) => out.extend_from_slice(&u32::from(*c).to_le_bytes()),
            _ => return Err(wrong()),
        },
        (Ty::String, Val::String(s)) => {
            out.extend_from_slice(&len32(s.len())?);
            out.extend_from_slice(s.as_bytes());
        }
        (Ty::List(t), Val::List(items)) => {
            out.extend_from_slice(&len32(items.len())?);
            if **t == Ty::Prim(Prim::U8) {
                out.reserve(items.len());
                for x in items {
                    match x {
                        Val::U8(b) => out.push(*b),
                        _ => return Err(wrong()),
                    }
                }
            } else {
                for x in items {
                    put(plan, t, x, out)?;
                }
            }
        }
        (Ty::Tuple(ts), Val::Tuple(xs)) if ts.len() == xs.len() => {
            for (t, x) in ts.iter().zip(xs) {
                put(plan, t, x, out)?;
            }
        }
        (Ty::Option(t), Val::Option(x)) => match x {
            None => out.push(0),
            Some(x) => {
                out.push(1);
                put(plan, t, x, out)?;
            }
        },
        (Ty::Result(ok, err), Val::Result(r)) => {
            let (tag, t, x) = match r {
                Ok(x) => (0, ok, x),
                Err(x) => (1, err, x),
            };
            out.push(tag);
            match (t, x) {
                (Some(t), Some(x)) => put(plan, t, x, out)?,
                (None, None) => {}
                _ => return Err(wrong()),
            }
        }
        (Ty::Named(i), v) => match (def(plan, *i)?, v) {
            (DefKind::Record(fields), Val::Record(xs)) if fields.len() == xs.len() => {
                for ((name, t), (n, x)) in fields.iter().zip(xs) {
                    if name != n {
                        return Err(CodecError::Malformed("a record field of another name"));
                    }
                    put(plan, t, x, out)?;
                }
            }
            (DefKind::Enum(cases), Val::Enum(c)) => {
                let d = cases.iter().position(|x| x == c).ok_or_else(wrong)?;
                put_disc(out, d, cases.len());
            }
            (DefKind::Variant(cases), Val::Variant(c, x)) => {
                let d = cases.iter().position(|(n, _)| n == c).ok_or_else(wrong)?;
                put_disc(out, d, cases.len());
                match (&cases[d].1, x) {
                    (Some(t), Some(x)) => put(plan, t, x, out)?,
                    (None, None) => {}
                    _ => return Err(wrong()),
                }
            }
            (DefKind::Flags(names), Val::Flags(set)) => {
                let at = out.len();
                out.resize(at + flags_size(names.len()), 0);
                for f in set {
                    let i = names.iter().position(|n| n == f).ok_or_else(wrong)?;
                    out[at + i / 8] |= 1 << (i % 8);
                }
            }
            _ => return Err(wrong()),
        },
        _ => return Err(wrong()),
    }
    Ok(())
}

struct Src<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Src<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self.at.checked_add(n).ok_or(CodecError::Short)?;
        let s = self.bytes.get(self.at..end).ok_or(CodecError::Short)?;
        self.at = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn byte(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A length-prefixed count of elements of at least `min` bytes each, checked against the
    /// bytes that remain.
    fn count(&mut self, min: usize) -> Result<usize, CodecError> {
        let n = self.u32()? as usize;
        let left = self.bytes.len() - self.at;
        let fits = match min {
            0 => n <= MAX_EMPTY_ELEMENTS,
            m => n <= left / m,
        };
        if fits { Ok(n) } else { Err(CodecError::Short) }
    }

    fn disc(&mut self, cases: usize) -> Result<usize, CodecError> {
        let d = match discriminant_size(cases) {
            1 => u32::from(self.byte()?),
            2 => u32::from(u16::from_le_bytes(self.array()?)),
            _ => self.u32()?,
        } as usize;
        if d < cases {
            Ok(d)
        } else {
            Err(CodecError::Malformed("discriminant out of range"))
        }
    }
}

fn tag(src: &mut Src<'_>, what: &'static str) -> Result<bool, CodecError> {
    match src.byte()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(CodecError::Malformed(what)),
    }
}

fn boxed(plan: &InterfacePlan, t: &Ty, src: &mut Src<'_>) -> Result<Box<Val>, CodecError> {
    get(plan, t, src).map(Box::new)
}

fn get(plan: &InterfacePlan, ty: &Ty, src: &mut Src<'_>) -> Result<Val, CodecError> {
    Ok(match ty {
        Ty::Prim(p) => match p {
            Prim::Bool => Val::Bool(tag(src, "bool not 0 or 1")?),
            Prim::U8 => Val::U8(src.byte()?),
            Prim::S8 => Val::S8(i8::from_le_bytes(src.array()?)),
            Prim::U16 => Val::U16(u16::from_le_bytes(src.array()?)),
            Prim::S16 => Val::S16(i16::from_le_bytes(src.array()?)),
            Prim::U32 => Val::U32(src.u32()?),
            Prim::S32 => Val::S32(i32::from_le_bytes(src.array()?)),
            Prim::U64 => Val::U64(u64::from_le_bytes(src.array()?)),
            Prim::S64 => Val::S64(i64::from_le_bytes(src.array()?)),
            Prim::F32 => Val::Float32(f32::from_le_bytes(src.array()?)),
            Prim::F64 => Val::Float64(f64::from_le_bytes(src.array()?)),
            Prim::Char => Val::Char(
                char::from_u32(src.u32()?)
                    .ok_or(CodecError::Malformed("char not a Unicode scalar value"))?,
            ),
        },
        Ty::String => {
            let n = src.count(1)?;
            let s = std::str::from_utf8(src.take(n)?)
                .map_err(|_| CodecError::Malformed("string: bad UTF-8"))?;
            Val::String(s.to_string())
        }
        Ty::List(t) => {
            let n = src.count(plan.min_size(t))?;
            if **t == Ty::Prim(Prim::U8) {
                Val::List(src.take(n)?.iter().map(|&b| Val::U8(b)).collect())
            } else {
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(get(plan, t, src)?);
                }
                Val::List(items)
            }
        }
        Ty::Tuple(ts) => Val::Tuple(
            ts.iter()
                .map(|t| get(plan, t, src))
                .collect::<Result<_, _>>()?,
        ),
        Ty::Option(t) => Val::Option(match tag(src, "option tag not 0 or 1")? {
            false => None,
            true => Some(boxed(plan, t, src)?),
        }),
        Ty::Result(ok, err) => {
            let is_err = tag(src, "result tag not 0 or 1")?;
            let t = if is_err { err } else { ok };
            let x = t.as_ref().map(|t| boxed(plan, t, src)).transpose()?;
            Val::Result(if is_err { Err(x) } else { Ok(x) })
        }
        Ty::Named(i) => match def(plan, *i)? {
            DefKind::Record(fields) => Val::Record(
                fields
                    .iter()
                    .map(|(n, t)| Ok((n.clone(), get(plan, t, src)?)))
                    .collect::<Result<_, CodecError>>()?,
            ),
            DefKind::Enum(cases) => Val::Enum(cases[src.disc(cases.len())?].clone()),
            DefKind::Variant(cases) => {
                let (name, t) = &cases[src.disc(cases.len())?];
                let x = t.as_ref().map(|t| boxed(plan, t, src)).transpose()?;
                Val::Variant(name.clone(), x)
            }
            DefKind::Flags(names) => {
                let bytes = src.take(flags_size(names.len()))?;
                let mut set = Vec::new();
                for (i, b) in bytes.iter().enumerate() {
                    for bit in 0..8 {
                        if b & (1 << bit) != 0 {
                            let name = names
                                .get(i * 8 + bit)
                                .ok_or(CodecError::Malformed("unknown flag bits"))?;
                            set.push(name.clone());
                        }
                    }
                }
                Val::Flags(set)
            }
        },
    })
}

/// A value the typed paths carry (`u32`, `u64`, `string`, `list<u8>`), encoded and decoded
/// in the same layout as [`encode`] and [`decode`] without going through `Val`s.
pub(crate) trait Flat: Sized {
    /// Appends the encoding.
    fn put(&self, out: &mut Vec<u8>);
    /// The bytes after the length prefix of a string or byte list (written straight from
    /// the value, without an intermediate copy, when it is the last parameter).
    fn tail(&self) -> Option<&[u8]> {
        None
    }
    /// Takes a value off the front of `src` (untrusted bytes).
    fn get(src: &mut &[u8]) -> Option<Self>;
}

fn take<'a>(src: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = src.split_at_checked(n)?;
    *src = rest;
    Some(head)
}

impl Flat for u32 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(src: &mut &[u8]) -> Option<u32> {
        Some(u32::from_le_bytes(take(src, 4)?.try_into().ok()?))
    }
}

impl Flat for u64 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(src: &mut &[u8]) -> Option<u64> {
        Some(u64::from_le_bytes(take(src, 8)?.try_into().ok()?))
    }
}

impl Flat for Vec<u8> {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.len() as u32).to_le_bytes());
        out.extend_from_slice(self);
    }
    fn tail(&self) -> Option<&[u8]> {
        Some(self)
    }
    fn get(src: &mut &[u8]) -> Option<Vec<u8>> {
        let n = u32::get(src)? as usize;
        Some(take(src, n)?.to_vec())
    }
}

impl Flat for String {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.len() as u32).to_le_bytes());
        out.extend_from_slice(self.as_bytes());
    }
    fn tail(&self) -> Option<&[u8]> {
        Some(self.as_bytes())
    }
    fn get(src: &mut &[u8]) -> Option<String> {
        let n = u32::get(src)? as usize;
        std::str::from_utf8(take(src, n)?).ok().map(str::to_string)
    }
}

/// A parameter of a typed function as the host function received it: an owned value (any
/// [`Flat`]), or a byte list still in the calling component's memory (`WasmList<u8>`, read
/// through `store`, the caller's store). Encoded in the layout of [`Flat::put`].
pub(crate) trait FlatIn {
    /// Appends the encoding.
    fn put_in<D: 'static>(&self, store: &StoreContext<'_, D>, out: &mut Vec<u8>);
    /// The bytes after the length prefix of a string or byte list, written straight from
    /// where they are when the value is the last parameter.
    fn tail_in<'a, D: 'static>(&'a self, store: &'a StoreContext<'_, D>) -> Option<&'a [u8]>;
}

impl<T: Flat> FlatIn for T {
    fn put_in<D: 'static>(&self, _: &StoreContext<'_, D>, out: &mut Vec<u8>) {
        self.put(out);
    }
    fn tail_in<'a, D: 'static>(&'a self, _: &'a StoreContext<'_, D>) -> Option<&'a [u8]> {
        self.tail()
    }
}

impl FlatIn for WasmList<u8> {
    fn put_in<D: 'static>(&self, store: &StoreContext<'_, D>, out: &mut Vec<u8>) {
        let b = self.as_le_slice(store);
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    fn tail_in<'a, D: 'static>(&'a self, store: &'a StoreContext<'_, D>) -> Option<&'a [u8]> {
        Some(self.as_le_slice(store))
    }
}

/// The parameters of a typed function: `()`, `(A,)` or `(A, B)`.
pub(crate) trait FlatParams: Sized {
    /// Encodes all but the last value's data into `head`; returns that data (see
    /// [`FlatIn::tail_in`]), to be written after `head`. `store` is the caller's.
    fn split<'a, D: 'static>(
        &'a self,
        store: &'a StoreContext<'_, D>,
        head: &mut Vec<u8>,
    ) -> &'a [u8];
}

/// The result of a typed function: `()` or `(A,)` (or a pair).
pub(crate) trait FlatList: Sized {
    /// Decodes from `src`; with `exact`, every byte must be used.
    fn get(src: &[u8], exact: bool) -> Option<Self>;
}

/// The last value: its length prefix into `head` and its data apart, or all of it into
/// `head`.
fn split_last<'a, T: FlatIn, D: 'static>(
    v: &'a T,
    store: &'a StoreContext<'_, D>,
    head: &mut Vec<u8>,
) -> Result<&'a [u8], ()> {
    match v.tail_in(store) {
        Some(t) if u32::try_from(t.len()).is_ok() => {
            head.extend_from_slice(&(t.len() as u32).to_le_bytes());
            Ok(t)
        }
        Some(_) => Err(()),
        None => {
            v.put_in(store, head);
            Ok(&[])
        }
    }
}

impl FlatParams for () {
    fn split<'a, D: 'static>(&'a self, _: &'a StoreContext<'_, D>, _: &mut Vec<u8>) -> &'a [u8] {
        &[]
    }
}

impl FlatList for () {
    fn get(src: &[u8], exact: bool) -> Option<()> {
        (!exact || src.is_empty()).then_some(())
    }
}

impl<A: FlatIn> FlatParams for (A,) {
    fn split<'a, D: 'static>(
        &'a self,
        store: &'a StoreContext<'_, D>,
        head: &mut Vec<u8>,
    ) -> &'a [u8] {
        split_last(&self.0, store, head).unwrap_or(&[])
    }
}

impl<A: Flat> FlatList for (A,) {
    fn get(mut src: &[u8], exact: bool) -> Option<(A,)> {
        let a = A::get(&mut src)?;
        (!exact || src.is_empty()).then_some((a,))
    }
}

impl<A: FlatIn, B: FlatIn> FlatParams for (A, B) {
    fn split<'a, D: 'static>(
        &'a self,
        store: &'a StoreContext<'_, D>,
        head: &mut Vec<u8>,
    ) -> &'a [u8] {
        self.0.put_in(store, head);
        split_last(&self.1, store, head).unwrap_or(&[])
    }
}

impl<A: Flat, B: Flat> FlatList for (A, B) {
    fn get(mut src: &[u8], exact: bool) -> Option<(A, B)> {
        let a = A::get(&mut src)?;
        let b = B::get(&mut src)?;
        (!exact || src.is_empty()).then_some((a, b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv() -> InterfacePlan {
        let w = lrpc_presentation::Wit::load_sources(&[(
            "kv.wit",
            include_str!("../../../wit/kv.wit"),
        )])
        .expect("kv.wit");
        w.interface("lrpc:kv/store").expect("plan")
    }

    fn tys(plan: &InterfacePlan, f: &str) -> (Vec<Ty>, Option<Ty>) {
        let p = plan.procs.iter().find(|p| p.name == f).expect("function");
        (
            p.params.iter().map(|(_, t)| t.clone()).collect(),
            p.result.clone(),
        )
    }

    fn round_trip(plan: &InterfacePlan, t: &Ty, v: Val) -> Vec<u8> {
        let mut out = Vec::new();
        encode(plan, &[t], std::slice::from_ref(&v), &mut out).expect("encode");
        assert_eq!(decode(plan, &[t], &out).expect("decode"), vec![v]);
        out
    }

    #[test]
    fn kv_values_round_trip_in_the_plan_layout() {
        let plan = kv();
        let (params, _) = tys(&plan, "put");
        let vals = [
            Val::String("ключ ✓".into()),
            Val::List(vec![Val::U8(1), Val::U8(255)]),
            Val::Enum("binary".into()),
        ];
        let mut out = Vec::new();
        let refs: Vec<&Ty> = params.iter().collect();
        encode(&plan, &refs, &vals, &mut out).expect("encode");
        let key = "ключ ✓".as_bytes();
        let mut want = (key.len() as u32).to_le_bytes().to_vec();
        want.extend_from_slice(key);
        want.extend_from_slice(&[2, 0, 0, 0, 1, 255, 1]);
        assert_eq!(out, want);
        assert_eq!(decode(&plan, &refs, &out).expect("decode"), vals);

        let (_, get) = tys(&plan, "get");
        let get = get.expect("result");
        let entry = Val::Record(vec![
            ("key".into(), Val::String("k".into())),
            ("value".into(), Val::List(vec![Val::U8(7)])),
            ("kind".into(), Val::Enum("text".into())),
            ("version".into(), Val::U64(u64::MAX)),
        ]);
        round_trip(&plan, &get, Val::Result(Ok(Some(Box::new(entry)))));
        let denied = Val::Variant(
            "denied".into(),
            Some(Box::new(Val::Flags(vec!["read".into(), "scan".into()]))),
        );
        let b = round_trip(&plan, &get, Val::Result(Err(Some(Box::new(denied)))));
        assert_eq!(b, [1, 3, 0b101]);
        let (_, keys) = tys(&plan, "keys");
        round_trip(
            &plan,
            &keys.expect("result"),
            Val::List(vec![Val::String(String::new()), Val::String("é".into())]),
        );
        let (params, result) = tys(&plan, "measure");
        round_trip(&plan, &params[0], Val::Char('𝄞'));
        round_trip(
            &plan,
            &result.expect("result"),
            Val::Tuple(vec![Val::Char('\0'), Val::S64(-1), Val::Float64(1.5)]),
        );
    }

    #[test]
    fn the_typed_encoding_is_the_same() {
        let plan = kv();
        let (params, _) = tys(&plan, "put");
        let v = (String::from("ключ"), vec![1u8, 2, 3]);
        let mut head = Vec::new();
        let store = wasmtime::Store::new(&wasmtime::Engine::default(), ());
        let ctx = wasmtime::AsContext::as_context(&store);
        let tail = v.split(&ctx, &mut head);
        let mut typed = head.clone();
        typed.extend_from_slice(tail);
        let mut dynamic = Vec::new();
        encode(
            &plan,
            &[&params[0], &params[1]],
            &[
                Val::String("ключ".into()),
                Val::List(vec![Val::U8(1), Val::U8(2), Val::U8(3)]),
            ],
            &mut dynamic,
        )
        .expect("encode");
        assert_eq!(typed, dynamic);
        assert_eq!(<(String, Vec<u8>)>::get(&typed, true), Some(v));
        assert_eq!(<(u32,)>::get(&[1, 0, 0, 0, 9], true), None);
        assert_eq!(<(u32,)>::get(&[1, 0, 0, 0, 9], false), Some((1,)));
        assert_eq!(<(String,)>::get(&[1, 0, 0, 0, 0xff], true), None);
        assert_eq!(<(Vec<u8>,)>::get(&[9, 0, 0, 0, 1], true), None);
    }

    #[test]
    fn untrusted_bytes_are_refused() {
        let plan = kv();
        let (_, get) = tys(&plan, "get");
        let get = get.expect("result");
        let t = [&get];
        // A result tag of 2, a variant case past the last, unknown flag bits.
        assert!(decode(&plan, &t, &[2]).is_err());
        assert!(decode(&plan, &t, &[1, 4]).is_err());
        assert!(decode(&plan, &t, &[1, 3, 0b1000]).is_err());
        // A string longer than the bytes, bad UTF-8, trailing bytes.
        assert_eq!(
            decode(&plan, &[&Ty::String], &[5, 0, 0, 0, b'a']),
            Err(CodecError::Short)
        );
        assert!(decode(&plan, &[&Ty::String], &[1, 0, 0, 0, 0xff]).is_err());
        assert_eq!(
            decode(&plan, &[&Ty::String], &[0, 0, 0, 0, 9]),
            Err(CodecError::Trailing(1))
        );
        // A huge list count is refused before anything is allocated for it.
        let list = Ty::List(Box::new(Ty::String));
        assert_eq!(
            decode(&plan, &[&list], &[0xff, 0xff, 0xff, 0xff]),
            Err(CodecError::Short)
        );
        // A code point that is a surrogate, a bool that is not 0 or 1.
        let c = Ty::Prim(Prim::Char);
        assert!(decode(&plan, &[&c], &0xd800u32.to_le_bytes()).is_err());
        assert!(decode(&plan, &[&Ty::Prim(Prim::Bool)], &[2]).is_err());
        // A value of another shape is not encoded.
        let mut out = Vec::new();
        assert!(encode(&plan, &[&Ty::String], &[Val::U32(1)], &mut out).is_err());
    }
}
