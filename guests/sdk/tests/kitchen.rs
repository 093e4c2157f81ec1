//! The stubs the stub compiler generates for a WIT that uses every supported type
//! (`presentation/tests/wit/kitchen.wit`) and for a versioned package
//! (`presentation/tests/wit/versioned.wit`), golden files in `presentation/tests/golden/`,
//! compile against this SDK without warnings, client and server halves, and their types behave.

include!("../../../presentation/tests/golden/lrpc_kitchen_sink.rs.txt");
include!("../../../presentation/tests/golden/lrpc_versioned_shapes_0_1_0.rs.txt");

include!("shared/scalar_handlers.rs");

use sink::{Color, Everything, Huge, Point, Shape, Small, Wide};

#[derive(Default)]
struct Sink;

impl sink::Server for Sink {
    scalar_handlers!();

    fn shapes(&self, s: Shape, ps: Vec<Point>, names: Vec<String>, _: Vec<Vec<u8>>) -> Vec<Shape> {
        vec![s, Shape::Poly(ps), Shape::Named(names.concat())]
    }

    fn results(
        &self,
        _: Result<(), ()>,
        b: Result<u32, ()>,
        c: Result<(), String>,
    ) -> Option<Result<String, Shape>> {
        b.ok()
            .map(|_| c.map(|()| String::new()).map_err(Shape::Named))
    }

    fn round_trip(&self, e: Everything) -> Everything {
        e
    }

    fn r#loop(&self, r#type: u32, r#move: u32, self_: u32) -> (u32,) {
        (r#type ^ r#move ^ self_,)
    }

    fn nothing(&self) {}

    fn echo_text(&self, s: &str) -> String {
        s.to_owned()
    }

    fn echo_bytes(&self, b: &[u8]) -> Vec<u8> {
        b.to_vec()
    }
}

sink::export!(Sink);

#[test]
fn flags_of_every_width_keep_to_their_flags() {
    assert_eq!(Small::all().bits(), 0b111);
    assert_eq!(Small::from_bits(0b1000), None, "an unknown bit is refused");
    assert!((Small::A | Small::C).contains(Small::C));
    assert!(!(Small::A | Small::C).contains(Small::B));

    assert_eq!(Wide::W39.bits(), 1 << 39);
    assert_eq!(Wide::all().bits(), (1 << 40) - 1);
    assert_eq!(Wide::from_bits(1 << 40), None);

    assert_eq!(Huge::H69.bits(), 1 << 69);
    assert_eq!(Huge::all().bits(), (1 << 70) - 1);
    assert_eq!(Huge::from_bits(1 << 70), None);
    assert_eq!(Huge::from_bits(1 << 69), Some(Huge::H69));
    assert_eq!(Huge::empty().bits(), 0);
}

#[test]
fn the_interface_constants_number_procedures_in_declaration_order() {
    assert_eq!(sink::INTERFACE, "lrpc:kitchen/sink");
    assert_eq!(sink::PROCS, 9);
    assert_eq!(sink::PROC_SCALARS, 0);
    assert_eq!(sink::PROC_LOOP, 5);
    assert_eq!(sink::PROC_NOTHING, 6);
    assert_eq!(sink::PROC_ECHO_BYTES, 8);
}

#[test]
fn without_a_kernel_clients_fail_with_a_typed_error() {
    assert_eq!(
        sink::Client::bind().err(),
        Some(lrpc_sdk::CallError::NoCall)
    );
}

#[derive(Default)]
struct Versioned;

impl shapes::Server for Versioned {
    fn transform(
        &self,
        shapes: Vec<Option<shapes::Shape>>,
        mask: shapes::Wide,
    ) -> Result<Vec<Result<Option<shapes::Shape>, shapes::Failure>>, shapes::Failure> {
        if mask.contains(shapes::Wide::BIT39) {
            return Err(shapes::Failure::Other);
        }
        Ok(shapes
            .into_iter()
            .map(|s| match s {
                Some(shapes::Shape::Label(l)) if l.is_empty() => Err(shapes::Failure::BadName(l)),
                Some(shapes::Shape::Path(p)) if p.len() > 8 => {
                    Err(shapes::Failure::TooBig(p.len() as u64))
                }
                s => Ok(s),
            })
            .collect())
    }

    versioned_scalar_handlers!();
}

shapes::export!(Versioned);

#[test]
fn a_versioned_interface_keeps_its_version_in_its_name_only() {
    assert_eq!(shapes::INTERFACE, "lrpc:versioned/shapes@0.1.0");
    assert_eq!(shapes::PROCS, 3);
    assert_eq!(shapes::PROC_TWENTY, 1);
    assert_eq!(shapes::Wide::BIT39.bits(), 1 << 39);
    assert_eq!(shapes::Wide::all().bits(), (1 << 40) - 1);
    assert_eq!(shapes::Wide::from_bits(1 << 40), None);
    let nested = shapes::Shape::Nested(Some(Err("no".into())));
    assert_ne!(nested, shapes::Shape::Nested(None));
    assert_eq!(
        shapes::Client::bind().err(),
        Some(lrpc_sdk::CallError::NoCall)
    );
}
