//! Static Rust values in the A-stack layout, for the typed paths (`typed`): scalars, strings,
//! lists, options, results and tuples here, the records, variants, enums and flags of the
//! embedded WIT in `generated`. They encode and decode exactly what `codec` does through
//! `Val`s, without a dynamic value per element; a byte list is one copy.
//!
//! Bytes read come from a guest and are untrusted: a list count is not believed beyond what
//! the bytes that remain could hold, tags and discriminants are checked against their range,
//! code points and UTF-8 for validity. A bad value is `None`, never a panic.

use lrpc_presentation::layout::Extent;
use wasmtime::StoreContext;
use wasmtime::component::WasmList;

/// A value in the A-stack layout.
pub(crate) trait AStackValue: Sized {
    /// The fewest bytes a value's encoding takes.
    const MIN: usize;
    /// Appends the encoding.
    fn put(&self, out: &mut Vec<u8>);
    /// The bytes after the length prefix of a string or byte list (written straight from
    /// the value, without an intermediate copy, when it is the last parameter).
    fn tail(&self) -> Option<&[u8]> {
        None
    }
    /// Takes a value off the front of `src`.
    fn get(src: &mut &[u8]) -> Option<Self>;
    /// A list of such values as its bytes, when the values are bytes: one copy, not one
    /// write per element.
    fn as_bytes(list: &[Self]) -> Option<&[u8]> {
        let _ = list;
        None
    }
    /// Takes a list's `n` elements off the front of `src`: a count the bytes that remain can
    /// not hold is refused before anything is allocated.
    fn get_list(src: &mut &[u8], n: usize) -> Option<Vec<Self>> {
        if n > src.len() / Self::MIN.max(1) {
            return None;
        }
        (0..n).map(|_| Self::get(src)).collect()
    }
}

/// The value a failed call answers where its type has no error channel (see `failure`): 0,
/// an empty string or list, `none`, `ok` of zero, a record of zeros, a variant's or enum's
/// first case, no flags.
pub(crate) trait Zero {
    /// The zero value.
    fn zero() -> Self;
}

/// Takes `n` bytes off the front of `src`.
fn take<'a>(src: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    let (head, rest) = src.split_at_checked(n)?;
    *src = rest;
    Some(head)
}

/// Appends a discriminant or flag bits, `size` bytes (1, 2 or 4) little endian.
pub(crate) fn disc_put(out: &mut Vec<u8>, size: usize, v: u32) {
    out.extend_from_slice(&v.to_le_bytes()[..size]);
}

/// Takes a discriminant or flag bits of `size` bytes (1, 2 or 4) off the front of `src`.
pub(crate) fn disc_get(src: &mut &[u8], size: usize) -> Option<u32> {
    let mut b = [0u8; 4];
    b.get_mut(..size)?.copy_from_slice(take(src, size)?);
    Some(u32::from_le_bytes(b))
}

/// Integers and floats: their width, little endian.
macro_rules! numbers {
    ($($t:ty),*) => {$(
        impl AStackValue for $t {
            const MIN: usize = size_of::<$t>();
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(src: &mut &[u8]) -> Option<$t> {
                Some(<$t>::from_le_bytes(take(src, size_of::<$t>())?.try_into().ok()?))
            }
        }

        impl Zero for $t {
            fn zero() -> $t {
                0 as $t
            }
        }
    )*};
}

numbers!(u16, u32, u64, i8, i16, i32, i64, f32, f64);

impl AStackValue for u8 {
    const MIN: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(*self);
    }
    fn get(src: &mut &[u8]) -> Option<u8> {
        Some(take(src, 1)?[0])
    }
    fn as_bytes(list: &[u8]) -> Option<&[u8]> {
        Some(list)
    }
    fn get_list(src: &mut &[u8], n: usize) -> Option<Vec<u8>> {
        take(src, n).map(<[u8]>::to_vec)
    }
}

impl Zero for u8 {
    fn zero() -> u8 {
        0
    }
}

impl AStackValue for bool {
    const MIN: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }
    fn get(src: &mut &[u8]) -> Option<bool> {
        match u8::get(src)? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }
}

impl Zero for bool {
    fn zero() -> bool {
        false
    }
}

impl AStackValue for char {
    const MIN: usize = 4;
    fn put(&self, out: &mut Vec<u8>) {
        u32::from(*self).put(out);
    }
    fn get(src: &mut &[u8]) -> Option<char> {
        char::from_u32(u32::get(src)?)
    }
}

impl Zero for char {
    fn zero() -> char {
        '\0'
    }
}

impl AStackValue for String {
    const MIN: usize = 4;
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

impl Zero for String {
    fn zero() -> String {
        String::new()
    }
}

impl<T: AStackValue> AStackValue for Vec<T> {
    const MIN: usize = 4;
    fn put(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.len() as u32).to_le_bytes());
        match T::as_bytes(self) {
            Some(bytes) => out.extend_from_slice(bytes),
            None => self.iter().for_each(|e| e.put(out)),
        }
    }
    fn tail(&self) -> Option<&[u8]> {
        T::as_bytes(self)
    }
    fn get(src: &mut &[u8]) -> Option<Vec<T>> {
        let n = u32::get(src)? as usize;
        T::get_list(src, n)
    }
}

impl<T> Zero for Vec<T> {
    fn zero() -> Vec<T> {
        Vec::new()
    }
}

impl<T: AStackValue> AStackValue for Option<T> {
    const MIN: usize = 1;
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.put(out);
            }
        }
    }
    fn get(src: &mut &[u8]) -> Option<Option<T>> {
        match u8::get(src)? {
            0 => Some(None),
            1 => T::get(src).map(Some),
            _ => None,
        }
    }
}

impl<T> Zero for Option<T> {
    fn zero() -> Option<T> {
        None
    }
}

impl<T: AStackValue, E: AStackValue> AStackValue for Result<T, E> {
    const MIN: usize = 1;
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
    fn get(src: &mut &[u8]) -> Option<Result<T, E>> {
        match u8::get(src)? {
            0 => T::get(src).map(Ok),
            1 => E::get(src).map(Err),
            _ => None,
        }
    }
}

impl<T: Zero, E> Zero for Result<T, E> {
    fn zero() -> Result<T, E> {
        Ok(T::zero())
    }
}

/// `()`: a `result`'s side without a payload.
impl AStackValue for () {
    const MIN: usize = 0;
    fn put(&self, _: &mut Vec<u8>) {}
    fn get(_: &mut &[u8]) -> Option<()> {
        Some(())
    }
}

impl Zero for () {
    fn zero() {}
}

/// A parameter of a typed function as the host function received it: an owned value (any
/// [`AStackValue`]), or a byte list still in the calling component's memory
/// (`WasmList<u8>`, read through `store`, the caller's store). Encoded in the layout of
/// [`AStackValue::put`].
pub(crate) trait AStackArg {
    /// Appends the encoding.
    fn put_in<D: 'static>(&self, store: &StoreContext<'_, D>, out: &mut Vec<u8>);
    /// The bytes after the length prefix of a string or byte list, written straight from
    /// where they are when the value is the last parameter.
    fn tail_in<'a, D: 'static>(&'a self, store: &'a StoreContext<'_, D>) -> Option<&'a [u8]>;
}

impl<T: AStackValue> AStackArg for T {
    fn put_in<D: 'static>(&self, _: &StoreContext<'_, D>, out: &mut Vec<u8>) {
        self.put(out);
    }
    fn tail_in<'a, D: 'static>(&'a self, _: &'a StoreContext<'_, D>) -> Option<&'a [u8]> {
        self.tail()
    }
}

impl AStackArg for WasmList<u8> {
    fn put_in<D: 'static>(&self, store: &StoreContext<'_, D>, out: &mut Vec<u8>) {
        let b = self.as_le_slice(store);
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    fn tail_in<'a, D: 'static>(&'a self, store: &'a StoreContext<'_, D>) -> Option<&'a [u8]> {
        Some(self.as_le_slice(store))
    }
}

/// The parameters of a typed function, a tuple of up to six [`AStackArg`]s.
pub(crate) trait AStackArgs: Sized {
    /// Encodes all but the last value's data into `head`; returns that data (see
    /// [`AStackArg::tail_in`]), to be written after `head`. `store` is the caller's.
    fn split<'a, D: 'static>(
        &'a self,
        store: &'a StoreContext<'_, D>,
        head: &mut Vec<u8>,
    ) -> &'a [u8];
}

/// Values of the typed path as a tuple of up to six: a typed function's results, or the
/// parameters a server decodes.
pub(crate) trait AStackTuple: Sized {
    /// Takes the values off the front of `src`.
    fn take(src: &mut &[u8]) -> Option<Self>;
    /// Decodes from `src`, which the values take `extent` of.
    fn get(mut src: &[u8], extent: Extent) -> Option<Self> {
        let v = Self::take(&mut src)?;
        extent.check(src.len()).ok().map(|()| v)
    }
    /// Appends the encoding of every value.
    fn put_all(&self, out: &mut Vec<u8>);
}

/// The last value: its length prefix into `head` and its data apart, or all of it into
/// `head`.
fn split_last<'a, T: AStackArg, D: 'static>(
    v: &'a T,
    store: &'a StoreContext<'_, D>,
    head: &mut Vec<u8>,
) -> &'a [u8] {
    match v.tail_in(store) {
        Some(t) if u32::try_from(t.len()).is_ok() => {
            head.extend_from_slice(&(t.len() as u32).to_le_bytes());
            t
        }
        // Over 4 GiB can not be described; the server refuses what arrives.
        Some(_) => &[],
        None => {
            v.put_in(store, head);
            &[]
        }
    }
}

impl AStackArgs for () {
    fn split<'a, D: 'static>(&'a self, _: &'a StoreContext<'_, D>, _: &mut Vec<u8>) -> &'a [u8] {
        &[]
    }
}

impl AStackTuple for () {
    fn take(_: &mut &[u8]) -> Option<()> {
        Some(())
    }
    fn put_all(&self, _: &mut Vec<u8>) {}
}

/// The tuple traits for tuples of the given element names, the last one apart.
macro_rules! tuples {
    ($(($($a:ident)*; $last:ident))*) => {$(
        impl<$($a: AStackArg,)* $last: AStackArg> AStackArgs for ($($a,)* $last,) {
            #[allow(non_snake_case)]
            fn split<'a, Data: 'static>(
                &'a self,
                store: &'a StoreContext<'_, Data>,
                head: &mut Vec<u8>,
            ) -> &'a [u8] {
                let ($($a,)* $last,) = self;
                $($a.put_in(store, head);)*
                split_last($last, store, head)
            }
        }

        impl<$($a: AStackValue,)* $last: AStackValue> AStackTuple for ($($a,)* $last,) {
            fn take(src: &mut &[u8]) -> Option<Self> {
                Some(($($a::get(src)?,)* $last::get(src)?,))
            }
            #[allow(non_snake_case)]
            fn put_all(&self, out: &mut Vec<u8>) {
                let ($($a,)* $last,) = self;
                $($a.put(out);)*
                $last.put(out);
            }
        }

        /// A `tuple<...>` of WIT.
        impl<$($a: AStackValue,)* $last: AStackValue> AStackValue for ($($a,)* $last,) {
            const MIN: usize = 0 $(+ $a::MIN)* + $last::MIN;
            fn put(&self, out: &mut Vec<u8>) {
                self.put_all(out);
            }
            fn get(src: &mut &[u8]) -> Option<Self> {
                <Self as AStackTuple>::take(src)
            }
        }

        impl<$($a: Zero,)* $last: Zero> Zero for ($($a,)* $last,) {
            fn zero() -> Self {
                ($($a::zero(),)* $last::zero(),)
            }
        }
    )*};
}

tuples! {
    (; A)
    (A; B)
    (A B; C)
    (A B C; D)
    (A B C D; E)
    (A B C D E; F)
}

#[cfg(test)]
mod tests {
    use super::super::codec::encode;
    use super::super::codec::tests::kv;
    use super::*;
    use lrpc_presentation::{InterfacePlan, Prim, Ty};
    use wasmtime::component::Val;

    fn tys(plan: &InterfacePlan, f: &str) -> Vec<Ty> {
        let p = plan.procs.iter().find(|p| p.name == f).expect("function");
        p.params.iter().map(|(_, t)| t.clone()).collect()
    }

    #[test]
    fn the_typed_encoding_is_the_same() {
        let plan = kv();
        let params = tys(&plan, "put");
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
        let whole = Extent::Whole;
        assert_eq!(
            <(String, Vec<u8>) as AStackTuple>::get(&typed, whole),
            Some(v)
        );
        assert_eq!(<(u32,) as AStackTuple>::get(&[1, 0, 0, 0, 9], whole), None);
        assert_eq!(
            <(u32,) as AStackTuple>::get(&[1, 0, 0, 0, 9], Extent::Prefix),
            Some((1,))
        );
        assert_eq!(
            <(String,) as AStackTuple>::get(&[1, 0, 0, 0, 0xff], whole),
            None
        );
        assert_eq!(
            <(Vec<u8>,) as AStackTuple>::get(&[9, 0, 0, 0, 1], whole),
            None
        );
    }

    /// Scalars, options, results, tuples and lists of lists agree with the dynamic codec.
    #[test]
    fn compound_values_agree_with_the_codec() {
        let plan = kv();
        let list = |t: Ty| Ty::List(Box::new(t));
        let ty = Ty::Tuple(vec![
            Ty::Prim(Prim::S16),
            Ty::Option(Box::new(Ty::Prim(Prim::Bool))),
            Ty::Result(Some(Box::new(Ty::Prim(Prim::F32))), None),
            list(list(Ty::Prim(Prim::U8))),
            Ty::Prim(Prim::Char),
        ]);
        let val = Val::Tuple(vec![
            Val::S16(-2),
            Val::Option(Some(Box::new(Val::Bool(true)))),
            Val::Result(Ok(Some(Box::new(Val::Float32(0.5))))),
            Val::List(vec![Val::List(vec![Val::U8(7)]), Val::List(vec![])]),
            Val::Char('é'),
        ]);
        type T = (i16, Option<bool>, Result<f32, ()>, Vec<Vec<u8>>, char);
        let typed: T = (-2, Some(true), Ok(0.5), vec![vec![7], vec![]], 'é');
        let mut want = Vec::new();
        encode(&plan, &[&ty], &[val], &mut want).expect("encode");
        let mut got = Vec::new();
        AStackValue::put(&typed, &mut got);
        assert_eq!(got, want);
        assert_eq!(AStackValue::get(&mut &want[..]), Some(typed));
        // Every cut of it is refused, and so are a bad bool and a bad result tag.
        for n in 0..want.len() {
            assert_eq!(<T as AStackValue>::get(&mut &want[..n]), None);
        }
        assert_eq!(<Option<bool>>::get(&mut &[1u8, 2][..]), None);
        assert_eq!(<Result<u8, ()>>::get(&mut &[2u8][..]), None);
        // A count of 2^32 - 1 strings with 8 bytes left: refused, nothing allocated.
        let mut lie = u32::MAX.to_le_bytes().to_vec();
        lie.extend_from_slice(&[0; 8]);
        assert_eq!(<Vec<String>>::get(&mut &lie[..]), None);
    }
}
