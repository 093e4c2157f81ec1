//! The stubs of the WITs that use every supported type (`presentation/tests/wit/`) under a
//! server presentation with `types = "borrowed"` (golden files
//! `presentation/tests/golden/*_borrowed.rs.txt`) compile against this SDK without warnings:
//! servers whose handlers hand back what they were lent, clients whose results are owned, and
//! `into_owned` detaching a value from what it borrowed.

include!("../../../presentation/tests/golden/lrpc_kitchen_sink_borrowed.rs.txt");
include!("../../../presentation/tests/golden/lrpc_versioned_shapes_borrowed.rs.txt");

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

/// `into_owned` copies every borrowed string and byte list, nested in lists, tuples, options
/// and results, and keeps everything else as it was.
#[test]
fn into_owned_detaches_a_value_from_what_it_borrowed() {
    let text = String::from("borrowed");
    let everything = Everything {
        flag: true,
        r#type: 1,
        small_int: -2,
        half: 3,
        signed_half: -4,
        word: 5,
        signed_word: -6,
        long: 7,
        signed_long: -8,
        single: 9.5,
        double: -10.25,
        letter: 'λ',
        color: Color::Blue,
        small: Small::A | Small::C,
        wide: Wide::W39,
        huge: Huge::H69,
        point: Some(Point { x: 1, y: -1 }),
        pair: (11, Cow::Borrowed(&text)),
        shapes: vec![
            Shape::Named(Cow::Borrowed(&text[..4])),
            Shape::Poly(vec![Point { x: 2, y: 3 }]),
            Shape::Circle(1.5),
            Shape::Nothing,
        ],
    };
    let owned: Everything<'static> = everything.clone().into_owned();
    assert!(matches!(owned.pair.1, Cow::Owned(_)));
    assert!(matches!(&owned.shapes[0], Shape::Named(Cow::Owned(n)) if n == "borr"));
    drop(text);
    assert_eq!(owned.pair.1, "borrowed");
    assert_eq!(owned.letter, 'λ');
    assert_eq!(owned.shapes[1], Shape::Poly(vec![Point { x: 2, y: 3 }]));

    let label = String::from("nested");
    let nested = shapes::Shape::Nested(Some(Err(Cow::Borrowed(&label))));
    let failure = shapes::Failure::BadName(Cow::Borrowed(&label));
    let (nested, failure) = (nested.into_owned(), failure.into_owned());
    drop(label);
    assert_eq!(nested, shapes::Shape::Nested(Some(Err("nested".into()))));
    assert_eq!(failure, shapes::Failure::BadName("nested".into()));
    assert_eq!(
        shapes::Shape::Path(vec![]).into_owned(),
        shapes::Shape::Path(vec![])
    );
}

#[derive(Default)]
struct Versioned;

impl shapes::Server for Versioned {
    /// Labels come back lent; an empty one fails with the label it was given.
    fn transform<'a>(
        &self,
        shapes: Vec<Option<shapes::Shape<'a>>>,
        mask: shapes::Wide,
    ) -> Result<Vec<Result<Option<shapes::Shape<'a>>, shapes::Failure<'a>>>, shapes::Failure<'a>>
    {
        if mask.contains(shapes::Wide::BIT39) {
            return Err(shapes::Failure::Other);
        }
        Ok(shapes
            .into_iter()
            .map(|s| match s {
                Some(shapes::Shape::Label(l)) if l.is_empty() => Err(shapes::Failure::BadName(l)),
                s => Ok(s),
            })
            .collect())
    }

    versioned_scalar_handlers!();
}

shapes::export!(Versioned);
