//! WIT values as text (the notation of `wasm-wave`: `"text"`, `'c'`, `42`, `true`, `[1, 2]`,
//! `(a, b)`, `{field: v}`, `case`, `case(v)`, `some(v)`, `none`, `ok(v)`, `err(v)`,
//! `{flag-a, flag-b}`), parsed against a procedure's parameter types into the kernel's
//! encoding (see `lrpc_presentation::plan`), and encoded results printed back as text.

use lrpc::InterfacePlan;
use lrpc_presentation::plan::{DefKind, Prim, Ty, discriminant_size, flags_size};
use std::fmt::Write as _;

/// A value text that does not parse, or an encoding that does not decode.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ValueError {
    /// The text does not fit the type at this byte offset.
    #[error("at offset {at}: {reason}")]
    Parse {
        /// Byte offset in the text.
        at: usize,
        /// What was expected.
        reason: String,
    },
    /// A result's encoding is truncated or malformed.
    #[error("the result does not decode: {0}")]
    Decode(String),
}

/// Parses `text`, a comma-separated list of values, as the parameters `params` and returns
/// their encoding.
pub fn encode_args(
    plan: &InterfacePlan,
    params: &[(String, Ty)],
    text: &str,
) -> Result<Vec<u8>, ValueError> {
    let mut p = Parser {
        plan,
        s: text.as_bytes(),
        pos: 0,
        out: Vec::new(),
    };
    for (i, (name, ty)) in params.iter().enumerate() {
        if i > 0 {
            p.expect(b',')?;
        }
        p.value(ty).map_err(|e| match e {
            ValueError::Parse { at, reason } => ValueError::Parse {
                at,
                reason: format!("parameter `{name}`: {reason}"),
            },
            other => other,
        })?;
    }
    p.ws();
    if p.pos != p.s.len() {
        return p.fail(format!(
            "{} parameter(s) expected, more text follows",
            params.len()
        ));
    }
    Ok(p.out)
}

/// Prints an encoded value of type `ty` as text; the whole of `bytes` must be consumed.
pub fn print(plan: &InterfacePlan, ty: &Ty, bytes: &[u8]) -> Result<String, ValueError> {
    let mut d = Decoder {
        plan,
        b: bytes,
        pos: 0,
    };
    let mut out = String::new();
    d.value(ty, &mut out)?;
    if d.pos != bytes.len() {
        return Err(ValueError::Decode(format!(
            "{} trailing bytes",
            bytes.len() - d.pos
        )));
    }
    Ok(out)
}

struct Parser<'a> {
    plan: &'a InterfacePlan,
    s: &'a [u8],
    pos: usize,
    out: Vec<u8>,
}

impl Parser<'_> {
    fn fail<T>(&self, reason: impl Into<String>) -> Result<T, ValueError> {
        Err(ValueError::Parse {
            at: self.pos,
            reason: reason.into(),
        })
    }

    fn ws(&mut self) {
        while self.s.get(self.pos).is_some_and(u8::is_ascii_whitespace) {
            self.pos += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.pos).copied()
    }

    fn eat(&mut self, c: u8) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), ValueError> {
        if self.eat(c) {
            Ok(())
        } else {
            self.fail(format!("`{}` expected", c as char))
        }
    }

    /// A kebab-case label.
    fn label(&mut self) -> Result<String, ValueError> {
        self.ws();
        if self.s.get(self.pos) == Some(&b'%') {
            self.pos += 1;
        }
        let start = self.pos;
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'-')
        {
            self.pos += 1;
        }
        if start == self.pos {
            return self.fail("a name expected");
        }
        Ok(String::from_utf8_lossy(&self.s[start..self.pos]).into_owned())
    }

    /// A number token.
    fn number(&mut self) -> Result<&str, ValueError> {
        self.ws();
        let start = self.pos;
        while self
            .s
            .get(self.pos)
            .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'+' | b'.' | b'_'))
        {
            self.pos += 1;
        }
        std::str::from_utf8(&self.s[start..self.pos]).or_else(|_| self.fail("a number expected"))
    }

    /// A quoted string or char literal's contents (after the opening quote).
    fn quoted(&mut self, q: u8) -> Result<String, ValueError> {
        if !self.eat(q) {
            return self.fail(format!("`{}` expected", q as char));
        }
        let mut out = String::new();
        loop {
            let rest = std::str::from_utf8(&self.s[self.pos..])
                .or_else(|_| self.fail("the text is not UTF-8"))?;
            let mut chars = rest.chars();
            let Some(c) = chars.next() else {
                return self.fail("unterminated literal");
            };
            self.pos += c.len_utf8();
            if c as u32 == u32::from(q) {
                return Ok(out);
            }
            if c != '\\' {
                out.push(c);
                continue;
            }
            let Some(e) = chars.next() else {
                return self.fail("unterminated escape");
            };
            self.pos += e.len_utf8();
            match e {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'r' => out.push('\r'),
                '\\' | '"' | '\'' => out.push(e),
                'u' => {
                    self.expect(b'{')?;
                    let hex = self.number()?.to_string();
                    self.expect(b'}')?;
                    let c = u32::from_str_radix(&hex, 16)
                        .ok()
                        .and_then(char::from_u32)
                        .map_or_else(|| self.fail("a bad \\u{…} escape"), Ok)?;
                    out.push(c);
                }
                _ => return self.fail(format!("unknown escape `\\{e}`")),
            }
        }
    }

    fn int<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, ValueError> {
        let n = self.number()?.replace('_', "");
        n.parse()
            .or_else(|_| self.fail(format!("`{n}` is not a {what}")))
    }

    fn len_prefix(&mut self, n: usize) -> Result<(), ValueError> {
        let n = u32::try_from(n).or_else(|_| self.fail("too long"))?;
        self.out.extend_from_slice(&n.to_le_bytes());
        Ok(())
    }

    fn discriminant(&mut self, cases: usize, d: usize) {
        match discriminant_size(cases) {
            1 => self.out.push(d as u8),
            2 => self.out.extend_from_slice(&(d as u16).to_le_bytes()),
            _ => self.out.extend_from_slice(&(d as u32).to_le_bytes()),
        }
    }

    fn value(&mut self, ty: &Ty) -> Result<(), ValueError> {
        match ty {
            Ty::Prim(p) => self.prim(*p),
            Ty::String => {
                let s = self.quoted(b'"')?;
                self.len_prefix(s.len())?;
                self.out.extend_from_slice(s.as_bytes());
                Ok(())
            }
            Ty::List(t) => {
                if **t == Ty::Prim(Prim::U8) && self.peek() == Some(b'"') {
                    // A byte list may be written as a string: its UTF-8 bytes.
                    let s = self.quoted(b'"')?;
                    self.len_prefix(s.len())?;
                    self.out.extend_from_slice(s.as_bytes());
                    return Ok(());
                }
                self.expect(b'[')?;
                let at = self.out.len();
                self.out.extend_from_slice(&[0; 4]);
                let mut n = 0u32;
                while !self.eat(b']') {
                    if n > 0 {
                        self.expect(b',')?;
                        if self.eat(b']') {
                            break;
                        }
                    }
                    self.value(t)?;
                    n += 1;
                }
                self.out[at..at + 4].copy_from_slice(&n.to_le_bytes());
                Ok(())
            }
            Ty::Tuple(ts) => {
                self.expect(b'(')?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        self.expect(b',')?;
                    }
                    self.value(t)?;
                }
                self.eat(b',');
                self.expect(b')')
            }
            Ty::Option(t) => match self.label()?.as_str() {
                "none" => {
                    self.out.push(0);
                    Ok(())
                }
                "some" => {
                    self.out.push(1);
                    self.payload(Some(t))
                }
                other => self.fail(format!("`some(…)` or `none` expected, not `{other}`")),
            },
            Ty::Result(ok, err) => match self.label()?.as_str() {
                "ok" => {
                    self.out.push(0);
                    self.payload(ok.as_deref())
                }
                "err" => {
                    self.out.push(1);
                    self.payload(err.as_deref())
                }
                other => self.fail(format!("`ok` or `err` expected, not `{other}`")),
            },
            Ty::Named(i) => self.named(*i),
        }
    }

    /// `(value)` when `ty` is some, nothing otherwise.
    fn payload(&mut self, ty: Option<&Ty>) -> Result<(), ValueError> {
        match ty {
            Some(t) => {
                self.expect(b'(')?;
                self.value(t)?;
                self.expect(b')')
            }
            None => Ok(()),
        }
    }

    fn named(&mut self, i: usize) -> Result<(), ValueError> {
        let plan = self.plan;
        let Some(def) = plan.defs.get(i) else {
            return self.fail("unknown type");
        };
        match &def.kind {
            DefKind::Record(fields) => {
                self.expect(b'{')?;
                let mut parts: Vec<Option<Vec<u8>>> = vec![None; fields.len()];
                let mut first = true;
                while !self.eat(b'}') {
                    if !first {
                        self.expect(b',')?;
                        if self.eat(b'}') {
                            break;
                        }
                    }
                    first = false;
                    let name = self.label()?;
                    let Some(k) = fields.iter().position(|(f, _)| *f == name) else {
                        return self.fail(format!("`{}` has no field `{name}`", def.name));
                    };
                    self.expect(b':')?;
                    let saved = std::mem::take(&mut self.out);
                    self.value(&fields[k].1)?;
                    parts[k] = Some(std::mem::replace(&mut self.out, saved));
                }
                for (k, part) in parts.into_iter().enumerate() {
                    match part {
                        Some(b) => self.out.extend_from_slice(&b),
                        None => {
                            return self.fail(format!("field `{}` missing", fields[k].0));
                        }
                    }
                }
                Ok(())
            }
            DefKind::Enum(cases) => {
                let name = self.label()?;
                let Some(d) = cases.iter().position(|c| *c == name) else {
                    return self.fail(format!("`{}` has no case `{name}`", def.name));
                };
                self.discriminant(cases.len(), d);
                Ok(())
            }
            DefKind::Variant(cases) => {
                let name = self.label()?;
                let Some(d) = cases.iter().position(|(c, _)| *c == name) else {
                    return self.fail(format!("`{}` has no case `{name}`", def.name));
                };
                self.discriminant(cases.len(), d);
                self.payload(cases[d].1.as_ref())
            }
            DefKind::Flags(names) => {
                self.expect(b'{')?;
                let mut bits = vec![0u8; flags_size(names.len())];
                let mut first = true;
                while !self.eat(b'}') {
                    if !first {
                        self.expect(b',')?;
                    }
                    first = false;
                    let name = self.label()?;
                    let Some(k) = names.iter().position(|c| *c == name) else {
                        return self.fail(format!("`{}` has no flag `{name}`", def.name));
                    };
                    bits[k / 8] |= 1 << (k % 8);
                }
                self.out.extend_from_slice(&bits);
                Ok(())
            }
        }
    }

    fn prim(&mut self, p: Prim) -> Result<(), ValueError> {
        macro_rules! put {
            ($t:ty, $what:literal) => {{
                let v: $t = self.int($what)?;
                self.out.extend_from_slice(&v.to_le_bytes());
            }};
        }
        match p {
            Prim::Bool => {
                let b = match self.label()?.as_str() {
                    "true" => 1,
                    "false" => 0,
                    other => {
                        return self.fail(format!("`true` or `false` expected, not `{other}`"));
                    }
                };
                self.out.push(b);
            }
            Prim::U8 => put!(u8, "u8"),
            Prim::S8 => put!(i8, "s8"),
            Prim::U16 => put!(u16, "u16"),
            Prim::S16 => put!(i16, "s16"),
            Prim::U32 => put!(u32, "u32"),
            Prim::S32 => put!(i32, "s32"),
            Prim::U64 => put!(u64, "u64"),
            Prim::S64 => put!(i64, "s64"),
            Prim::F32 => put!(f32, "f32"),
            Prim::F64 => put!(f64, "f64"),
            Prim::Char => {
                let s = self.quoted(b'\'')?;
                let mut cs = s.chars();
                match (cs.next(), cs.next()) {
                    (Some(c), None) => self.out.extend_from_slice(&u32::from(c).to_le_bytes()),
                    _ => return self.fail("one character expected"),
                }
            }
        }
        Ok(())
    }
}

struct Decoder<'a> {
    plan: &'a InterfacePlan,
    b: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], ValueError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.b.len())
            .ok_or_else(|| ValueError::Decode(format!("truncated at byte {}", self.pos)))?;
        let s = &self.b[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u32(&mut self) -> Result<u32, ValueError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn discriminant(&mut self, cases: usize) -> Result<usize, ValueError> {
        let d = match discriminant_size(cases) {
            1 => usize::from(self.take(1)?[0]),
            2 => {
                let b = self.take(2)?;
                usize::from(u16::from_le_bytes([b[0], b[1]]))
            }
            _ => self.u32()? as usize,
        };
        if d >= cases {
            return Err(ValueError::Decode(format!("discriminant {d} of {cases}")));
        }
        Ok(d)
    }

    fn value(&mut self, ty: &Ty, out: &mut String) -> Result<(), ValueError> {
        match ty {
            Ty::Prim(p) => self.prim(*p, out),
            Ty::String => {
                let n = self.u32()? as usize;
                let s = std::str::from_utf8(self.take(n)?)
                    .map_err(|_| ValueError::Decode("a string is not UTF-8".into()))?;
                let _ = write!(out, "{s:?}");
                Ok(())
            }
            Ty::List(t) => {
                let n = self.u32()? as usize;
                if n > self.b.len() - self.pos {
                    // Every element takes at least a byte.
                    return Err(ValueError::Decode(format!("list of {n} elements")));
                }
                out.push('[');
                for i in 0..n {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.value(t, out)?;
                }
                out.push(']');
                Ok(())
            }
            Ty::Tuple(ts) => {
                out.push('(');
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    self.value(t, out)?;
                }
                out.push(')');
                Ok(())
            }
            Ty::Option(t) => match self.take(1)?[0] {
                0 => {
                    out.push_str("none");
                    Ok(())
                }
                1 => {
                    out.push_str("some");
                    self.payload(Some(t), out)
                }
                d => Err(ValueError::Decode(format!("option tag {d}"))),
            },
            Ty::Result(ok, err) => match self.take(1)?[0] {
                0 => {
                    out.push_str("ok");
                    self.payload(ok.as_deref(), out)
                }
                1 => {
                    out.push_str("err");
                    self.payload(err.as_deref(), out)
                }
                d => Err(ValueError::Decode(format!("result tag {d}"))),
            },
            Ty::Named(i) => self.named(*i, out),
        }
    }

    fn payload(&mut self, ty: Option<&Ty>, out: &mut String) -> Result<(), ValueError> {
        if let Some(t) = ty {
            out.push('(');
            self.value(t, out)?;
            out.push(')');
        }
        Ok(())
    }

    fn named(&mut self, i: usize, out: &mut String) -> Result<(), ValueError> {
        let plan = self.plan;
        let def = plan
            .defs
            .get(i)
            .ok_or_else(|| ValueError::Decode("unknown type".into()))?;
        match &def.kind {
            DefKind::Record(fields) => {
                out.push('{');
                for (k, (name, t)) in fields.iter().enumerate() {
                    if k > 0 {
                        out.push_str(", ");
                    }
                    let _ = write!(out, "{name}: ");
                    self.value(t, out)?;
                }
                out.push('}');
                Ok(())
            }
            DefKind::Enum(cases) => {
                let d = self.discriminant(cases.len())?;
                out.push_str(&cases[d]);
                Ok(())
            }
            DefKind::Variant(cases) => {
                let d = self.discriminant(cases.len())?;
                out.push_str(&cases[d].0);
                self.payload(cases[d].1.as_ref(), out)
            }
            DefKind::Flags(names) => {
                let bits = self.take(flags_size(names.len()))?;
                let set: Vec<&str> = names
                    .iter()
                    .enumerate()
                    .filter(|(k, _)| bits[k / 8] & (1 << (k % 8)) != 0)
                    .map(|(_, n)| n.as_str())
                    .collect();
                let _ = write!(out, "{{{}}}", set.join(", "));
                Ok(())
            }
        }
    }

    fn prim(&mut self, p: Prim, out: &mut String) -> Result<(), ValueError> {
        let b = self.take(p.size())?;
        let mut w = [0u8; 8];
        w[..b.len()].copy_from_slice(b);
        let u = u64::from_le_bytes(w);
        let _ = match p {
            Prim::Bool => match u {
                0 => write!(out, "false"),
                1 => write!(out, "true"),
                _ => return Err(ValueError::Decode(format!("bool byte {u}"))),
            },
            Prim::U8 | Prim::U16 | Prim::U32 | Prim::U64 => write!(out, "{u}"),
            Prim::S8 => write!(out, "{}", u as u8 as i8),
            Prim::S16 => write!(out, "{}", u as u16 as i16),
            Prim::S32 => write!(out, "{}", u as u32 as i32),
            Prim::S64 => write!(out, "{}", u as i64),
            Prim::F32 => write!(out, "{}", f32::from_bits(u as u32)),
            Prim::F64 => write!(out, "{}", f64::from_bits(u)),
            Prim::Char => {
                let c = char::from_u32(u as u32)
                    .ok_or_else(|| ValueError::Decode(format!("{u:#x} is not a char")))?;
                write!(out, "{c:?}")
            }
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv() -> InterfacePlan {
        lrpc::Kernel::new()
            .expect("kernel")
            .interface("lrpc:kv/store")
            .expect("kv plan")
    }

    fn round_trip(function: &str, text: &str) -> Vec<u8> {
        let plan = kv();
        let p = plan
            .procs
            .iter()
            .find(|p| p.name == function)
            .expect("function");
        let bytes = encode_args(&plan, &p.params, text).expect("parses");
        // Each parameter prints back as written (in canonical spacing).
        let mut at = 0;
        let mut printed = Vec::new();
        for (_, t) in &p.params {
            let mut d = Decoder {
                plan: &plan,
                b: &bytes,
                pos: at,
            };
            let mut s = String::new();
            d.value(t, &mut s).expect("decodes");
            at = d.pos;
            printed.push(s);
        }
        assert_eq!(at, bytes.len());
        assert_eq!(printed.join(", "), text);
        bytes
    }

    #[test]
    fn values_round_trip_through_the_encoding() {
        let b = round_trip("put", "\"k\u{e9}y\", [1, 2, 255], binary");
        assert_eq!(
            b,
            [4, 0, 0, 0, b'k', 0xc3, 0xa9, b'y', 3, 0, 0, 0, 1, 2, 255, 1]
        );
        round_trip("keys", "some(\"pre\")");
        round_trip("keys", "none");
        round_trip("measure", "'\u{e9}', -21, 1.5");
    }

    #[test]
    fn results_print_in_value_text() {
        let plan = kv();
        let get = plan.procs.iter().find(|p| p.name == "get").expect("get");
        let ty = get.result.as_ref().expect("a result");
        let mut b = vec![0u8];
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(b'k');
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(b"hi");
        b.push(0);
        b.extend_from_slice(&7u64.to_le_bytes());
        assert_eq!(
            print(&plan, ty, &b).expect("prints"),
            "ok({key: \"k\", value: [104, 105], kind: text, version: 7})"
        );
        let rights = plan
            .procs
            .iter()
            .find(|p| p.name == "rights")
            .expect("rights");
        assert_eq!(
            print(&plan, rights.result.as_ref().expect("flags"), &[0b101]).expect("prints"),
            "{read, scan}"
        );
        // Truncations and bad tags are refused, never read past.
        for cut in 0..b.len() {
            assert!(print(&plan, ty, &b[..cut]).is_err());
        }
        assert!(print(&plan, ty, &[7]).is_err());
    }

    #[test]
    fn mistakes_say_where() {
        let plan = kv();
        let put = plan.procs.iter().find(|p| p.name == "put").expect("put");
        let e = encode_args(&plan, &put.params, "\"k\", [1], sideways").expect_err("bad enum");
        assert!(e.to_string().contains("no case `sideways`"), "{e}");
        let e = encode_args(&plan, &put.params, "\"k\", [300], text").expect_err("bad u8");
        assert!(e.to_string().contains("parameter `value`"), "{e}");
        assert!(encode_args(&plan, &put.params, "\"k\", [1]").is_err());
        assert!(encode_args(&plan, &put.params, "\"k\", [1], text, 4").is_err());
    }
}
