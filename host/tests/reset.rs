//! Per-request isolation of core domains (`Isolation::Request`, `Domain::reset`): whatever a
//! request does to an isolated domain, the next request meets the domain as a freshly
//! created one would be — compared, observation by observation, with fresh instances.

use lrpc_kernel::domain::Isolation;
use lrpc_kernel::error::Fault;
use lrpc_kernel::{Domain, DomainOptions, Error, Kernel};
use std::time::{Duration, Instant};

/// The test guest. Its state: a memory (1 page, grows to 4) with an active and a passive
/// data segment, a shadow-stack-like global `$sp` and a global `$g` (neither exported), a
/// table of 4 funcrefs with an active and a passive element segment, and a start function
/// that changes all of them, so the fresh state is not the module's image.
///
/// `run(a, b, c, d)` runs up to 16 operations packed as 16-bit words (4 per parameter, low
/// bits first): the high 4 bits pick the operation, the low 12 are its argument.
const GUEST: &str = r#"
(module
  (memory (export "memory") 1 4)
  (global $sp (mut i32) (i32.const 65536))
  (global $g (mut i64) (i64.const 7))
  (table $t 4 8 funcref)
  (func $f0 (result i32) i32.const 10)
  (func $f1 (result i32) i32.const 11)
  (func $f2 (result i32) i32.const 12)
  (elem (table $t) (i32.const 0) func $f0 $f1)
  (elem $pe func $f2 $f0 $f1)
  (data (i32.const 16) "active segment")
  (data $pd "passive segment bytes")
  (type $ret (func (result i32)))
  (func $start
    (global.set $sp (i32.const 49152))
    (i32.store (i32.const 200) (i32.const 0x64657473))
    (table.set $t (i32.const 2) (ref.func $f2)))
  (start $start)

  (func $op (param $op i32)
    (local $arg i32)
    (local.set $arg (i32.and (local.get $op) (i32.const 0xfff)))
    (block $done (block $b15 (block $b14 (block $b13 (block $b12 (block $b11 (block $b10
    (block $b9 (block $b8 (block $b7 (block $b6 (block $b5 (block $b4 (block $b3 (block $b2
    (block $b1 (block $b0
      (br_table $b0 $b1 $b2 $b3 $b4 $b5 $b6 $b7 $b8 $b9 $b10 $b11 $b12 $b13 $b14 $b15
        (i32.shr_u (local.get $op) (i32.const 12))))
    ;; 0: a byte
    (i32.store8 (i32.mul (local.get $arg) (i32.const 16))
      (i32.xor (local.get $arg) (i32.const 0x5a)))
    (br $done))
    ;; 1: eight bytes
    (i64.store (i32.mul (local.get $arg) (i32.const 8))
      (i64.mul (i64.extend_i32_u (local.get $arg)) (i64.const 0x9e3779b97f4a7c15)))
    (br $done))
    ;; 2: the shadow stack pointer
    (global.set $sp (local.get $arg))
    (br $done))
    ;; 3: the other global
    (global.set $g (i64.extend_i32_u (local.get $arg)))
    (br $done))
    ;; 4: a table entry (index arg % 4; null when arg % 4 == 3)
    (if (i32.eq (i32.rem_u (local.get $arg) (i32.const 4)) (i32.const 3))
      (then (table.set $t (i32.const 3) (ref.null func)))
      (else (table.set $t (i32.rem_u (local.get $arg) (i32.const 4))
        (select (result funcref) (ref.func $f1) (ref.func $f2)
          (i32.and (local.get $arg) (i32.const 16))))))
    (br $done))
    ;; 5: drop the passive data segment
    (data.drop $pd)
    (br $done))
    ;; 6: drop the passive element segment
    (elem.drop $pe)
    (br $done))
    ;; 7: memory.init (traps once the segment is dropped and the length is not 0)
    (memory.init $pd (i32.mul (local.get $arg) (i32.const 8)) (i32.const 0)
      (i32.rem_u (local.get $arg) (i32.const 5)))
    (br $done))
    ;; 8: table.init
    (table.init $t $pe (i32.rem_u (local.get $arg) (i32.const 2)) (i32.const 0)
      (i32.rem_u (local.get $arg) (i32.const 3)))
    (br $done))
    ;; 9: a trap
    unreachable)
    ;; 10: grow the memory by a page (one time in eight), else a byte
    (if (i32.eqz (i32.and (local.get $arg) (i32.const 7)))
      (then (drop (memory.grow (i32.const 1))))
      (else (i32.store8 (local.get $arg) (i32.const 1))))
    (br $done))
    ;; 11: grow the table (one time in eight), else the global
    (if (i32.eqz (i32.and (local.get $arg) (i32.const 7)))
      (then (drop (table.grow $t (ref.null func) (i32.const 1))))
      (else (global.set $g (i64.const -1))))
    (br $done))
    ;; 12: fill 64 bytes
    (memory.fill (i32.mul (local.get $arg) (i32.const 16)) (local.get $arg) (i32.const 64))
    (br $done))
    ;; 13: write through the shadow stack pointer, as compiled code does
    (i32.store (i32.and (i32.sub (global.get $sp) (i32.const 16)) (i32.const 0xfffc))
      (local.get $arg))
    (br $done))
    ;; 14: copy within the memory
    (memory.copy (local.get $arg) (i32.const 16) (i32.const 32))
    (br $done))
    ;; 15: the last byte of the memory
    (i32.store8 (i32.sub (i32.mul (memory.size) (i32.const 65536)) (i32.const 1))
      (local.get $arg))))

  (func $four (param $w i64)
    (call $op (i32.wrap_i64 (i64.and (local.get $w) (i64.const 0xffff))))
    (call $op (i32.wrap_i64 (i64.and (i64.shr_u (local.get $w) (i64.const 16)) (i64.const 0xffff))))
    (call $op (i32.wrap_i64 (i64.and (i64.shr_u (local.get $w) (i64.const 32)) (i64.const 0xffff))))
    (call $op (i32.wrap_i64 (i64.shr_u (local.get $w) (i64.const 48)))))
  (func (export "run") (param i64 i64 i64 i64)
    (call $four (local.get 0)) (call $four (local.get 1))
    (call $four (local.get 2)) (call $four (local.get 3)))

  ;; Observations.
  (func (export "size") (result i32) (memory.size))
  (func (export "hash") (result i64)
    (local $i i32) (local $h i64) (local $end i32)
    (local.set $h (i64.const 0xcbf29ce484222325))
    (local.set $end (i32.mul (memory.size) (i32.const 65536)))
    (block $out (loop $l
      (br_if $out (i32.ge_u (local.get $i) (local.get $end)))
      (local.set $h (i64.mul (i64.xor (local.get $h) (i64.load (local.get $i)))
        (i64.const 0x100000001b3)))
      (local.set $i (i32.add (local.get $i) (i32.const 8)))
      (br $l)))
    (local.get $h))
  (func (export "sp") (result i32) (global.get $sp))
  (func (export "g") (result i64) (global.get $g))
  (func (export "tsize") (result i32) (table.size $t))
  (func (export "probe") (param $i i32) (result i32)
    (if (result i32) (ref.is_null (table.get $t (local.get $i)))
      (then (i32.const -1))
      (else (call_indirect $t (type $ret) (local.get $i)))))
  ;; 1 when the passive segments can still be read, a trap once they were dropped.
  (func (export "init_data") (result i32)
    (memory.init $pd (i32.const 1024) (i32.const 0) (i32.const 4)) (i32.const 1))
  (func (export "init_elem") (result i32)
    (table.init $t $pe (i32.const 0) (i32.const 0) (i32.const 1)) (i32.const 1))
  (func (export "spin") (loop $l (i32.store8 (i32.const 300) (i32.const 9)) (br $l)))
)
"#;

/// A small xorshift: the sequences are the same on every run of one seed.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
}

/// What a request can see of a domain.
#[derive(Debug, PartialEq, Eq, Clone)]
struct Seen {
    size: i32,
    hash: i64,
    sp: i32,
    g: i64,
    tsize: i32,
    probes: Vec<i32>,
    /// `Some(1)`, or `None` when the call trapped (the segment was dropped).
    init_data: Option<i32>,
    init_elem: Option<i32>,
}

/// Each observation is a call of its own (a request of its own); `on` gives the domain to
/// make it on. An error when a call fails otherwise than by the trap of a dropped segment.
fn observe(mut on: impl FnMut() -> Domain) -> Result<Seen, Error> {
    let segment = |r: Result<i32, Error>| match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::Fault(Fault::Trapped { .. })) => Ok(None),
        Err(e) => Err(e),
    };
    Ok(Seen {
        size: on().call::<(), i32>("size", ())?,
        hash: on().call::<(), i64>("hash", ())?,
        sp: on().call::<(), i32>("sp", ())?,
        g: on().call::<(), i64>("g", ())?,
        tsize: on().call::<(), i32>("tsize", ())?,
        probes: (0..4)
            .map(|i| on().call::<i32, i32>("probe", i))
            .collect::<Result<_, _>>()?,
        init_data: segment(on().call::<(), i32>("init_data", ()))?,
        init_elem: segment(on().call::<(), i32>("init_elem", ()))?,
    })
}

fn isolated(kernel: &Kernel, name: &str) -> Domain {
    let options = DomainOptions::default().with_isolation(Isolation::Request);
    kernel.domain_with(name, GUEST.as_bytes(), options).unwrap()
}

/// What fresh, ordinary instances show: a new domain for every observation.
fn fresh_view(kernel: &Kernel) -> Seen {
    plain_view(kernel, None)
}

/// What ordinary instances show after a first request ran `init` on them: a new domain for
/// every observation (an ordinary domain is terminated by a trap).
fn plain_view(kernel: &Kernel, init: Option<(i64, i64, i64, i64)>) -> Seen {
    let mut n = 0;
    observe(|| {
        n += 1;
        let d = kernel
            .domain(&format!("plain-{n}"), GUEST.as_bytes())
            .unwrap();
        if let Some(init) = init {
            d.call::<(i64, i64, i64, i64), ()>("run", init).unwrap();
        }
        d
    })
    .unwrap()
}

#[test]
fn after_random_requests_a_reset_domain_shows_what_a_fresh_one_shows() {
    let kernel = Kernel::new().unwrap();
    let fresh = fresh_view(&kernel);
    assert_eq!(fresh.sp, 49152, "the start function ran");
    assert_eq!(fresh.init_data, Some(1));
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut domain = isolated(&kernel, "isolated");
    let (mut traps, mut grown, mut compared, mut memory_grown) = (0, 0, 0, 0);
    for case in 0..240 {
        let words: Vec<u64> = (0..4).map(|_| rng.next()).collect();
        let ran = domain.call::<(i64, i64, i64, i64), ()>(
            "run",
            (
                words[0] as i64,
                words[1] as i64,
                words[2] as i64,
                words[3] as i64,
            ),
        );
        if domain.memory_size().unwrap() > 65536 {
            memory_grown += 1;
        }
        match ran {
            Ok(()) => {}
            Err(Error::Fault(Fault::Trapped { .. })) => traps += 1,
            Err(Error::Reset { .. }) => {
                // A table grown in the previous case's request: the domain could not be put
                // back and is gone; nothing of it is reachable any more.
                assert!(domain.is_terminated(), "case {case}");
                grown += 1;
                domain = isolated(&kernel, &format!("isolated-{case}"));
                continue;
            }
            Err(e) => panic!("case {case} ({words:x?}): {e}"),
        }
        match observe(|| domain.clone()) {
            Ok(seen) => {
                assert_eq!(seen, fresh, "case {case}: ops {words:x?}");
                compared += 1;
            }
            Err(Error::Reset { .. }) => {
                // The request grew the table: the domain is terminated rather than shown to
                // the next request.
                assert!(domain.is_terminated(), "case {case}: ops {words:x?}");
                grown += 1;
                domain = isolated(&kernel, &format!("isolated-{case}"));
            }
            Err(e) => panic!("case {case} ({words:x?}): {e}"),
        }
    }
    assert!(compared >= 200, "{compared} cases compared");
    assert!(traps > 10, "{traps} cases trapped");
    assert!(grown > 0, "no case grew the table");
    assert!(memory_grown > 0, "no case grew the memory");
}

#[test]
fn a_grown_memory_is_reset_and_a_grown_table_terminates_the_domain() {
    let kernel = Kernel::new().unwrap();
    let d = isolated(&kernel, "grows");
    // Op 10 with argument 0: grow the memory by a page; op 15: write its last byte.
    d.call::<(i64, i64, i64, i64), ()>("run", (0xa000 | (0xf0ff << 16), 0, 0, 0))
        .unwrap();
    assert_eq!(d.memory_size().unwrap(), 2 * 65536);
    assert_eq!(d.read_memory(2 * 65536 - 1, 1).unwrap(), [0xff]);
    assert_eq!(d.call::<(), i32>("size", ()).unwrap(), 1, "the fresh size");
    // The real memory keeps its page, zeroed; the next grow hands it out again.
    assert_eq!(d.read_memory(2 * 65536 - 1, 1).unwrap(), [0]);
    d.call::<(i64, i64, i64, i64), ()>("run", (0xa000, 0, 0, 0))
        .unwrap();
    assert_eq!(d.memory_size().unwrap(), 2 * 65536, "no second real page");

    // Op 11 with argument 0: grow the table.
    d.call::<(i64, i64, i64, i64), ()>("run", (0xb000, 0, 0, 0))
        .unwrap();
    let err = d.call::<(), i32>("size", ()).unwrap_err();
    assert!(matches!(err, Error::Reset { .. }), "{err}");
    assert!(d.is_terminated());
}

#[test]
fn after_a_trap_or_a_deadline_the_next_call_meets_a_clean_domain() {
    let kernel = Kernel::new().unwrap();
    let fresh = fresh_view(&kernel);
    let d = isolated(&kernel, "traps");
    // Dirty everything, then trap (op 9) in the same request.
    let dirty = 0x1fff | (0x2123 << 16) | (0x3456 << 32) | (0x5000 << 48);
    let err = d
        .call::<(i64, i64, i64, i64), ()>("run", (dirty, 0x6000_4001, 0x9000, 0))
        .unwrap_err();
    assert!(matches!(err, Error::Fault(Fault::Trapped { .. })), "{err}");
    assert!(!d.is_terminated(), "a trap resets an isolated domain");
    assert_eq!(observe(|| d.clone()).unwrap(), fresh);

    let f = d.func::<(), ()>("spin").unwrap();
    let began = Instant::now();
    let err = f.call_within((), Duration::from_millis(200)).unwrap_err();
    assert!(matches!(err, Error::Fault(Fault::Deadline)), "{err}");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "{:?}",
        began.elapsed()
    );
    assert!(!d.is_terminated());
    assert_eq!(observe(|| d.clone()).unwrap(), fresh);
}

#[test]
fn an_explicit_reset_marks_a_request_boundary() {
    let kernel = Kernel::new().unwrap();
    let d = isolated(&kernel, "explicit");
    d.call::<(i64, i64, i64, i64), ()>("run", (0x3005, 0, 0, 0))
        .unwrap();
    d.write_memory(4096, b"left by the host").unwrap();
    d.reset().unwrap();
    assert_eq!(d.read_memory(4096, 16).unwrap(), [0; 16]);
    assert_eq!(
        d.read_memory(200, 4).unwrap(),
        b"sted",
        "the start function's bytes"
    );

    let plain = kernel.domain("plain", GUEST.as_bytes()).unwrap();
    let err = plain.reset().unwrap_err();
    assert!(matches!(err, Error::Options(_)), "{err}");
}

#[test]
fn modules_that_can_not_be_isolated_are_refused_at_creation() {
    let kernel = Kernel::new().unwrap();
    let options = DomainOptions::default().with_isolation(Isolation::Request);
    let err = kernel
        .domain_with(
            "two",
            br#"(module (memory (export "memory") 1) (memory 1))"#,
            options.clone(),
        )
        .unwrap_err();
    assert!(matches!(err, Error::Compile { .. }), "{err}");
    let err = kernel
        .domain_with(
            "reserved",
            br#"(module (memory (export "memory") 1) (func (export "lrpc:reset/global/0")))"#,
            options,
        )
        .unwrap_err();
    assert!(matches!(err, Error::Compile { .. }), "{err}");
}

#[test]
fn a_captured_state_is_what_later_requests_meet() {
    let kernel = Kernel::new().unwrap();
    // An initializing request: a global, bytes, a table entry, a dropped segment.
    let init = (
        0x3005 | (0x0123 << 16) | (0x4011 << 32) | (0x5000 << 48),
        0,
        0,
        0,
    );
    let initialized = plain_view(&kernel, Some(init));
    assert_eq!(initialized.g, 5);
    assert_eq!(initialized.init_data, None, "the segment was dropped");

    let d = isolated(&kernel, "captured");
    d.call::<(i64, i64, i64, i64), ()>("run", init).unwrap();
    d.capture_fresh_state().unwrap();
    let later = (
        0x3777 | (0x1fff << 16) | (0x6000 << 32) | (0x9000 << 48),
        0,
        0,
        0,
    );
    let err = d
        .call::<(i64, i64, i64, i64), ()>("run", later)
        .unwrap_err();
    assert!(matches!(err, Error::Fault(Fault::Trapped { .. })), "{err}");
    assert_eq!(observe(|| d.clone()).unwrap(), initialized);
    d.reset().unwrap();
    assert_eq!(observe(|| d.clone()).unwrap(), initialized);
}
