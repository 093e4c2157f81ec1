//! Rust shapes of the records and variants of `lrpc:http/plugin` (both versions: header
//! values as strings and, in `@0.2.0`, as bytes), for the typed path
//! (`typed`): a core client's call of a component plugin's `handle` crosses with its head's
//! strings and its body as copies, not as one dynamic value per byte. Each shape lifts and
//! lowers with the canonical ABI (derived) and reads and writes the A-stack layout
//! (`AStackValue`).
//!
//! The layout is the one `lrpc_presentation::layout` walks: scalars little endian, a string
//! or list as a `u32` length then its bytes or elements, fields in order, a variant as a
//! one-byte tag then the case's payload. Bytes read are untrusted: a count is not believed
//! before the bytes that remain could hold its elements.

use super::codec::AStackValue;

/// The interfaces whose `handle` the shapes carry: header values as strings (`strings`) and
/// as bytes (`bytes`). Both lay a value out the same way, a `u32` length then its bytes; only
/// a string must be UTF-8.
pub(super) const HTTP_PLUGIN: &str = "lrpc:http/plugin";
pub(super) const HTTP_PLUGIN_BYTES: &str = "lrpc:http/plugin@0.2.0";

/// The shapes of `handle` with header values of type `$value`.
macro_rules! http_shapes {
    ($value:ty) => {
        use super::super::codec::AStackValue;
        use wasmtime::component::{ComponentType, Lift, Lower};

        /// `header`.
        #[derive(ComponentType, Lift, Lower, Clone, Debug, PartialEq, Eq)]
        #[component(record)]
        pub(in crate::component) struct Header {
            pub(in crate::component) name: String,
            pub(in crate::component) value: $value,
        }

        /// `head`.
        #[derive(ComponentType, Lift, Lower, Clone, Debug, PartialEq, Eq)]
        #[component(record)]
        pub(in crate::component) struct Head {
            pub(in crate::component) method: String,
            pub(in crate::component) path: String,
            pub(in crate::component) headers: Vec<Header>,
        }

        /// `response`.
        #[derive(ComponentType, Lift, Lower, Clone, Debug, PartialEq, Eq)]
        #[component(record)]
        pub(in crate::component) struct Response {
            pub(in crate::component) status: u16,
            pub(in crate::component) headers: Vec<Header>,
            pub(in crate::component) body: Vec<u8>,
        }

        /// `action`.
        #[derive(ComponentType, Lift, Lower, Clone, Debug, PartialEq, Eq)]
        #[component(variant)]
        pub(in crate::component) enum Action {
            #[component(name = "continue")]
            Continue(Head),
            #[component(name = "rewrite")]
            Rewrite((Head, Vec<u8>)),
            #[component(name = "respond")]
            Respond(Response),
        }

        impl Action {
            /// What a failed call answers, as on the general path: the first case with a zero
            /// payload.
            pub(in crate::component) fn zero() -> Action {
                Action::Continue(Head {
                    method: String::new(),
                    path: String::new(),
                    headers: Vec::new(),
                })
            }
        }

        impl AStackValue for Header {
            fn put(&self, out: &mut Vec<u8>) {
                self.name.put(out);
                self.value.put(out);
            }
            fn get(src: &mut &[u8]) -> Option<Header> {
                Some(Header {
                    name: String::get(src)?,
                    value: <$value>::get(src)?,
                })
            }
        }

        impl AStackValue for Vec<Header> {
            fn put(&self, out: &mut Vec<u8>) {
                super::put_list(self, out);
            }
            fn get(src: &mut &[u8]) -> Option<Vec<Header>> {
                // Two lengths at least.
                super::get_list(src, 8)
            }
        }

        impl AStackValue for Head {
            fn put(&self, out: &mut Vec<u8>) {
                self.method.put(out);
                self.path.put(out);
                self.headers.put(out);
            }
            fn get(src: &mut &[u8]) -> Option<Head> {
                Some(Head {
                    method: String::get(src)?,
                    path: String::get(src)?,
                    headers: Vec::<Header>::get(src)?,
                })
            }
        }

        impl AStackValue for Response {
            fn put(&self, out: &mut Vec<u8>) {
                self.status.put(out);
                self.headers.put(out);
                self.body.put(out);
            }
            fn get(src: &mut &[u8]) -> Option<Response> {
                Some(Response {
                    status: u16::get(src)?,
                    headers: Vec::<Header>::get(src)?,
                    body: Vec::<u8>::get(src)?,
                })
            }
        }

        impl AStackValue for Action {
            fn put(&self, out: &mut Vec<u8>) {
                match self {
                    Action::Continue(h) => {
                        out.push(0);
                        h.put(out);
                    }
                    Action::Rewrite((h, body)) => {
                        out.push(1);
                        h.put(out);
                        body.put(out);
                    }
                    Action::Respond(r) => {
                        out.push(2);
                        r.put(out);
                    }
                }
            }
            fn get(src: &mut &[u8]) -> Option<Action> {
                let (&tag, rest) = src.split_first()?;
                *src = rest;
                Some(match tag {
                    0 => Action::Continue(Head::get(src)?),
                    1 => Action::Rewrite((Head::get(src)?, Vec::<u8>::get(src)?)),
                    2 => Action::Respond(Response::get(src)?),
                    _ => return None,
                })
            }
        }
    };
}

/// `lrpc:http/plugin`'s shapes: header values as strings.
pub(super) mod strings {
    http_shapes!(String);
}

/// `lrpc:http/plugin@0.2.0`'s shapes: header values as bytes.
pub(super) mod bytes {
    http_shapes!(Vec<u8>);
}

impl AStackValue for u16 {
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn get(src: &mut &[u8]) -> Option<u16> {
        let (b, rest) = src.split_first_chunk::<2>()?;
        *src = rest;
        Some(u16::from_le_bytes(*b))
    }
}

/// Appends a list: its `u32` count, then its elements.
fn put_list<T: AStackValue>(v: &[T], out: &mut Vec<u8>) {
    out.extend_from_slice(&(v.len() as u32).to_le_bytes());
    for e in v {
        e.put(out);
    }
}

/// Takes a list whose elements each take at least `min` bytes: a count the bytes that remain
/// can not hold is refused before anything is allocated.
fn get_list<T: AStackValue>(src: &mut &[u8], min: usize) -> Option<Vec<T>> {
    let n = u32::get(src)? as usize;
    if n > src.len() / min {
        return None;
    }
    (0..n).map(|_| T::get(src)).collect()
}

/// The interface whose every function the `kv` shapes carry.
pub(super) const KV_STORE: &str = "lrpc:kv/store";

/// `lrpc:kv/store`'s shapes.
pub(super) mod kv {
    use super::super::codec::AStackValue;
    use wasmtime::component::{ComponentType, Lift, Lower};

    /// `kind`.
    #[derive(ComponentType, Lift, Lower, Clone, Copy, Debug, PartialEq, Eq)]
    #[component(enum)]
    #[repr(u8)]
    pub(in crate::component) enum Kind {
        #[component(name = "text")]
        Text,
        #[component(name = "binary")]
        Binary,
    }

    // `access`.
    wasmtime::component::flags! {
        Access {
            #[component(name = "read")]
            const READ;
            #[component(name = "write")]
            const WRITE;
            #[component(name = "scan")]
            const SCAN;
        }
    }

    /// `entry`.
    #[derive(ComponentType, Lift, Lower, Clone, Debug, PartialEq, Eq)]
    #[component(record)]
    pub(in crate::component) struct Entry {
        key: String,
        value: Vec<u8>,
        kind: Kind,
        version: u64,
    }

    /// `error`.
    #[derive(ComponentType, Lift, Lower, Clone, Debug, PartialEq, Eq)]
    #[component(variant)]
    pub(in crate::component) enum Error {
        #[component(name = "not-found")]
        NotFound(String),
        #[component(name = "too-large")]
        TooLarge(u32),
        #[component(name = "invalid-key")]
        InvalidKey,
        #[component(name = "denied")]
        Denied(Access),
    }

    /// Takes one byte off the front of `src`.
    fn byte(src: &mut &[u8]) -> Option<u8> {
        let (&b, rest) = src.split_first()?;
        *src = rest;
        Some(b)
    }

    impl AStackValue for Kind {
        fn put(&self, out: &mut Vec<u8>) {
            out.push(*self as u8);
        }
        fn get(src: &mut &[u8]) -> Option<Kind> {
            match byte(src)? {
                0 => Some(Kind::Text),
                1 => Some(Kind::Binary),
                _ => None,
            }
        }
    }

    impl AStackValue for Access {
        fn put(&self, out: &mut Vec<u8>) {
            let bit = |f: Access, b: u8| if self.contains(f) { b } else { 0 };
            out.push(bit(Access::READ, 1) | bit(Access::WRITE, 2) | bit(Access::SCAN, 4));
        }
        fn get(src: &mut &[u8]) -> Option<Access> {
            let b = byte(src)?;
            if b & !0b111 != 0 {
                return None;
            }
            let mut a = Access::default();
            for (bit, f) in [(1, Access::READ), (2, Access::WRITE), (4, Access::SCAN)] {
                if b & bit != 0 {
                    a |= f;
                }
            }
            Some(a)
        }
    }

    impl AStackValue for Entry {
        fn put(&self, out: &mut Vec<u8>) {
            self.key.put(out);
            self.value.put(out);
            self.kind.put(out);
            self.version.put(out);
        }
        fn get(src: &mut &[u8]) -> Option<Entry> {
            Some(Entry {
                key: String::get(src)?,
                value: Vec::<u8>::get(src)?,
                kind: Kind::get(src)?,
                version: u64::get(src)?,
            })
        }
    }

    impl AStackValue for Error {
        fn put(&self, out: &mut Vec<u8>) {
            match self {
                Error::NotFound(k) => {
                    out.push(0);
                    k.put(out);
                }
                Error::TooLarge(n) => {
                    out.push(1);
                    n.put(out);
                }
                Error::InvalidKey => out.push(2),
                Error::Denied(a) => {
                    out.push(3);
                    a.put(out);
                }
            }
        }
        fn get(src: &mut &[u8]) -> Option<Error> {
            Some(match byte(src)? {
                0 => Error::NotFound(String::get(src)?),
                1 => Error::TooLarge(u32::get(src)?),
                2 => Error::InvalidKey,
                3 => Error::Denied(Access::get(src)?),
                _ => return None,
            })
        }
    }

    impl<T: AStackValue> AStackValue for Result<T, Error> {
        fn put(&self, out: &mut Vec<u8>) {
            match self {
                Ok(v) => {
                    out.push(0);
                    v.put(out);
                }
                Err(e) => {
                    out.push(1);
                    e.put(out);
                }
            }
        }
        fn get(src: &mut &[u8]) -> Option<Self> {
            match byte(src)? {
                0 => T::get(src).map(Ok),
                1 => Error::get(src).map(Err),
                _ => None,
            }
        }
    }

    impl AStackValue for Option<String> {
        fn put(&self, out: &mut Vec<u8>) {
            match self {
                None => out.push(0),
                Some(s) => {
                    out.push(1);
                    s.put(out);
                }
            }
        }
        fn get(src: &mut &[u8]) -> Option<Self> {
            match byte(src)? {
                0 => Some(None),
                1 => String::get(src).map(Some),
                _ => None,
            }
        }
    }

    impl AStackValue for Vec<String> {
        fn put(&self, out: &mut Vec<u8>) {
            super::put_list(self, out);
        }
        fn get(src: &mut &[u8]) -> Option<Self> {
            // Each string takes at least its length.
            super::get_list(src, 4)
        }
    }

    impl AStackValue for bool {
        fn put(&self, out: &mut Vec<u8>) {
            out.push(u8::from(*self));
        }
        fn get(src: &mut &[u8]) -> Option<bool> {
            match byte(src)? {
                0 => Some(false),
                1 => Some(true),
                _ => None,
            }
        }
    }

    impl AStackValue for char {
        fn put(&self, out: &mut Vec<u8>) {
            u32::from(*self).put(out);
        }
        fn get(src: &mut &[u8]) -> Option<char> {
            char::from_u32(u32::get(src)?)
        }
    }

    impl AStackValue for i64 {
        fn put(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.to_le_bytes());
        }
        fn get(src: &mut &[u8]) -> Option<i64> {
            u64::get(src).map(|v| v as i64)
        }
    }

    impl AStackValue for f64 {
        fn put(&self, out: &mut Vec<u8>) {
            out.extend_from_slice(&self.to_bits().to_le_bytes());
        }
        fn get(src: &mut &[u8]) -> Option<f64> {
            u64::get(src).map(f64::from_bits)
        }
    }

    impl AStackValue for (u32, u64) {
        fn put(&self, out: &mut Vec<u8>) {
            self.0.put(out);
            self.1.put(out);
        }
        fn get(src: &mut &[u8]) -> Option<Self> {
            Some((u32::get(src)?, u64::get(src)?))
        }
    }

    impl AStackValue for (char, i64, f64) {
        fn put(&self, out: &mut Vec<u8>) {
            self.0.put(out);
            self.1.put(out);
            self.2.put(out);
        }
        fn get(src: &mut &[u8]) -> Option<Self> {
            Some((char::get(src)?, i64::get(src)?, f64::get(src)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::codec::{AStackTuple as _, AStackValue};
    use super::HTTP_PLUGIN;
    use super::strings::*;
    use lrpc_presentation::layout::Extent;
    use wasmtime::component::Val;

    fn plan() -> lrpc_presentation::InterfacePlan {
        let wit = lrpc_presentation::Wit::load_sources(&[(
            "http.wit",
            include_str!("../../../wit/http.wit"),
        )])
        .unwrap();
        wit.interface(HTTP_PLUGIN).unwrap()
    }

    fn s(v: &str) -> Val {
        Val::String(v.into())
    }

    fn head_val() -> Val {
        let header =
            |n: &str, v: &str| Val::Record(vec![("name".into(), s(n)), ("value".into(), s(v))]);
        Val::Record(vec![
            ("method".into(), s("POST")),
            ("path".into(), s("/a/b?c")),
            (
                "headers".into(),
                Val::List(vec![header("host", "x"), header("zoë", "ü")]),
            ),
        ])
    }

    fn head() -> Head {
        let header = |n: &str, v: &str| Header {
            name: n.into(),
            value: v.into(),
        };
        Head {
            method: "POST".into(),
            path: "/a/b?c".into(),
            headers: vec![header("host", "x"), header("zoë", "ü")],
        }
    }

    fn bytes(b: &[u8]) -> Val {
        Val::List(b.iter().map(|b| Val::U8(*b)).collect())
    }

    /// The shapes read and write exactly what the dynamic codec does, for the parameters
    /// and each case of the result.
    #[test]
    fn the_shapes_agree_with_the_codec() {
        let plan = plan();
        let p = plan.procs.iter().find(|p| p.name == "handle").unwrap();
        let tys: Vec<&_> = p.params.iter().map(|(_, t)| t).collect();
        let mut want = Vec::new();
        super::super::codec::encode(&plan, &tys, &[head_val(), bytes(b"body")], &mut want).unwrap();
        let mut got = Vec::new();
        (head(), b"body".to_vec()).put_all(&mut got);
        assert_eq!(got, want);
        let back = <(Head, Vec<u8>) as super::super::codec::AStackTuple>::get(&want, Extent::Whole)
            .unwrap();
        assert_eq!(back, (head(), b"body".to_vec()));

        let response = Val::Record(vec![
            ("status".into(), Val::U16(503)),
            ("headers".into(), Val::List(vec![])),
            ("body".into(), bytes(&[0, 255])),
        ]);
        let cases = [
            (
                Val::Variant("continue".into(), Some(Box::new(head_val()))),
                Action::Continue(head()),
            ),
            (
                Val::Variant(
                    "rewrite".into(),
                    Some(Box::new(Val::Tuple(vec![head_val(), bytes(b"new")]))),
                ),
                Action::Rewrite((head(), b"new".to_vec())),
            ),
            (
                Val::Variant("respond".into(), Some(Box::new(response))),
                Action::Respond(Response {
                    status: 503,
                    headers: vec![],
                    body: vec![0, 255],
                }),
            ),
        ];
        let ty = p.result.as_ref().unwrap();
        for (val, action) in cases {
            let mut want = Vec::new();
            super::super::codec::encode(&plan, &[ty], &[val], &mut want).unwrap();
            let mut got = Vec::new();
            action.put(&mut got);
            assert_eq!(got, want, "{action:?}");
            assert_eq!(Action::get(&mut &want[..]), Some(action));
        }
    }

    /// The byte version's shapes agree with its codec, for a value that is not UTF-8 too;
    /// the string version's refuse that value.
    #[test]
    fn byte_values_agree_with_the_codec() {
        use super::bytes as v2;
        let wit = lrpc_presentation::Wit::load_sources(&[(
            "http-bytes.wit",
            include_str!("../../../wit/http-bytes.wit"),
        )])
        .unwrap();
        let plan = wit.interface(super::HTTP_PLUGIN_BYTES).unwrap();
        let p = plan.procs.iter().find(|p| p.name == "handle").unwrap();
        let tys: Vec<&_> = p.params.iter().map(|(_, t)| t).collect();
        let header = Val::Record(vec![
            ("name".into(), s("x-user")),
            ("value".into(), bytes(b"caf\xe9")),
        ]);
        let head_val = Val::Record(vec![
            ("method".into(), s("GET")),
            ("path".into(), s("/")),
            ("headers".into(), Val::List(vec![header])),
        ]);
        let mut want = Vec::new();
        super::super::codec::encode(&plan, &tys, &[head_val, bytes(b"")], &mut want).unwrap();
        let head = v2::Head {
            method: "GET".into(),
            path: "/".into(),
            headers: vec![v2::Header {
                name: "x-user".into(),
                value: b"caf\xe9".to_vec(),
            }],
        };
        let mut got = Vec::new();
        (head.clone(), Vec::<u8>::new()).put_all(&mut got);
        assert_eq!(got, want);
        let back =
            <(v2::Head, Vec<u8>) as super::super::codec::AStackTuple>::get(&want, Extent::Whole);
        assert_eq!(back, Some((head, Vec::new())));
        assert!(
            <(Head, Vec<u8>) as super::super::codec::AStackTuple>::get(&want, Extent::Whole)
                .is_none()
        );
    }

    /// Truncated or lying bytes are refused, never a panic or a large allocation.
    #[test]
    fn malformed_bytes_are_refused() {
        let mut b = Vec::new();
        (head(), b"body".to_vec()).put_all(&mut b);
        for n in 0..b.len() {
            assert!(
                <(Head, Vec<u8>) as super::super::codec::AStackTuple>::get(&b[..n], Extent::Whole)
                    .is_none()
            );
        }
        // A header count of 2^32 - 1 with 8 bytes left.
        let mut lie = Vec::new();
        "GET".to_string().put(&mut lie);
        "/".to_string().put(&mut lie);
        lie.extend_from_slice(&u32::MAX.to_le_bytes());
        lie.extend_from_slice(&[0; 8]);
        assert!(Head::get(&mut &lie[..]).is_none());
        assert!(Action::get(&mut &[3u8][..]).is_none());
    }
}
