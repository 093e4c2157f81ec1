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
//! Everything read from the wire is untrusted and checked exactly like A-stack contents:
//! booleans, discriminants, flag bits, code points, UTF-8, LEB128 width and range, and lengths
//! against a size limit, before a byte of it reaches a domain. Running out of bytes is
//! [`CodecError::Incomplete`] (the rest may still arrive), never a panic.

use bytes::{BufMut as _, BytesMut};
use lrpc_presentation::plan::{discriminant_size, flags_size};
use lrpc_presentation::{DefKind, InterfacePlan, Prim, Ty};

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

    fn remaining(&self) -> usize {
        self.bytes.len() - self.at
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

fn def(plan: &InterfacePlan, i: usize) -> Result<&DefKind, CodecError> {
    plan.defs
        .get(i)
        .map(|d| &d.kind)
        .ok_or(CodecError::UnknownType(i))
}

fn check_flags(bytes: &[u8], n: usize) -> Result<(), CodecError> {
    for (i, b) in bytes.iter().enumerate() {
        let first = i * 8;
        let allowed: u8 = if first + 8 <= n {
            0xff
        } else if first >= n {
            0
        } else {
            (1u8 << (n - first)) - 1
        };
        if b & !allowed != 0 {
            return Err(CodecError::Malformed("unknown flag bits"));
        }
    }
    Ok(())
}

fn put_disc(dst: &mut Vec<u8>, d: u32, cases: usize) {
    match discriminant_size(cases) {
        1 => dst.push(d as u8),
        2 => dst.extend_from_slice(&(d as u16).to_le_bytes()),
        _ => dst.extend_from_slice(&d.to_le_bytes()),
    }
}

fn read_disc(src: &mut Src<'_>, cases: usize) -> Result<usize, CodecError> {
    let d = match discriminant_size(cases) {
        1 => u32::from(src.byte()?),
        2 => u32::from(u16::from_le_bytes(src.array()?)),
        _ => u32::from_le_bytes(src.array()?),
    };
    let d = d as usize;
    if d >= cases {
        return Err(CodecError::Malformed("discriminant out of range"));
    }
    Ok(d)
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
    let mut s = Src { bytes: src, at: 0 };
    let mut dst = Vec::new();
    for t in tys {
        w2p(plan, t, &mut s, &mut dst, limit)?;
    }
    Ok((dst, s.at))
}

/// [`from_wire`] for a buffer that must hold exactly the values: bytes after them are
/// refused.
pub fn from_wire_whole(
    plan: &InterfacePlan,
    tys: &[&Ty],
    src: &[u8],
    limit: usize,
) -> Result<Vec<u8>, CodecError> {
    match from_wire(plan, tys, src, limit)? {
        (v, used) if used == src.len() => Ok(v),
        (_, used) => Err(CodecError::Trailing(src.len() - used)),
    }
}

/// Translates A-stack encoded values of types `tys` (all of `src`) into the wire encoding.
pub fn to_wire(plan: &InterfacePlan, tys: &[&Ty], src: &[u8]) -> Result<BytesMut, CodecError> {
    let (dst, used) = translate(plan, tys, src)?;
    match src.len() - used {
        0 => Ok(dst),
        n => Err(CodecError::Trailing(n)),
    }
}

/// Translates A-stack encoded values of types `tys` at the start of `src` into the wire
/// encoding, ignoring the bytes after them: the A-stack of a procedure of bounded size holds
/// its largest encoding, and a smaller value leaves bytes unused.
pub fn to_wire_prefix(
    plan: &InterfacePlan,
    tys: &[&Ty],
    src: &[u8],
) -> Result<BytesMut, CodecError> {
    translate(plan, tys, src).map(|(dst, _)| dst)
}

/// The wire encoding of the values at the start of `src`, and the bytes they took.
fn translate(
    plan: &InterfacePlan,
    tys: &[&Ty],
    src: &[u8],
) -> Result<(BytesMut, usize), CodecError> {
    let mut s = Src { bytes: src, at: 0 };
    let mut dst = BytesMut::with_capacity(src.len() + 8);
    for t in tys {
        p2w(plan, t, &mut s, &mut dst).map_err(|e| match e {
            CodecError::Incomplete => CodecError::Malformed("the encoding ends early"),
            e => e,
        })?;
    }
    Ok((dst, s.at))
}

/// A `bool`'s byte read off `src`: 0 or 1, anything else refused.
fn bool_byte(src: &mut Src<'_>) -> Result<u8, CodecError> {
    match src.byte()? {
        b @ (0 | 1) => Ok(b),
        _ => Err(CodecError::Malformed("bool not 0 or 1")),
    }
}

/// The tag of an `option` or `result` value (`ty`) read off `src` and checked, and the type of
/// the payload that follows it, if the tag has one.
fn tagged<'t>(ty: &'t Ty, src: &mut Src<'_>) -> Result<(u8, Option<&'t Ty>), CodecError> {
    let tag = src.byte()?;
    let payload = match (ty, tag) {
        (Ty::Option(_), 0) => None,
        (Ty::Option(t), 1) => Some(&**t),
        (Ty::Option(_), _) => return Err(CodecError::Malformed("option tag not 0 or 1")),
        (Ty::Result(ok, _), 0) => ok.as_deref(),
        (Ty::Result(_, err), 1) => err.as_deref(),
        _ => return Err(CodecError::Malformed("result tag not 0 or 1")),
    };
    Ok((tag, payload))
}

fn w2p(
    plan: &InterfacePlan,
    ty: &Ty,
    src: &mut Src<'_>,
    dst: &mut Vec<u8>,
    limit: usize,
) -> Result<(), CodecError> {
    if dst.len() > limit || src.at > limit {
        return Err(CodecError::TooLarge(limit));
    }
    match ty {
        Ty::Prim(p) => match p {
            Prim::Bool => dst.push(bool_byte(src)?),
            Prim::U8 | Prim::S8 => dst.push(src.byte()?),
            Prim::U16 => dst.extend_from_slice(&(src.uleb(16)? as u16).to_le_bytes()),
            Prim::S16 => dst.extend_from_slice(&(src.sleb(16)? as i16).to_le_bytes()),
            Prim::U32 => dst.extend_from_slice(&(src.uleb(32)? as u32).to_le_bytes()),
            Prim::S32 => dst.extend_from_slice(&(src.sleb(32)? as i32).to_le_bytes()),
            Prim::U64 => dst.extend_from_slice(&src.uleb(64)?.to_le_bytes()),
            Prim::S64 => dst.extend_from_slice(&src.sleb(64)?.to_le_bytes()),
            Prim::F32 => dst.extend_from_slice(src.take(4)?),
            Prim::F64 => dst.extend_from_slice(src.take(8)?),
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
                let c = s.chars().next().ok_or(CodecError::Malformed("char"))?;
                dst.extend_from_slice(&u32::from(c).to_le_bytes());
            }
        },
        Ty::String => {
            let n = src.uleb(32)? as usize;
            if n > limit {
                return Err(CodecError::TooLarge(limit));
            }
            let b = src.take(n)?;
            std::str::from_utf8(b).map_err(|_| CodecError::Malformed("string: bad UTF-8"))?;
            dst.extend_from_slice(&(n as u32).to_le_bytes());
            dst.extend_from_slice(b);
        }
        Ty::List(t) => {
            let n = src.uleb(32)? as usize;
            // Every element takes at least one byte on the wire.
            if n > limit {
                return Err(CodecError::TooLarge(limit));
            }
            dst.extend_from_slice(&(n as u32).to_le_bytes());
            if **t == Ty::Prim(Prim::U8) || **t == Ty::Prim(Prim::S8) {
                dst.extend_from_slice(src.take(n)?);
            } else {
                for _ in 0..n {
                    w2p(plan, t, src, dst, limit)?;
                }
            }
        }
        Ty::Tuple(ts) => {
            for t in ts {
                w2p(plan, t, src, dst, limit)?;
            }
        }
        Ty::Option(_) | Ty::Result(..) => {
            let (tag, payload) = tagged(ty, src)?;
            dst.push(tag);
            if let Some(t) = payload {
                w2p(plan, t, src, dst, limit)?;
            }
        }
        Ty::Named(i) => match def(plan, *i)? {
            DefKind::Record(fields) => {
                for (_, t) in fields {
                    w2p(plan, t, src, dst, limit)?;
                }
            }
            DefKind::Enum(cases) => {
                let d = src.uleb(32)?;
                if d as usize >= cases.len() {
                    return Err(CodecError::Malformed("discriminant out of range"));
                }
                put_disc(dst, d as u32, cases.len());
            }
            DefKind::Variant(cases) => {
                let d = src.uleb(32)?;
                let Some((_, payload)) = cases.get(d as usize) else {
                    return Err(CodecError::Malformed("discriminant out of range"));
                };
                put_disc(dst, d as u32, cases.len());
                if let Some(t) = payload {
                    w2p(plan, t, src, dst, limit)?;
                }
            }
            DefKind::Flags(names) => {
                let n = names.len();
                let b = src.take(n.div_ceil(8))?;
                check_flags(b, n)?;
                let size = flags_size(n);
                dst.extend_from_slice(b);
                dst.resize(dst.len() + size - b.len(), 0);
            }
        },
    }
    if dst.len() > limit {
        return Err(CodecError::TooLarge(limit));
    }
    Ok(())
}

fn p2w(
    plan: &InterfacePlan,
    ty: &Ty,
    src: &mut Src<'_>,
    dst: &mut BytesMut,
) -> Result<(), CodecError> {
    match ty {
        Ty::Prim(p) => match p {
            Prim::Bool => dst.put_u8(bool_byte(src)?),
            Prim::U8 | Prim::S8 => dst.put_u8(src.byte()?),
            Prim::U16 => put_uleb(dst, u16::from_le_bytes(src.array()?).into()),
            Prim::S16 => put_sleb(dst, i16::from_le_bytes(src.array()?).into()),
            Prim::U32 => put_uleb(dst, u32::from_le_bytes(src.array()?).into()),
            Prim::S32 => put_sleb(dst, i32::from_le_bytes(src.array()?).into()),
            Prim::U64 => put_uleb(dst, u64::from_le_bytes(src.array()?)),
            Prim::S64 => put_sleb(dst, i64::from_le_bytes(src.array()?)),
            Prim::F32 => dst.put_slice(src.take(4)?),
            Prim::F64 => dst.put_slice(src.take(8)?),
            Prim::Char => {
                let c = char::from_u32(u32::from_le_bytes(src.array()?))
                    .ok_or(CodecError::Malformed("char not a Unicode scalar value"))?;
                let mut b = [0; 4];
                dst.put_slice(c.encode_utf8(&mut b).as_bytes());
            }
        },
        Ty::String => {
            let n = u32::from_le_bytes(src.array()?);
            let b = src.take(n as usize)?;
            std::str::from_utf8(b).map_err(|_| CodecError::Malformed("string: bad UTF-8"))?;
            put_uleb(dst, n.into());
            dst.put_slice(b);
        }
        Ty::List(t) => {
            let n = u32::from_le_bytes(src.array()?);
            put_uleb(dst, n.into());
            if **t == Ty::Prim(Prim::U8) || **t == Ty::Prim(Prim::S8) {
                dst.put_slice(src.take(n as usize)?);
            } else {
                // Every element takes at least one byte in this encoding too.
                if n as usize > src.remaining() {
                    return Err(CodecError::Incomplete);
                }
                for _ in 0..n {
                    p2w(plan, t, src, dst)?;
                }
            }
        }
        Ty::Tuple(ts) => {
            for t in ts {
                p2w(plan, t, src, dst)?;
            }
        }
        Ty::Option(_) | Ty::Result(..) => {
            let (tag, payload) = tagged(ty, src)?;
            dst.put_u8(tag);
            if let Some(t) = payload {
                p2w(plan, t, src, dst)?;
            }
        }
        Ty::Named(i) => match def(plan, *i)? {
            DefKind::Record(fields) => {
                for (_, t) in fields {
                    p2w(plan, t, src, dst)?;
                }
            }
            DefKind::Enum(cases) => {
                let d = read_disc(src, cases.len())?;
                put_uleb(dst, d as u64);
            }
            DefKind::Variant(cases) => {
                let d = read_disc(src, cases.len())?;
                put_uleb(dst, d as u64);
                if let Some((_, Some(t))) = cases.get(d) {
                    p2w(plan, t, src, dst)?;
                }
            }
            DefKind::Flags(names) => {
                let n = names.len();
                let b = src.take(flags_size(n))?;
                check_flags(b, n)?;
                dst.put_slice(&b[..n.div_ceil(8)]);
            }
        },
    }
    Ok(())
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
