//! The two encodings of a value and the translation between them.
//!
//! * The **A-stack encoding** (`lrpc_presentation::plan`): packed little endian, fixed-width
//!   integers, `u32` lengths and counts, discriminants and flags sized by their case count.
//!   Guests' stubs and the driver domain speak it.
//! * The **wire encoding**, the component model's value encoding as wRPC writes it
//!   (`wrpc-transport` 0.30 over `wasm-tokio`): `bool`, `u8`, `s8` one byte; wider integers
//!   LEB128 (signed ones sign-extended); floats little endian; `char` its UTF-8 bytes;
//!   strings and lists a LEB128 `u32` length, then the bytes or elements; records and tuples
//!   their fields in order; `option` a byte 0/1, `result` a byte 0 (ok) / 1 (err), then the
//!   payload; enums and variants a LEB128 `u32` discriminant (then the payload); flags
//!   `ceil(n / 8)` bytes, least significant first. Parameters are one value after another;
//!   the result, when the function has one, is a single value.
//!
//! The A-stack side is walked by `lrpc_presentation::layout`: wire bytes are a source of
//! values for its writer (`FromWire`), and its reader's visitor writes the wire bytes
//! (`ToWire`).
//!
//! Everything read from the wire is untrusted and checked exactly like A-stack contents:
//! booleans, discriminants, flag bits, code points, UTF-8, LEB128 width and range, and lengths
//! against a size limit, before a byte of it reaches a domain. Running out of bytes is
//! [`CodecError::Incomplete`] (the rest may still arrive), never a panic.

use bytes::{BufMut as _, BytesMut};
use lrpc_presentation::layout::{
    CaseOut, Cases, Decode, Encode, Extent, Fault, FieldsOut, FlagsOut, Layout, ListOut, Reader,
    Scalar, Seq, Writer,
};
use lrpc_presentation::{InterfacePlan, Prim, Ty};
use std::borrow::Cow;

/// Why a value could not be translated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    /// The bytes end inside the value.
    #[error("the value ends early")]
    Incomplete,
    /// The bytes are not a value of the type.
    #[error("malformed value: {0}")]
    Malformed(&'static str),
    /// The value, or its translation, is larger than the limit.
    #[error("the value is larger than the limit of {0} bytes")]
    TooLarge(usize),
    /// Bytes follow the last value.
    #[error("{0} bytes follow the value")]
    Trailing(usize),
    /// The plan names a type it does not define.
    #[error("the interface plan has no type {0}")]
    UnknownType(usize),
}

impl From<Fault> for CodecError {
    fn from(f: Fault) -> CodecError {
        match f {
            Fault::TooLarge(n) => CodecError::TooLarge(n),
            Fault::UnknownType(i) => CodecError::UnknownType(i),
            Fault::Trailing(n) => CodecError::Trailing(n),
            f => CodecError::Malformed(f.reason()),
        }
    }
}

struct Src<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Src<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let end = self.at.checked_add(n).ok_or(CodecError::Incomplete)?;
        let s = self.bytes.get(self.at..end).ok_or(CodecError::Incomplete)?;
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, CodecError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        let mut a = [0; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    /// An unsigned LEB128 number of at most `bits` bits.
    fn uleb(&mut self, bits: u32) -> Result<u64, CodecError> {
        let mut v: u64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            let low = u64::from(b & 0x7f);
            if shift >= bits || (shift > 0 && bits - shift < 7 && low >> (bits - shift) != 0) {
                return Err(CodecError::Malformed("LEB128 number out of range"));
            }
            v |= low << shift;
            shift += 7;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
    }

    /// A signed LEB128 number of at most `bits` bits.
    fn sleb(&mut self, bits: u32) -> Result<i64, CodecError> {
        let mut v: i64 = 0;
        let mut shift = 0u32;
        loop {
            let b = self.byte()?;
            if shift >= bits {
                return Err(CodecError::Malformed("LEB128 number too long"));
            }
            v |= i64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                let min = -(1i128 << (bits - 1));
                let max = (1i128 << (bits - 1)) - 1;
                if i128::from(v) < min || i128::from(v) > max {
                    return Err(CodecError::Malformed("LEB128 number out of range"));
                }
                return Ok(v);
            }
        }
    }
}

/// Appends `v` in unsigned LEB128.
pub(crate) fn put_uleb(dst: &mut impl bytes::BufMut, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            dst.put_u8(b);
            return;
        }
        dst.put_u8(b | 0x80);
    }
}

fn put_sleb(dst: &mut BytesMut, mut v: i64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        let done = (v == 0 && b & 0x40 == 0) || (v == -1 && b & 0x40 != 0);
        if done {
            dst.put_u8(b);
            return;
        }
        dst.put_u8(b | 0x80);
    }
}

/// Translates wire values of types `tys` at the start of `src` into A-stack encoding.
/// Returns the encoding and how many bytes of `src` it used. `limit` bounds both the wire
/// bytes and the translation.
pub fn from_wire(
    plan: &InterfacePlan,
    tys: &[&Ty],
    src: &[u8],
    limit: usize,
) -> Result<(Vec<u8>, usize), CodecError> {
    let mut s = FromWire {
        src: Src { bytes: src, at: 0 },
        limit,
    };
    let mut dst = Vec::new();
    let mut w = Writer::new(Layout::new(plan), &mut dst).limit(limit);
    for t in tys {
        w.write(t, &mut s)?;
    }
    Ok((dst, s.src.at))
}

/// [`from_wire`] for a buffer that must hold exactly the values: bytes after them are
/// refused.
pub fn from_wire_whole(
    plan: &InterfacePlan,
    tys: &[&Ty],
    src: &[u8],
    limit: usize,
) -> Result<Vec<u8>, CodecError> {
    let (v, used) = from_wire(plan, tys, src, limit)?;
    Extent::Whole.check(src.len() - used)?;
    Ok(v)
}

/// Translates A-stack encoded values of types `tys` (all of `src`) into the wire encoding.
pub fn to_wire(plan: &InterfacePlan, tys: &[&Ty], src: &[u8]) -> Result<BytesMut, CodecError> {
    to_wire_extent(plan, tys, src, Extent::Whole)
}

/// Translates A-stack encoded values of types `tys` at the start of `src` into the wire
/// encoding, ignoring the bytes after them: the A-stack of a procedure of bounded size holds
/// its largest encoding, and a smaller value leaves bytes unused.
pub fn to_wire_prefix(
    plan: &InterfacePlan,
    tys: &[&Ty],
    src: &[u8],
) -> Result<BytesMut, CodecError> {
    to_wire_extent(plan, tys, src, Extent::Prefix)
}

/// Translates A-stack encoded values of types `tys` at the start of `src`, which they take
/// `extent` of, into the wire encoding ([`to_wire`] or [`to_wire_prefix`]).
pub fn to_wire_extent(
    plan: &InterfacePlan,
    tys: &[&Ty],
    src: &[u8],
    extent: Extent,
) -> Result<BytesMut, CodecError> {
    let mut dst = ToWire(BytesMut::with_capacity(src.len() + 8));
    Reader::new(Layout::new(plan), src).read_values(tys, &mut dst, extent)?;
    Ok(dst.0)
}

/// The source of an A-stack encoding: wire bytes, checked as they are read. Neither they nor
/// the encoding may grow beyond `limit` (the writer checks the encoding).
struct FromWire<'a> {
    src: Src<'a>,
    limit: usize,
}

impl FromWire<'_> {
    /// Refuses to read on past the limit: a value still incomplete there never completes.
    fn check(&self) -> Result<(), CodecError> {
        if self.src.at > self.limit {
            return Err(CodecError::TooLarge(self.limit));
        }
        Ok(())
    }

    /// A length or count, refused beyond the limit (each element takes a byte on the wire).
    fn len(&mut self) -> Result<usize, CodecError> {
        let n = self.src.uleb(32)? as usize;
        if n > self.limit {
            return Err(CodecError::TooLarge(self.limit));
        }
        Ok(n)
    }
}

impl<'t> Encode<'t> for FromWire<'_> {
    type Error = CodecError;

    fn scalar(&mut self, p: Prim) -> Result<Scalar, CodecError> {
        self.check()?;
        let src = &mut self.src;
        Ok(match p {
            Prim::Bool => match src.byte()? {
                0 => Scalar::Bool(false),
                1 => Scalar::Bool(true),
                _ => return Err(CodecError::Malformed("bool not 0 or 1")),
            },
            Prim::U8 => Scalar::U8(src.byte()?),
            Prim::S8 => Scalar::S8(src.byte()? as i8),
            Prim::U16 => Scalar::U16(src.uleb(16)? as u16),
            Prim::S16 => Scalar::S16(src.sleb(16)? as i16),
            Prim::U32 => Scalar::U32(src.uleb(32)? as u32),
            Prim::S32 => Scalar::S32(src.sleb(32)? as i32),
            Prim::U64 => Scalar::U64(src.uleb(64)?),
            Prim::S64 => Scalar::S64(src.sleb(64)?),
            Prim::F32 => Scalar::F32(f32::from_le_bytes(src.array()?)),
            Prim::F64 => Scalar::F64(f64::from_le_bytes(src.array()?)),
            Prim::Char => {
                let first = *src.bytes.get(src.at).ok_or(CodecError::Incomplete)?;
                let n = match first {
                    0x00..=0x7f => 1,
                    0xc2..=0xdf => 2,
                    0xe0..=0xef => 3,
                    0xf0..=0xf4 => 4,
                    _ => return Err(CodecError::Malformed("char: bad UTF-8")),
                };
                let s = std::str::from_utf8(src.take(n)?)
                    .map_err(|_| CodecError::Malformed("char: bad UTF-8"))?;
                Scalar::Char(s.chars().next().ok_or(CodecError::Malformed("char"))?)
            }
        })
    }

    fn string(&mut self) -> Result<Cow<'_, str>, CodecError> {
        self.check()?;
        let n = self.len()?;
        let b = self.src.take(n)?;
        let s = std::str::from_utf8(b).map_err(|_| CodecError::Malformed("string: bad UTF-8"))?;
        Ok(Cow::Borrowed(s))
    }

    fn list(&mut self, items: &mut ListOut<'_, '_, 't>) -> Result<(), CodecError> {
        self.check()?;
        let n = self.len()?;
        if matches!(items.element(), Ty::Prim(Prim::U8 | Prim::S8)) {
            items.bytes(self.src.take(n)?)?;
        } else {
            for _ in 0..n {
                items.item(self)?;
            }
        }
        Ok(())
    }

    fn tuple(&mut self, out: &mut FieldsOut<'_, '_, 't>) -> Result<(), CodecError> {
        out.rest(self)
    }

    fn record(
        &mut self,
        _: &'t [(String, Ty)],
        out: &mut FieldsOut<'_, '_, 't>,
    ) -> Result<(), CodecError> {
        out.rest(self)
    }

    fn case(&mut self, out: &mut CaseOut<'_, '_, 't>) -> Result<(), CodecError> {
        self.check()?;
        let k = match out.cases() {
            Cases::Option(_) | Cases::Result(..) => u64::from(self.src.byte()?),
            Cases::Enum(_) | Cases::Variant(_) => self.src.uleb(32)?,
        };
        if out.case(k as usize)?.is_some() {
            out.payload(self)?;
        }
        Ok(())
    }

    fn flags(&mut self, out: &mut FlagsOut<'_>) -> Result<(), CodecError> {
        self.check()?;
        let b = self.src.take(out.names().len().div_ceil(8))?;
        for (i, byte) in b.iter().enumerate() {
            for bit in (0..8).filter(|bit| byte & (1 << bit) != 0) {
                out.set(i * 8 + bit)?;
            }
        }
        Ok(())
    }
}

/// A visitor writing what it reads in the wire encoding.
struct ToWire(BytesMut);

impl<'t, 'b> Decode<'t, 'b> for ToWire {
    type Out = ();
    type Error = CodecError;

    fn scalar(&mut self, v: Scalar) -> Result<(), CodecError> {
        let dst = &mut self.0;
        match v {
            Scalar::Bool(b) => dst.put_u8(u8::from(b)),
            Scalar::U8(x) => dst.put_u8(x),
            Scalar::S8(x) => dst.put_i8(x),
            Scalar::U16(x) => put_uleb(dst, x.into()),
            Scalar::S16(x) => put_sleb(dst, x.into()),
            Scalar::U32(x) => put_uleb(dst, x.into()),
            Scalar::S32(x) => put_sleb(dst, x.into()),
            Scalar::U64(x) => put_uleb(dst, x),
            Scalar::S64(x) => put_sleb(dst, x),
            Scalar::F32(x) => dst.put_slice(&x.to_le_bytes()),
            Scalar::F64(x) => dst.put_slice(&x.to_le_bytes()),
            Scalar::Char(c) => {
                let mut b = [0; 4];
                dst.put_slice(c.encode_utf8(&mut b).as_bytes());
            }
        }
        Ok(())
    }

    fn string(&mut self, s: &'b str) -> Result<(), CodecError> {
        self.bytes(s.as_bytes())
    }

    fn bytes(&mut self, b: &'b [u8]) -> Result<(), CodecError> {
        put_uleb(&mut self.0, b.len() as u64);
        self.0.put_slice(b);
        Ok(())
    }

    fn list(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<(), CodecError> {
        put_uleb(&mut self.0, items.len() as u64);
        items.each(self)
    }

    fn tuple(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<(), CodecError> {
        items.each(self)
    }

    fn record(
        &mut self,
        _: &'t [(String, Ty)],
        values: &mut Seq<'_, 't, 'b>,
    ) -> Result<(), CodecError> {
        values.each(self)
    }

    fn case(
        &mut self,
        cases: Cases<'t>,
        k: usize,
        payload: &mut Seq<'_, 't, 'b>,
    ) -> Result<(), CodecError> {
        match cases {
            Cases::Option(_) | Cases::Result(..) => self.0.put_u8(k as u8),
            Cases::Enum(_) | Cases::Variant(_) => put_uleb(&mut self.0, k as u64),
        }
        payload.each(self)
    }

    fn flags(&mut self, names: &'t [String], bits: &'b [u8]) -> Result<(), CodecError> {
        self.0.put_slice(&bits[..names.len().div_ceil(8)]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv() -> InterfacePlan {
        let wit = lrpc_presentation::Wit::load_sources(&[(
            "kv.wit",
            include_str!("../../../wit/kv.wit"),
        )])
        .unwrap();
        wit.interface("lrpc:kv/store").unwrap()
    }

    fn leb_u(v: u64) -> Vec<u8> {
        let mut b = BytesMut::new();
        put_uleb(&mut b, v);
        b.to_vec()
    }

    fn leb_s(v: i64) -> Vec<u8> {
        let mut b = BytesMut::new();
        put_sleb(&mut b, v);
        b.to_vec()
    }

    #[test]
    fn leb128_round_trips_at_the_edges() {
        for v in [0u64, 1, 127, 128, 300, u32::MAX as u64, u64::MAX] {
            let b = leb_u(v);
            assert_eq!(Src { bytes: &b, at: 0 }.uleb(64), Ok(v));
        }
        for v in [
            0i64,
            -1,
            63,
            64,
            -64,
            -65,
            i32::MIN as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let b = leb_s(v);
            assert_eq!(Src { bytes: &b, at: 0 }.sleb(64), Ok(v), "{v}");
        }
        // Known encodings (the LEB128 examples of the WebAssembly spec).
        assert_eq!(leb_u(624485), [0xe5, 0x8e, 0x26]);
        assert_eq!(leb_s(-123456), [0xc0, 0xbb, 0x78]);
        // Out of range for the width.
        let b = leb_u(1 << 32);
        assert!(matches!(
            Src { bytes: &b, at: 0 }.uleb(32),
            Err(CodecError::Malformed(_))
        ));
        let b = leb_s(1 << 15);
        assert!(matches!(
            Src { bytes: &b, at: 0 }.sleb(16),
            Err(CodecError::Malformed(_))
        ));
        // Ends inside the number.
        assert_eq!(
            Src {
                bytes: &[0x80, 0x80],
                at: 0
            }
            .uleb(32),
            Err(CodecError::Incomplete)
        );
    }

    #[test]
    fn kv_measure_matches_the_wrpc_encoding() {
        let plan = kv();
        let p = plan.procs.iter().find(|p| p.name == "measure").unwrap();
        let tys: Vec<&Ty> = p.params.iter().map(|(_, t)| t).collect();
        // measure('é', -2, 1.5) in A-stack encoding.
        let mut a = Vec::new();
        a.extend_from_slice(&u32::from('é').to_le_bytes());
        a.extend_from_slice(&(-2i64).to_le_bytes());
        a.extend_from_slice(&1.5f64.to_le_bytes());
        let w = to_wire(&plan, &tys, &a).unwrap();
        let mut want = "é".as_bytes().to_vec();
        want.push(0x7e); // -2 as signed LEB128
        want.extend_from_slice(&1.5f64.to_le_bytes());
        assert_eq!(&w[..], &want[..]);
        let (back, used) = from_wire(&plan, &tys, &w, 1 << 20).unwrap();
        assert_eq!((back, used), (a, w.len()));
    }

    #[test]
    fn untrusted_wire_values_are_refused() {
        let plan = kv();
        let put = plan.procs.iter().find(|p| p.name == "put").unwrap();
        let tys: Vec<&Ty> = put.params.iter().map(|(_, t)| t).collect();
        // put("k", [1, 2], binary)
        let good = [1, b'k', 2, 1, 2, 1];
        let (a, used) = from_wire(&plan, &tys, &good, 1 << 20).unwrap();
        assert_eq!(used, good.len());
        assert_eq!(a, [1, 0, 0, 0, b'k', 2, 0, 0, 0, 1, 2, 1]);
        // Every prefix is incomplete, never an error or a panic.
        for n in 0..good.len() {
            assert_eq!(
                from_wire(&plan, &tys, &good[..n], 1 << 20),
                Err(CodecError::Incomplete),
                "{n}"
            );
        }
        // Enum discriminant past the cases.
        assert!(matches!(
            from_wire(&plan, &tys, &[1, b'k', 2, 1, 2, 2], 1 << 20),
            Err(CodecError::Malformed(_))
        ));
        // Bad UTF-8 in the key.
        assert!(matches!(
            from_wire(&plan, &tys, &[1, 0xff, 2, 1, 2, 1], 1 << 20),
            Err(CodecError::Malformed(_))
        ));
        // A length beyond the limit is refused before anything is read.
        assert_eq!(
            from_wire(&plan, &tys, &[0xff, 0xff, 0xff, 0x0f], 1024),
            Err(CodecError::TooLarge(1024))
        );
        // Unknown flag bits (rights: three flags) in a result.
        let rights = plan.procs.iter().find(|p| p.name == "rights").unwrap();
        let r = rights.result.as_ref().unwrap();
        assert!(from_wire(&plan, &[r], &[0b111], 16).is_ok());
        assert!(matches!(
            from_wire(&plan, &[r], &[0b1000], 16),
            Err(CodecError::Malformed(_))
        ));
    }

    #[test]
    fn every_kv_result_round_trips() {
        let plan = kv();
        let get = plan.procs.iter().find(|p| p.name == "get").unwrap();
        let r = get.result.as_ref().unwrap();
        // ok(entry { key: "ab", value: [9], kind: text, version: 300 })
        let mut a = vec![0];
        a.extend_from_slice(&2u32.to_le_bytes());
        a.extend_from_slice(b"ab");
        a.extend_from_slice(&1u32.to_le_bytes());
        a.push(9);
        a.push(0);
        a.extend_from_slice(&300u64.to_le_bytes());
        let w = to_wire(&plan, &[r], &a).unwrap();
        assert_eq!(&w[..], &[0, 2, b'a', b'b', 1, 9, 0, 0xac, 0x02]);
        assert_eq!(from_wire(&plan, &[r], &w, 1 << 20).unwrap().0, a);
        // err(denied(read | scan))
        let a = [1, 3, 0b101];
        let w = to_wire(&plan, &[r], &a).unwrap();
        assert_eq!(&w[..], &[1, 3, 0b101]);
        assert_eq!(from_wire(&plan, &[r], &w, 1 << 20).unwrap().0, a);
        // Trailing bytes in an A-stack encoding are refused.
        assert_eq!(
            to_wire(&plan, &[r], &[1, 2, 0]),
            Err(CodecError::Trailing(1))
        );
    }
}
