//! The stubs of the WIT that uses every supported type (`presentation/tests/wit/kitchen.wit`)
//! under a server presentation with `types = "borrowed"` (golden file
//! `presentation/tests/golden/lrpc_kitchen_sink_borrowed.rs.txt`) compile against this SDK
//! without warnings: a server whose handlers hand back what they were lent, and clients whose
//! results are owned.

include!("../../../presentation/tests/golden/lrpc_kitchen_sink_borrowed.rs.txt");

include!("shared/scalar_handlers.rs");

use sink::{Color, Everything, Huge, Point, Shape, Small, Wide};
use std::borrow::Cow;

#[derive(Default)]
struct Sink;

impl sink::Server for Sink {
    scalar_handlers!();

    /// Lent names come back inside the shapes without a copy.
    fn shapes<'a>(
        &self,
        s: Shape<'a>,
        ps: Vec<Point>,
        names: Vec<Cow<'a, str>>,
        _: Vec<Cow<'a, [u8]>>,
    ) -> Vec<Shape<'a>> {
        let mut out = vec![s, Shape::Poly(ps)];
        out.extend(names.into_iter().map(Shape::Named));
        out
    }

    fn results<'a>(
        &self,
        _: Result<(), ()>,
        b: Result<u32, ()>,
        c: Result<(), Cow<'a, str>>,
    ) -> Option<Result<Cow<'a, str>, Shape<'a>>> {
        b.ok()
            .map(|_| c.map(|()| Cow::Borrowed("")).map_err(Shape::Named))
    }

    fn round_trip<'a>(&self, e: Everything<'a>) -> Everything<'a> {
        e
    }

    fn r#loop(&self, r#type: u32, r#move: u32, self_: u32) -> (u32,) {
        (r#type ^ r#move ^ self_,)
    }

    fn nothing(&self) {}

    fn echo_text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        Cow::Borrowed(s)
    }

    fn echo_bytes<'a>(&self, b: &'a [u8]) -> Cow<'a, [u8]> {
        Cow::Borrowed(b)
    }
}

sink::export!(Sink);

/// What a client passes by reference may borrow anything; what it receives is `'static`.
#[test]
fn clients_pass_borrowed_values_and_receive_owned_ones() {
    let local = String::from("local");
    let shape = Shape::Named(Cow::Borrowed(&local));
    assert_eq!(shape, Shape::Named("local".into()));
    assert_ne!(shape, Shape::Named(Cow::Owned("other".to_string())));
    let owned: fn(&sink::Client, &Shape<'_>) -> Result<Vec<Shape<'static>>, sink::CallError> =
        |c, s| c.shapes(s, &[], &[], &[]);
    let text: fn(&sink::Client, &str) -> Result<String, sink::CallError> = sink::Client::echo_text;
    let bytes: fn(&sink::Client, &[u8]) -> Result<Vec<u8>, sink::CallError> =
        sink::Client::echo_bytes;
    let _ = (owned, text, bytes);
    assert_eq!(
        sink::Client::bind().err(),
        Some(lrpc_sdk::CallError::NoCall)
    );
}
