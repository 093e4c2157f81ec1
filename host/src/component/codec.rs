//! The A-stack encoding of component values: the one translation between the canonical
//! ABI's values (`wasmtime::component::Val`) and the packed layout an interface plan gives
//! (`lrpc_presentation::plan`, described in that module's documentation), used by both mixed
//! pairings — a core client calling a component server, and a component client calling a
//! core server. The layout is walked by `lrpc_presentation::layout`; this module only says
//! what a component value is at each node (`Put` as a source, `Get` as a visitor).
//!
//! Bytes read off an A-stack come from a guest and are untrusted: every length is checked
//! against the bytes that remain before anything is allocated for it, every `bool`, tag and
//! discriminant against its range, flag bits against the flags the type has, code points and
//! UTF-8 for validity, and the value must use every byte it was given. A failure is a
//! [`CodecError`], never a panic. Values from a component were lifted by the canonical ABI
//! against the same WIT; they are still checked against the plan's type, so a value of
//! another shape is refused rather than encoded wrongly.

use lrpc_presentation::layout::{
    CaseOut, Cases, Decode, Encode, Extent, Fault, FieldsOut, FlagsOut, Layout, ListOut, Reader,
    Scalar, Seq, Writer, flag_set,
};
use lrpc_presentation::{InterfacePlan, Prim, Ty};
use std::borrow::Cow;
use wasmtime::component::Val;

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

impl From<Fault> for CodecError {
    fn from(f: Fault) -> CodecError {
        match f {
            Fault::Short | Fault::Count(_) => CodecError::Short,
            Fault::TooLarge(_) => CodecError::TooLarge,
            Fault::Trailing(n) => CodecError::Trailing(n),
            f => CodecError::Malformed(f.reason()),
        }
    }
}

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
    let mut w = Writer::new(Layout::new(plan), out);
    for (t, v) in tys.iter().zip(vals) {
        w.write(t, &mut Put(v))?;
    }
    Ok(())
}

/// A result encoded for the A-stack: `head`, then `tail` (a byte list's bytes, written to
/// the client from the vector they were lifted into), or, when `landed` says how many,
/// `head` then bytes already lifted into the client's `out` segment right after it.
#[derive(Default)]
pub(crate) struct EncodedResult {
    pub(crate) head: Vec<u8>,
    pub(crate) tail: Vec<u8>,
    pub(crate) landed: Option<usize>,
}

/// The bytes in front of a byte list on an A-stack: its length.
pub(crate) const LIST_PREFIX: usize = 4;

/// Decodes values of types `tys` from all of `bytes`.
pub fn decode(plan: &InterfacePlan, tys: &[&Ty], bytes: &[u8]) -> Result<Vec<Val>, CodecError> {
    decode_extent(plan, tys, bytes, Extent::Whole)
}

/// Decodes values of types `tys` from the start of `bytes`, ignoring what follows them (an
/// A-stack of a bounded procedure holds its largest encoding; a smaller value leaves bytes
/// unused).
pub fn decode_prefix(
    plan: &InterfacePlan,
    tys: &[&Ty],
    bytes: &[u8],
) -> Result<Vec<Val>, CodecError> {
    decode_extent(plan, tys, bytes, Extent::Prefix)
}

/// Decodes values of types `tys` from the start of `bytes`, which they take `extent` of
/// ([`decode`] or [`decode_prefix`]).
pub fn decode_extent(
    plan: &InterfacePlan,
    tys: &[&Ty],
    bytes: &[u8],
    extent: Extent,
) -> Result<Vec<Val>, CodecError> {
    Reader::new(Layout::new(plan), bytes).read_values(tys, &mut Get, extent)
}

fn wrong() -> CodecError {
    CodecError::Malformed("a value of another type")
}

/// The source of a value's encoding: a component value, checked against the type.
struct Put<'v>(&'v Val);

impl<'t> Encode<'t> for Put<'_> {
    type Error = CodecError;

    fn scalar(&mut self, p: Prim) -> Result<Scalar, CodecError> {
        Ok(match (p, self.0) {
            (Prim::Bool, Val::Bool(b)) => Scalar::Bool(*b),
            (Prim::U8, Val::U8(x)) => Scalar::U8(*x),
            (Prim::S8, Val::S8(x)) => Scalar::S8(*x),
            (Prim::U16, Val::U16(x)) => Scalar::U16(*x),
            (Prim::S16, Val::S16(x)) => Scalar::S16(*x),
            (Prim::U32, Val::U32(x)) => Scalar::U32(*x),
            (Prim::S32, Val::S32(x)) => Scalar::S32(*x),
            (Prim::U64, Val::U64(x)) => Scalar::U64(*x),
            (Prim::S64, Val::S64(x)) => Scalar::S64(*x),
            (Prim::F32, Val::Float32(x)) => Scalar::F32(*x),
            (Prim::F64, Val::Float64(x)) => Scalar::F64(*x),
            (Prim::Char, Val::Char(c)) => Scalar::Char(*c),
            _ => return Err(wrong()),
        })
    }

    fn string(&mut self) -> Result<Cow<'_, str>, CodecError> {
        match self.0 {
            Val::String(s) => Ok(Cow::Borrowed(s)),
            _ => Err(wrong()),
        }
    }

    fn list(&mut self, items: &mut ListOut<'_, '_, 't>) -> Result<(), CodecError> {
        let Val::List(xs) = self.0 else {
            return Err(wrong());
        };
        if items.is_bytes() {
            // Bytes go out a chunk at a time: one writer call per byte would cost more than
            // the copy.
            let mut chunk = [0u8; 512];
            for part in xs.chunks(chunk.len()) {
                for (c, x) in chunk.iter_mut().zip(part) {
                    match x {
                        Val::U8(b) => *c = *b,
                        _ => return Err(wrong()),
                    }
                }
                items.bytes(&chunk[..part.len()])?;
            }
        } else {
            for x in xs {
                items.item(&mut Put(x))?;
            }
        }
        Ok(())
    }

    fn tuple(&mut self, out: &mut FieldsOut<'_, '_, 't>) -> Result<(), CodecError> {
        let Val::Tuple(xs) = self.0 else {
            return Err(wrong());
        };
        for (k, x) in xs.iter().enumerate() {
            out.field(k, &mut Put(x))?;
        }
        Ok(())
    }

    fn record(
        &mut self,
        fields: &'t [(String, Ty)],
        out: &mut FieldsOut<'_, '_, 't>,
    ) -> Result<(), CodecError> {
        let Val::Record(xs) = self.0 else {
            return Err(wrong());
        };
        if xs.len() != fields.len() {
            return Err(wrong());
        }
        for (k, ((name, _), (n, x))) in fields.iter().zip(xs).enumerate() {
            if name != n {
                return Err(CodecError::Malformed("a record field of another name"));
            }
            out.field(k, &mut Put(x))?;
        }
        Ok(())
    }

    fn case(&mut self, out: &mut CaseOut<'_, '_, 't>) -> Result<(), CodecError> {
        let cases = out.cases();
        let (k, x) = match (cases, self.0) {
            (Cases::Option(_), Val::Option(x)) => (usize::from(x.is_some()), x.as_deref()),
            (Cases::Result(..), Val::Result(Ok(x))) => (0, x.as_deref()),
            (Cases::Result(..), Val::Result(Err(x))) => (1, x.as_deref()),
            (Cases::Enum(_), Val::Enum(c)) => (cases.find(c).ok_or_else(wrong)?, None),
            (Cases::Variant(_), Val::Variant(c, x)) => {
                (cases.find(c).ok_or_else(wrong)?, x.as_deref())
            }
            _ => return Err(wrong()),
        };
        match (out.case(k)?, x) {
            (Some(_), Some(x)) => out.payload(&mut Put(x)),
            (None, None) => Ok(()),
            _ => Err(wrong()),
        }
    }

    fn flags(&mut self, out: &mut FlagsOut<'_>) -> Result<(), CodecError> {
        let Val::Flags(set) = self.0 else {
            return Err(wrong());
        };
        for f in set {
            let k = out.names().iter().position(|n| n == f).ok_or_else(wrong)?;
            out.set(k)?;
        }
        Ok(())
    }
}

/// A visitor making component values of what it reads.
struct Get;

impl Get {
    fn boxed<'t, 'b>(
        &mut self,
        payload: &mut Seq<'_, 't, 'b>,
    ) -> Result<Option<Box<Val>>, CodecError> {
        Ok(payload.next(self).transpose()?.map(Box::new))
    }
}

impl<'t, 'b> Decode<'t, 'b> for Get {
    type Out = Val;
    type Error = CodecError;

    fn scalar(&mut self, v: Scalar) -> Result<Val, CodecError> {
        Ok(match v {
            Scalar::Bool(b) => Val::Bool(b),
            Scalar::U8(x) => Val::U8(x),
            Scalar::S8(x) => Val::S8(x),
            Scalar::U16(x) => Val::U16(x),
            Scalar::S16(x) => Val::S16(x),
            Scalar::U32(x) => Val::U32(x),
            Scalar::S32(x) => Val::S32(x),
            Scalar::U64(x) => Val::U64(x),
            Scalar::S64(x) => Val::S64(x),
            Scalar::F32(x) => Val::Float32(x),
            Scalar::F64(x) => Val::Float64(x),
            Scalar::Char(c) => Val::Char(c),
        })
    }

    fn string(&mut self, s: &'b str) -> Result<Val, CodecError> {
        Ok(Val::String(s.to_string()))
    }

    fn bytes(&mut self, b: &'b [u8]) -> Result<Val, CodecError> {
        Ok(Val::List(b.iter().map(|&b| Val::U8(b)).collect()))
    }

    fn list(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<Val, CodecError> {
        let mut xs = Vec::with_capacity(items.len());
        while let Some(x) = items.next(self) {
            xs.push(x?);
        }
        Ok(Val::List(xs))
    }

    fn tuple(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<Val, CodecError> {
        let mut xs = Vec::with_capacity(items.len());
        while let Some(x) = items.next(self) {
            xs.push(x?);
        }
        Ok(Val::Tuple(xs))
    }

    fn record(
        &mut self,
        fields: &'t [(String, Ty)],
        values: &mut Seq<'_, 't, 'b>,
    ) -> Result<Val, CodecError> {
        let mut xs = Vec::with_capacity(fields.len());
        for (name, _) in fields {
            if let Some(x) = values.next(self) {
                xs.push((name.clone(), x?));
            }
        }
        Ok(Val::Record(xs))
    }

    fn case(
        &mut self,
        cases: Cases<'t>,
        k: usize,
        payload: &mut Seq<'_, 't, 'b>,
    ) -> Result<Val, CodecError> {
        Ok(match cases {
            Cases::Option(_) => Val::Option(self.boxed(payload)?),
            Cases::Result(..) if k == 0 => Val::Result(Ok(self.boxed(payload)?)),
            Cases::Result(..) => Val::Result(Err(self.boxed(payload)?)),
            Cases::Enum(_) => Val::Enum(cases.name(k).to_string()),
            Cases::Variant(_) => Val::Variant(cases.name(k).to_string(), self.boxed(payload)?),
        })
    }

    fn flags(&mut self, names: &'t [String], bits: &'b [u8]) -> Result<Val, CodecError> {
        let set = names
            .iter()
            .enumerate()
            .filter(|(k, _)| flag_set(bits, *k))
            .map(|(_, n)| n.clone())
            .collect();
        Ok(Val::Flags(set))
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// The plan of `lrpc:kv/store`.
    pub(in super::super) fn kv() -> InterfacePlan {
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
