//! WIT values as text (the notation of `wasm-wave`: `"text"`, `'c'`, `42`, `true`, `[1, 2]`,
//! `(a, b)`, `{field: v}`, `case`, `case(v)`, `some(v)`, `none`, `ok(v)`, `err(v)`,
//! `{flag-a, flag-b}`), parsed against a procedure's parameter types into the kernel's
//! encoding (see `lrpc_presentation::plan`), and encoded results printed back as text. The
//! encoding is walked by `lrpc_presentation::layout`: the text is a source of values for its
//! writer, and a visitor of its reader prints them.

use lrpc_kernel::presentation::InterfacePlan;
use lrpc_presentation::layout::{
    CaseOut, Cases, Decode, Encode, Extent, Fault, FieldsOut, FlagsOut, Layout, ListOut, Reader,
    Scalar, Seq, Writer, flag_set,
};
use lrpc_presentation::plan::{Prim, Ty};
use std::borrow::Cow;
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

impl From<Fault> for ValueError {
    fn from(f: Fault) -> ValueError {
        ValueError::Decode(f.to_string())
    }
}

/// Parses `text`, a comma-separated list of values, as the parameters `params` and returns
/// their encoding.
pub fn encode_args(
    plan: &InterfacePlan,
    params: &[(String, Ty)],
    text: &str,
) -> Result<Vec<u8>, ValueError> {
    let mut p = Parser {
        s: text.as_bytes(),
        pos: 0,
    };
    let mut out = Vec::new();
    let mut w = Writer::new(Layout::new(plan), &mut out);
    for (i, (name, ty)) in params.iter().enumerate() {
        if i > 0 {
            p.expect(b',')?;
        }
        if let Err(e) = w.write(ty, &mut p) {
            // A value the encoding refuses is a mistake where the parser stopped.
            let (at, reason) = match e {
                ValueError::Parse { at, reason } => (at, reason),
                ValueError::Decode(reason) => (p.pos, reason),
            };
            return Err(ValueError::Parse {
                at,
                reason: format!("parameter `{name}`: {reason}"),
            });
        }
    }
    p.ws();
    if p.pos != p.s.len() {
        return p.fail(format!(
            "{} parameter(s) expected, more text follows",
            params.len()
        ));
    }
    Ok(out)
}

/// Prints an encoded value of type `ty` as text; the whole of `bytes` must be consumed.
pub fn print(plan: &InterfacePlan, ty: &Ty, bytes: &[u8]) -> Result<String, ValueError> {
    let mut out = String::new();
    Reader::new(Layout::new(plan), bytes).read_values(&[ty], &mut Text(&mut out), Extent::Whole)?;
    Ok(out)
}

/// The source of an encoding: value text, parsed as the layout asks for values.
struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
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

    /// Items separated by commas, each parsed by `item`, up to `close` (a trailing comma
    /// allowed).
    fn until(
        &mut self,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<(), ValueError>,
    ) -> Result<(), ValueError> {
        let mut first = true;
        while !self.eat(close) {
            if !first {
                self.expect(b',')?;
                if self.eat(close) {
                    break;
                }
            }
            first = false;
            item(self)?;
        }
        Ok(())
    }

    fn int<T: std::str::FromStr>(&mut self, what: &str) -> Result<T, ValueError> {
        let n = self.number()?.replace('_', "");
        n.parse()
            .or_else(|_| self.fail(format!("`{n}` is not a {what}")))
    }
}

impl<'t> Encode<'t> for Parser<'_> {
    type Error = ValueError;

    fn scalar(&mut self, p: Prim) -> Result<Scalar, ValueError> {
        Ok(match p {
            Prim::Bool => match self.label()?.as_str() {
                "true" => Scalar::Bool(true),
                "false" => Scalar::Bool(false),
                other => {
                    return self.fail(format!("`true` or `false` expected, not `{other}`"));
                }
            },
            Prim::U8 => Scalar::U8(self.int("u8")?),
            Prim::S8 => Scalar::S8(self.int("s8")?),
            Prim::U16 => Scalar::U16(self.int("u16")?),
            Prim::S16 => Scalar::S16(self.int("s16")?),
            Prim::U32 => Scalar::U32(self.int("u32")?),
            Prim::S32 => Scalar::S32(self.int("s32")?),
            Prim::U64 => Scalar::U64(self.int("u64")?),
            Prim::S64 => Scalar::S64(self.int("s64")?),
            Prim::F32 => Scalar::F32(self.int("f32")?),
            Prim::F64 => Scalar::F64(self.int("f64")?),
            Prim::Char => {
                let s = self.quoted(b'\'')?;
                let mut cs = s.chars();
                match (cs.next(), cs.next()) {
                    (Some(c), None) => Scalar::Char(c),
                    _ => return self.fail("one character expected"),
                }
            }
        })
    }

    fn string(&mut self) -> Result<Cow<'_, str>, ValueError> {
        Ok(Cow::Owned(self.quoted(b'"')?))
    }

    fn list(&mut self, items: &mut ListOut<'_, '_, 't>) -> Result<(), ValueError> {
        if items.is_bytes() && self.peek() == Some(b'"') {
            // A byte list may be written as a string: its UTF-8 bytes.
            let s = self.quoted(b'"')?;
            items.bytes(s.as_bytes())?;
            return Ok(());
        }
        self.expect(b'[')?;
        self.until(b']', |p| items.item(p))
    }

    fn tuple(&mut self, out: &mut FieldsOut<'_, '_, 't>) -> Result<(), ValueError> {
        self.expect(b'(')?;
        while let Some(k) = out.missing() {
            if k > 0 {
                self.expect(b',')?;
            }
            out.field(k, self)?;
        }
        self.eat(b',');
        self.expect(b')')
    }

    fn record(
        &mut self,
        fields: &'t [(String, Ty)],
        out: &mut FieldsOut<'_, '_, 't>,
    ) -> Result<(), ValueError> {
        self.expect(b'{')?;
        self.until(b'}', |p| {
            let name = p.label()?;
            let Some(k) = fields.iter().position(|(f, _)| *f == name) else {
                return p.fail(format!("the record has no field `{name}`"));
            };
            if out.written(k) {
                return p.fail(format!("field `{name}` given twice"));
            }
            p.expect(b':')?;
            out.field(k, p)
        })?;
        match out.missing().and_then(|k| fields.get(k)) {
            Some((name, _)) => self.fail(format!("field `{name}` missing")),
            None => Ok(()),
        }
    }

    fn case(&mut self, out: &mut CaseOut<'_, '_, 't>) -> Result<(), ValueError> {
        let cases = out.cases();
        let name = self.label()?;
        let Some(k) = cases.find(&name) else {
            return self.fail(match cases {
                Cases::Option(_) => format!("`some(…)` or `none` expected, not `{name}`"),
                Cases::Result(..) => format!("`ok` or `err` expected, not `{name}`"),
                Cases::Enum(_) => format!("the enum has no case `{name}`"),
                Cases::Variant(_) => format!("the variant has no case `{name}`"),
            });
        };
        if out.case(k)?.is_some() {
            self.expect(b'(')?;
            out.payload(self)?;
            self.expect(b')')?;
        }
        Ok(())
    }

    fn flags(&mut self, out: &mut FlagsOut<'_>) -> Result<(), ValueError> {
        self.expect(b'{')?;
        let mut first = true;
        while !self.eat(b'}') {
            if !first {
                self.expect(b',')?;
            }
            first = false;
            let name = self.label()?;
            let Some(k) = out.names().iter().position(|c| *c == name) else {
                return self.fail(format!("the flags have no flag `{name}`"));
            };
            out.set(k)?;
        }
        Ok(())
    }
}

/// A visitor printing what it reads as value text.
struct Text<'o>(&'o mut String);

impl Text<'_> {
    /// The values of `items` between `open` and `close`, separated by commas.
    fn seq<'t, 'b>(
        &mut self,
        open: char,
        items: &mut Seq<'_, 't, 'b>,
        close: char,
    ) -> Result<(), ValueError> {
        self.0.push(open);
        for i in 0..items.len() {
            if i > 0 {
                self.0.push_str(", ");
            }
            items.next(self).transpose()?;
        }
        self.0.push(close);
        Ok(())
    }
}

impl<'t, 'b> Decode<'t, 'b> for Text<'_> {
    type Out = ();
    type Error = ValueError;

    fn scalar(&mut self, v: Scalar) -> Result<(), ValueError> {
        let out = &mut *self.0;
        let _ = match v {
            Scalar::Bool(b) => write!(out, "{b}"),
            Scalar::U8(x) => write!(out, "{x}"),
            Scalar::S8(x) => write!(out, "{x}"),
            Scalar::U16(x) => write!(out, "{x}"),
            Scalar::S16(x) => write!(out, "{x}"),
            Scalar::U32(x) => write!(out, "{x}"),
            Scalar::S32(x) => write!(out, "{x}"),
            Scalar::U64(x) => write!(out, "{x}"),
            Scalar::S64(x) => write!(out, "{x}"),
            Scalar::F32(x) => write!(out, "{x}"),
            Scalar::F64(x) => write!(out, "{x}"),
            Scalar::Char(c) => write!(out, "{c:?}"),
        };
        Ok(())
    }

    fn string(&mut self, s: &'b str) -> Result<(), ValueError> {
        let _ = write!(self.0, "{s:?}");
        Ok(())
    }

    fn bytes(&mut self, b: &'b [u8]) -> Result<(), ValueError> {
        self.0.push('[');
        for (i, x) in b.iter().enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(self.0, "{sep}{x}");
        }
        self.0.push(']');
        Ok(())
    }

    fn list(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<(), ValueError> {
        self.seq('[', items, ']')
    }

    fn tuple(&mut self, items: &mut Seq<'_, 't, 'b>) -> Result<(), ValueError> {
        self.seq('(', items, ')')
    }

    fn record(
        &mut self,
        fields: &'t [(String, Ty)],
        values: &mut Seq<'_, 't, 'b>,
    ) -> Result<(), ValueError> {
        self.0.push('{');
        for (k, (name, _)) in fields.iter().enumerate() {
            let sep = if k > 0 { ", " } else { "" };
            let _ = write!(self.0, "{sep}{name}: ");
            values.next(self).transpose()?;
        }
        self.0.push('}');
        Ok(())
    }

    fn case(
        &mut self,
        cases: Cases<'t>,
        k: usize,
        payload: &mut Seq<'_, 't, 'b>,
    ) -> Result<(), ValueError> {
        self.0.push_str(cases.name(k));
        if payload.is_empty() {
            return Ok(());
        }
        self.seq('(', payload, ')')
    }

    fn flags(&mut self, names: &'t [String], bits: &'b [u8]) -> Result<(), ValueError> {
        self.0.push('{');
        let set = names.iter().enumerate().filter(|(k, _)| flag_set(bits, *k));
        for (i, (_, name)) in set.enumerate() {
            let sep = if i > 0 { ", " } else { "" };
            let _ = write!(self.0, "{sep}{name}");
        }
        self.0.push('}');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv() -> InterfacePlan {
        lrpc_kernel::Kernel::new()
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
        let mut r = Reader::new(Layout::new(&plan), &bytes);
        let mut printed = Vec::new();
        for (_, t) in &p.params {
            let mut s = String::new();
            r.read(t, &mut Text(&mut s)).expect("decodes");
            printed.push(s);
        }
        assert_eq!(r.at(), bytes.len());
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
