//! Client-encode → server-decode → reply, against wasmtime's canonical ABI.
//!
//! A value of the kitchen-sink interface's `everything` record (every scalar, `char`, NaN
//! and negative-zero bit patterns, non-ASCII strings, an enum, flags of three widths, an
//! option of a record, a tuple, a list of a variant with a list payload) goes two ways:
//!
//! 1. **lrpc**: through a real kernel, from a client domain of the `fuzz/guest` module to a
//!    server domain of the same module: the generated client stub encodes it on an A-stack
//!    (or an out-of-band segment), the generated server entry stub decodes it, the server
//!    records what it got and returns it, the client stub decodes the reply. The host hands
//!    the value in and reads both results back as *tapes* (a plain serialization of the
//!    record, written here and in the guest independently of the stubs' encoding). The
//!    client domain is one of three: default presentation, `leaky` (alike on pairwise A-stacks),
//!    and `leaky+unprotected` (the direct-linked path).
//! 2. **component model**: as a `wasmtime::component::Val` through a component whose export
//!    `echo: func(e: everything) -> everything` is lifted from a core function returning its
//!    argument pointer: the canonical ABI lowers the value into the component's memory and
//!    lifts the same bytes back as the result, so what comes back is exactly what the
//!    canonical ABI carries for that type.
//!
//! All three (the input, what the lrpc server received, what the lrpc client got back) must
//! be bit-for-bit equal, and equal to what wasmtime carried. The component model allows at
//! most 32 flags per `flags` type, so the 40- and 70-flag fields are compared on the lrpc
//! side only.
//!
//! `result` types are covered by a second call, `results`, whose server answers a fixed
//! function of its arguments: the client must receive exactly that (lrpc side only).

use arbitrary::Arbitrary;
use lrpc_kernel::{Domain, DomainOptions, Kernel};
use std::sync::OnceLock;
use wasmtime::component::{Component, Linker, Val};
use wasmtime::{Config, Engine, Store};

/// The `fuzz/guest` module: client and server of `lrpc:kitchen/sink`.
pub const KITCHEN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/fuzz_kitchen.wasm"));

/// A point.
pub type Point = (i32, i32);

/// The variant `shape`.
#[derive(Debug, Clone, Arbitrary)]
pub enum Shape {
    /// `nothing`.
    Nothing,
    /// `circle(f32)`.
    Circle(f32),
    /// `poly(list<point>)`.
    Poly(Vec<Point>),
    /// `named(string)`.
    Named(String),
}

/// The record `everything`, as the fuzzer makes it (normalized by [`Everything::fix`]).
#[derive(Debug, Clone, Arbitrary)]
#[allow(missing_docs, reason = "the WIT record's fields")]
pub struct Everything {
    pub flag: bool,
    pub ty: u8,
    pub small_int: i8,
    pub half: u16,
    pub signed_half: i16,
    pub word: u32,
    pub signed_word: i32,
    pub long: u64,
    pub signed_long: i64,
    pub single: f32,
    pub double: f64,
    pub letter: char,
    pub color: u8,
    pub small: u8,
    pub wide: u64,
    pub huge: u128,
    pub point: Option<Point>,
    pub pair: (u8, String),
    pub shapes: Vec<Shape>,
}

/// One round trip: the value and the client domain to send it from.
#[derive(Debug, Arbitrary)]
pub struct RoundTripInput {
    /// Client domain, modulo three.
    pub client: u8,
    /// The value.
    pub value: Everything,
    /// Extra text appended to the tuple's string, to push the request out of band.
    pub long: Option<(char, u16)>,
    /// Also a call of `results` (`result` types of every shape), checked against what its
    /// server computes.
    pub results: Option<ResultsArgs>,
}

/// The arguments of `results: func(a: result, b: result<u32>, c: result<_, string>)`.
#[derive(Debug, Clone, Arbitrary)]
pub struct ResultsArgs {
    /// `a`.
    pub a: Result<(), ()>,
    /// `b`.
    pub b: Result<u32, ()>,
    /// `c`.
    pub c: Result<(), String>,
}

impl ResultsArgs {
    /// The input tape of the guest's `fuzz_results`.
    pub fn tape(&self) -> Vec<u8> {
        let mut o = vec![u8::from(self.a.is_err())];
        match self.b {
            Ok(x) => {
                o.push(0);
                o.extend_from_slice(&x.to_le_bytes());
            }
            Err(()) => o.push(1),
        }
        match &self.c {
            Ok(()) => o.push(0),
            Err(s) => {
                o.push(1);
                o.extend_from_slice(&(s.len() as u32).to_le_bytes());
                o.extend_from_slice(s.as_bytes());
            }
        }
        o
    }

    /// The reply's tape the kitchen server must produce: `b.ok().map(|_| c.map(|()| "")
    /// .map_err(shape::named))`.
    pub fn expected(&self) -> Vec<u8> {
        let str_tape = |o: &mut Vec<u8>, s: &str| {
            o.extend_from_slice(&(s.len() as u32).to_le_bytes());
            o.extend_from_slice(s.as_bytes());
        };
        match (&self.b, &self.c) {
            (Err(()), _) => vec![0],
            (Ok(_), Ok(())) => {
                let mut o = vec![1, 0];
                str_tape(&mut o, "");
                o
            }
            (Ok(_), Err(s)) => {
                let mut o = vec![1, 1, 3];
                str_tape(&mut o, s);
                o
            }
        }
    }
}

impl Everything {
    /// Brings enum and flags values into their types' ranges.
    pub fn fix(&mut self) {
        self.color %= 3;
        self.small &= 0b111;
        self.wide &= (1 << 40) - 1;
        self.huge &= (1 << 70) - 1;
    }

    /// The tape (see `fuzz/guest/src/lib.rs`).
    pub fn tape(&self) -> Vec<u8> {
        let mut o = Vec::new();
        let s = |o: &mut Vec<u8>, s: &str| {
            o.extend_from_slice(&(s.len() as u32).to_le_bytes());
            o.extend_from_slice(s.as_bytes());
        };
        let p = |o: &mut Vec<u8>, p: &Point| {
            o.extend_from_slice(&p.0.to_le_bytes());
            o.extend_from_slice(&p.1.to_le_bytes());
        };
        o.push(u8::from(self.flag));
        o.push(self.ty);
        o.extend_from_slice(&self.small_int.to_le_bytes());
        o.extend_from_slice(&self.half.to_le_bytes());
        o.extend_from_slice(&self.signed_half.to_le_bytes());
        o.extend_from_slice(&self.word.to_le_bytes());
        o.extend_from_slice(&self.signed_word.to_le_bytes());
        o.extend_from_slice(&self.long.to_le_bytes());
        o.extend_from_slice(&self.signed_long.to_le_bytes());
        o.extend_from_slice(&self.single.to_bits().to_le_bytes());
        o.extend_from_slice(&self.double.to_bits().to_le_bytes());
        o.extend_from_slice(&u32::from(self.letter).to_le_bytes());
        o.push(self.color);
        o.push(self.small);
        o.extend_from_slice(&self.wide.to_le_bytes());
        o.extend_from_slice(&self.huge.to_le_bytes());
        match &self.point {
            None => o.push(0),
            Some(q) => {
                o.push(1);
                p(&mut o, q);
            }
        }
        o.push(self.pair.0);
        s(&mut o, &self.pair.1);
        o.extend_from_slice(&(self.shapes.len() as u32).to_le_bytes());
        for sh in &self.shapes {
            match sh {
                Shape::Nothing => o.push(0),
                Shape::Circle(f) => {
                    o.push(1);
                    o.extend_from_slice(&f.to_bits().to_le_bytes());
                }
                Shape::Poly(ps) => {
                    o.push(2);
                    o.extend_from_slice(&(ps.len() as u32).to_le_bytes());
                    for q in ps {
                        p(&mut o, q);
                    }
                }
                Shape::Named(n) => {
                    o.push(3);
                    s(&mut o, n);
                }
            }
        }
        o
    }

    /// The value as wasmtime's component model sees it (without the fields wider than the
    /// component model's 32-flag limit).
    pub fn val(&self) -> Val {
        let point = |p: &Point| {
            Val::Record(vec![
                ("x".into(), Val::S32(p.0)),
                ("y".into(), Val::S32(p.1)),
            ])
        };
        let shape = |s: &Shape| match s {
            Shape::Nothing => Val::Variant("nothing".into(), None),
            Shape::Circle(f) => Val::Variant("circle".into(), Some(Box::new(Val::Float32(*f)))),
            Shape::Poly(ps) => Val::Variant(
                "poly".into(),
                Some(Box::new(Val::List(ps.iter().map(point).collect()))),
            ),
            Shape::Named(n) => Val::Variant("named".into(), Some(Box::new(Val::String(n.clone())))),
        };
        let small = ["a", "b", "c"]
            .iter()
            .enumerate()
            .filter(|(i, _)| self.small & (1 << i) != 0)
            .map(|(_, n)| n.to_string())
            .collect();
        Val::Record(vec![
            ("flag".into(), Val::Bool(self.flag)),
            ("type".into(), Val::U8(self.ty)),
            ("small-int".into(), Val::S8(self.small_int)),
            ("half".into(), Val::U16(self.half)),
            ("signed-half".into(), Val::S16(self.signed_half)),
            ("word".into(), Val::U32(self.word)),
            ("signed-word".into(), Val::S32(self.signed_word)),
            ("long".into(), Val::U64(self.long)),
            ("signed-long".into(), Val::S64(self.signed_long)),
            ("single".into(), Val::Float32(self.single)),
            ("double".into(), Val::Float64(self.double)),
            ("letter".into(), Val::Char(self.letter)),
            (
                "color".into(),
                Val::Enum(["red", "green", "blue"][usize::from(self.color % 3)].into()),
            ),
            ("small".into(), Val::Flags(small)),
            (
                "point".into(),
                Val::Option(self.point.as_ref().map(|p| Box::new(point(p)))),
            ),
            (
                "pair".into(),
                Val::Tuple(vec![Val::U8(self.pair.0), Val::String(self.pair.1.clone())]),
            ),
            (
                "shapes".into(),
                Val::List(self.shapes.iter().map(shape).collect()),
            ),
        ])
    }
}

/// Structural equality of component values with floats compared bit for bit.
pub fn same(a: &Val, b: &Val) -> bool {
    let all = |x: &[Val], y: &[Val]| x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y));
    let opt = |x: &Option<Box<Val>>, y: &Option<Box<Val>>| match (x, y) {
        (None, None) => true,
        (Some(x), Some(y)) => same(x, y),
        _ => false,
    };
    match (a, b) {
        (Val::Float32(x), Val::Float32(y)) => x.to_bits() == y.to_bits(),
        (Val::Float64(x), Val::Float64(y)) => x.to_bits() == y.to_bits(),
        (Val::List(x), Val::List(y)) | (Val::Tuple(x), Val::Tuple(y)) => all(x, y),
        (Val::Record(x), Val::Record(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|((n, x), (m, y))| n == m && same(x, y))
        }
        (Val::Variant(n, x), Val::Variant(m, y)) => n == m && opt(x, y),
        (Val::Option(x), Val::Option(y)) => opt(x, y),
        (Val::Result(x), Val::Result(y)) => match (x, y) {
            (Ok(x), Ok(y)) | (Err(x), Err(y)) => opt(x, y),
            _ => false,
        },
        _ => a == b,
    }
}

/// The echo component: the `everything` record (minus the wide flags) lifted from a core
/// function that returns its argument pointer.
pub const ECHO_WAT: &str = r#"
(component
  (core module $m
    (memory (export "memory") 1)
    (global $bump (mut i32) (i32.const 16))
    (func (export "realloc") (param i32 i32) (param $align i32) (param $size i32) (result i32)
      (local $p i32)
      (local.set $p
        (i32.and
          (i32.add (global.get $bump) (i32.sub (local.get $align) (i32.const 1)))
          (i32.sub (i32.const 0) (local.get $align))))
      (global.set $bump (i32.add (local.get $p) (local.get $size)))
      (block $done
        (loop $grow
          (br_if $done
            (i64.le_u
              (i64.extend_i32_u (global.get $bump))
              (i64.mul (i64.extend_i32_u (memory.size)) (i64.const 65536))))
          (if (i32.eq (memory.grow (i32.const 1)) (i32.const -1)) (then unreachable))
          (br $grow)))
      (local.get $p))
    (func (export "echo") (param i32) (result i32) (local.get 0)))
  (core instance $i (instantiate $m))
  (type $point' (record (field "x" s32) (field "y" s32)))
  (export $point "point" (type $point'))
  (type $color' (enum "red" "green" "blue"))
  (export $color "color" (type $color'))
  (type $small' (flags "a" "b" "c"))
  (export $small "small" (type $small'))
  (type $shape' (variant (case "nothing") (case "circle" f32) (case "poly" (list $point)) (case "named" string)))
  (export $shape "shape" (type $shape'))
  (type $everything' (record
    (field "flag" bool) (field "type" u8) (field "small-int" s8) (field "half" u16)
    (field "signed-half" s16) (field "word" u32) (field "signed-word" s32) (field "long" u64)
    (field "signed-long" s64) (field "single" f32) (field "double" f64) (field "letter" char)
    (field "color" $color) (field "small" $small) (field "point" (option $point))
    (field "pair" (tuple u8 string)) (field "shapes" (list $shape))))
  (export $everything "everything" (type $everything'))
  (func $echo (param "e" $everything) (result $everything)
    (canon lift (core func $i "echo") (memory (core memory $i "memory")) (realloc (core func $i "realloc"))))
  (export "echo" (func $echo))
)
"#;

struct Echo {
    engine: Engine,
    component: Component,
}

fn echo() -> &'static Echo {
    static E: OnceLock<Echo> = OnceLock::new();
    E.get_or_init(|| {
        let mut c = Config::new();
        c.wasm_component_model(true);
        let engine = Engine::new(&c).expect("engine");
        let component = Component::new(&engine, ECHO_WAT).expect("the echo component compiles");
        Echo { engine, component }
    })
}

/// What wasmtime's canonical ABI carries for `v`: lowered into the echo component's memory
/// and lifted back.
pub fn through_component(v: &Val) -> Val {
    let e = echo();
    let mut store = Store::new(&e.engine, ());
    let instance = Linker::new(&e.engine)
        .instantiate(&mut store, &e.component)
        .expect("instantiate the echo component");
    let f = instance
        .get_func(&mut store, "echo")
        .expect("the echo export");
    let mut out = [Val::Bool(false)];
    f.call(&mut store, std::slice::from_ref(v), &mut out)
        .unwrap_or_else(|err| panic!("the canonical ABI refused {v:?}: {err:?}"));
    let [r] = out;
    r
}

/// A kernel, a kitchen server domain exporting `lrpc:kitchen/sink`, and three client domains.
pub struct Rig {
    /// The kernel.
    pub kernel: Kernel,
    /// The server domain.
    pub server: Domain,
    /// Clients: default presentation, `leaky`, `leaky+unprotected` (direct-linked).
    pub clients: Vec<Domain>,
}

impl Rig {
    /// Builds the rig.
    pub fn new() -> Result<Rig, lrpc_kernel::Error> {
        let kernel = Kernel::new()?;
        kernel.add_wit_dir(&crate::repo_root().join("presentation/tests/wit"))?;
        let server = kernel.domain("kitchen-server", KITCHEN)?;
        kernel.export(&server, "lrpc:kitchen/sink")?;
        let mut clients = vec![kernel.domain("kitchen-client", KITCHEN)?];
        for trust in ["leaky", "leaky+unprotected"] {
            let text = format!(
                "interface = \"lrpc:kitchen/sink\"\nside = \"client\"\ntrust = \"{trust}\"\n"
            );
            let p = kernel.presentation(trust, &text)?;
            clients.push(kernel.domain_with(
                &format!("kitchen-client-{trust}"),
                KITCHEN,
                DomainOptions::default().with_presentations(vec![p]),
            )?);
        }
        Ok(Rig {
            kernel,
            server,
            clients,
        })
    }
}

fn read_packed(d: &Domain, export: &str) -> Vec<u8> {
    let packed: i64 = d.call(export, ()).expect("tape export");
    let (at, len) = ((packed >> 32) as u32 as usize, packed as u32 as usize);
    d.read_memory(at, len).expect("tape in memory")
}

/// Runs one input through both paths; panics on any difference or failure.
pub fn run(rig: &Rig, input: &RoundTripInput) {
    let mut v = input.value.clone();
    v.fix();
    if let Some((c, n)) = input.long {
        v.pair.1.extend(std::iter::repeat_n(c, usize::from(n)));
    }
    let tape = v.tape();
    let ci = usize::from(input.client) % rig.clients.len();
    let client = &rig.clients[ci];
    let at: i32 = client
        .call("fuzz_buf", tape.len() as i32)
        .expect("fuzz_buf");
    client
        .write_memory(at as u32 as usize, &tape)
        .expect("write the tape");
    let status: i32 = client.call("fuzz_round_trip", ()).expect("fuzz_round_trip");
    assert_eq!(status, 0, "client {ci}: round trip failed for {v:?}");
    let back = read_packed(client, "fuzz_out");
    assert!(back == tape, "client {ci}: the reply differs from {v:?}");
    if ci != 2 {
        // On the direct-linked path the server copy runs in the client's store, so the
        // server domain does not see the call.
        let seen = read_packed(&rig.server, "fuzz_seen");
        assert!(
            seen == tape,
            "client {ci}: the server received other than {v:?}"
        );
    }
    if let Some(args) = &input.results {
        let tape = args.tape();
        let at: i32 = client
            .call("fuzz_buf", tape.len() as i32)
            .expect("fuzz_buf");
        client
            .write_memory(at as u32 as usize, &tape)
            .expect("write the tape");
        let status: i32 = client.call("fuzz_results", ()).expect("fuzz_results");
        assert_eq!(status, 0, "client {ci}: results failed for {args:?}");
        let back = read_packed(client, "fuzz_out");
        assert!(
            back == args.expected(),
            "client {ci}: results({args:?}) answered {back:?}"
        );
    }
    let val = v.val();
    let carried = through_component(&val);
    assert!(
        same(&val, &carried),
        "the canonical ABI carried {carried:?} for {val:?}"
    );
}
