//! Client and server of `lrpc:kitchen/sink` for the fuzz targets.
//!
//! The host hands the client a value of the `everything` record as a *tape* (a plain
//! serialization written by the fuzz library, independent of the stubs' encoding; see
//! `fuzz/src/roundtrip.rs`). The client rebuilds the value, calls `round-trip` through its
//! generated client stub, and writes the reply back as a tape; the server, behind its
//! generated entry stub, records what it received as a tape too. The host compares the three.
#![warn(missing_docs)]

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use std::cell::RefCell;

use sink::{Color, Everything, Huge, Point, Shape, Small, Wide};

thread_local! {
    static INPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static OUTPUT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static SEEN: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    static CLIENT: RefCell<Option<sink::Client>> = const { RefCell::new(None) };
}

/// A buffer of `len` bytes for the host to write a tape into; its address.
#[unsafe(no_mangle)]
pub extern "C" fn fuzz_buf(len: i32) -> i32 {
    INPUT.with(|b| {
        let mut b = b.borrow_mut();
        b.clear();
        b.resize(len.max(0) as usize, 0);
        b.as_mut_ptr() as i32
    })
}

/// Rebuilds the value on the input tape and calls `round-trip` with it. Returns 0 on
/// success (the reply's tape is then at [`fuzz_out`]), -1 for a malformed tape, the call's
/// status code for a failed call, or 1000 + the status for a failed bind.
#[unsafe(no_mangle)]
pub extern "C" fn fuzz_round_trip() -> i32 {
    let Some(e) = INPUT.with(|b| {
        let b = b.borrow();
        let mut t = Tape { b: &b, at: 0 };
        let e = read_everything(&mut t)?;
        (t.at == b.len()).then_some(e)
    }) else {
        return -1;
    };
    CLIENT.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            match sink::Client::bind() {
                Ok(b) => *c = Some(b),
                Err(e) => return 1000 + e.code(),
            }
        }
        let client = c.as_ref().expect("bound above");
        match client.round_trip(&e) {
            Ok(r) => {
                OUTPUT.with(|o| {
                    let mut o = o.borrow_mut();
                    o.clear();
                    write_everything(&mut o, &r);
                });
                0
            }
            Err(err) => err.code(),
        }
    })
}

/// Calls `results` with the arguments on the input tape: `a` (0 ok, 1 err), `b` (0 then a
/// `u32`, or 1), `c` (0, or 1 then a string). Returns 0 (the reply's tape, an option tag,
/// then a result tag and a string or a shape, is then at [`fuzz_out`]), -1 for a malformed
/// tape, or the call's status code.
#[unsafe(no_mangle)]
pub extern "C" fn fuzz_results() -> i32 {
    let Some((a, b, c)) = INPUT.with(|buf| {
        let buf = buf.borrow();
        let mut t = Tape { b: &buf, at: 0 };
        let a = match t.u8()? {
            0 => Ok(()),
            1 => Err(()),
            _ => return None,
        };
        let b = match t.u8()? {
            0 => Ok(t.u32()?),
            1 => Err(()),
            _ => return None,
        };
        let c = match t.u8()? {
            0 => Ok(()),
            1 => Err(t.string()?),
            _ => return None,
        };
        (t.at == buf.len()).then_some((a, b, c))
    }) else {
        return -1;
    };
    CLIENT.with(|cl| {
        let mut cl = cl.borrow_mut();
        if cl.is_none() {
            match sink::Client::bind() {
                Ok(b) => *cl = Some(b),
                Err(e) => return 1000 + e.code(),
            }
        }
        match cl.as_ref().expect("bound above").results(a, b, c) {
            Ok(r) => {
                OUTPUT.with(|o| {
                    let mut o = o.borrow_mut();
                    o.clear();
                    match r {
                        None => o.push(0),
                        Some(Ok(s)) => {
                            o.extend_from_slice(&[1, 0]);
                            write_str(&mut o, &s);
                        }
                        Some(Err(shape)) => {
                            o.extend_from_slice(&[1, 1]);
                            write_shape(&mut o, &shape);
                        }
                    }
                });
                0
            }
            Err(err) => err.code(),
        }
    })
}

fn packed(b: &[u8]) -> i64 {
    (i64::from(b.as_ptr() as u32) << 32) | i64::from(b.len() as u32)
}

/// The reply's tape: address << 32 | length.
#[unsafe(no_mangle)]
pub extern "C" fn fuzz_out() -> i64 {
    OUTPUT.with(|o| packed(&o.borrow()))
}

/// The tape of the last value the server received: address << 32 | length.
#[unsafe(no_mangle)]
pub extern "C" fn fuzz_seen() -> i64 {
    SEEN.with(|o| packed(&o.borrow()))
}

struct Tape<'a> {
    b: &'a [u8],
    at: usize,
}

impl Tape<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn arr<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        Some(self.arr::<1>()?[0])
    }
    fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.arr()?))
    }
    fn string(&mut self) -> Option<String> {
        let n = self.u32()? as usize;
        String::from_utf8(self.take(n)?.to_vec()).ok()
    }
    fn point(&mut self) -> Option<Point> {
        Some(Point {
            x: i32::from_le_bytes(self.arr()?),
            y: i32::from_le_bytes(self.arr()?),
        })
    }
}

fn read_everything(t: &mut Tape<'_>) -> Option<Everything> {
    Some(Everything {
        flag: match t.u8()? {
            0 => false,
            1 => true,
            _ => return None,
        },
        r#type: t.u8()?,
        small_int: i8::from_le_bytes(t.arr()?),
        half: u16::from_le_bytes(t.arr()?),
        signed_half: i16::from_le_bytes(t.arr()?),
        word: t.u32()?,
        signed_word: i32::from_le_bytes(t.arr()?),
        long: u64::from_le_bytes(t.arr()?),
        signed_long: i64::from_le_bytes(t.arr()?),
        single: f32::from_bits(t.u32()?),
        double: f64::from_bits(u64::from_le_bytes(t.arr()?)),
        letter: char::from_u32(t.u32()?)?,
        color: match t.u8()? {
            0 => Color::Red,
            1 => Color::Green,
            2 => Color::Blue,
            _ => return None,
        },
        small: Small::from_bits(t.u8()?)?,
        wide: Wide::from_bits(u64::from_le_bytes(t.arr()?))?,
        huge: Huge::from_bits(u128::from_le_bytes(t.arr()?))?,
        point: match t.u8()? {
            0 => None,
            1 => Some(t.point()?),
            _ => return None,
        },
        pair: (t.u8()?, t.string()?),
        shapes: {
            let n = t.u32()? as usize;
            let mut v = Vec::new();
            for _ in 0..n {
                v.push(match t.u8()? {
                    0 => Shape::Nothing,
                    1 => Shape::Circle(f32::from_bits(t.u32()?)),
                    2 => {
                        let k = t.u32()? as usize;
                        let mut ps = Vec::new();
                        for _ in 0..k {
                            ps.push(t.point()?);
                        }
                        Shape::Poly(ps)
                    }
                    3 => Shape::Named(t.string()?),
                    _ => return None,
                });
            }
            v
        },
    })
}

fn write_str(o: &mut Vec<u8>, s: &str) {
    o.extend_from_slice(&(s.len() as u32).to_le_bytes());
    o.extend_from_slice(s.as_bytes());
}

fn write_point(o: &mut Vec<u8>, p: &Point) {
    o.extend_from_slice(&p.x.to_le_bytes());
    o.extend_from_slice(&p.y.to_le_bytes());
}

fn write_everything(o: &mut Vec<u8>, e: &Everything) {
    o.push(u8::from(e.flag));
    o.push(e.r#type);
    o.extend_from_slice(&e.small_int.to_le_bytes());
    o.extend_from_slice(&e.half.to_le_bytes());
    o.extend_from_slice(&e.signed_half.to_le_bytes());
    o.extend_from_slice(&e.word.to_le_bytes());
    o.extend_from_slice(&e.signed_word.to_le_bytes());
    o.extend_from_slice(&e.long.to_le_bytes());
    o.extend_from_slice(&e.signed_long.to_le_bytes());
    o.extend_from_slice(&e.single.to_bits().to_le_bytes());
    o.extend_from_slice(&e.double.to_bits().to_le_bytes());
    o.extend_from_slice(&u32::from(e.letter).to_le_bytes());
    o.push(e.color as u8);
    o.push(e.small.bits());
    o.extend_from_slice(&e.wide.bits().to_le_bytes());
    o.extend_from_slice(&e.huge.bits().to_le_bytes());
    match &e.point {
        None => o.push(0),
        Some(p) => {
            o.push(1);
            write_point(o, p);
        }
    }
    o.push(e.pair.0);
    write_str(o, &e.pair.1);
    o.extend_from_slice(&(e.shapes.len() as u32).to_le_bytes());
    for s in &e.shapes {
        write_shape(o, s);
    }
}

fn write_shape(o: &mut Vec<u8>, s: &Shape) {
    match s {
        Shape::Nothing => o.push(0),
        Shape::Circle(f) => {
            o.push(1);
            o.extend_from_slice(&f.to_bits().to_le_bytes());
        }
        Shape::Poly(ps) => {
            o.push(2);
            o.extend_from_slice(&(ps.len() as u32).to_le_bytes());
            for p in ps {
                write_point(o, p);
            }
        }
        Shape::Named(s) => {
            o.push(3);
            write_str(o, s);
        }
    }
}

#[derive(Default)]
struct Echo;

impl sink::Server for Echo {
    #[allow(
        clippy::too_many_arguments,
        reason = "the WIT function has twelve parameters"
    )]
    fn scalars(
        &self,
        a: bool,
        _b: u8,
        c: i8,
        _d: u16,
        e: i16,
        _f: u32,
        g: i32,
        _h: u64,
        i: i64,
        j: f32,
        k: f64,
        l: char,
    ) -> (bool, i8, i16, i32, i64, f32, f64, char) {
        (a, c, e, g, i, j, k, l)
    }

    #[allow(
        clippy::too_many_arguments,
        reason = "the WIT function has seven parameters"
    )]
    fn bounded(
        &self,
        _p: Point,
        c: Color,
        _s: Small,
        _w: Wide,
        _h: Huge,
        _o: Option<u16>,
        r: Result<u8, i8>,
    ) -> Result<(), Color> {
        r.map(|_| ()).map_err(|_| c)
    }

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
        SEEN.with(|s| {
            let mut s = s.borrow_mut();
            s.clear();
            write_everything(&mut s, &e);
        });
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

sink::export!(Echo);
