//! The differential check of per-request isolation that the kernel's test (`tests/reset.rs`)
//! and the fuzz target `reset_ops` (`fuzz/src/reset.rs`) share: a guest that can change its
//! state in every way wasm allows, what a request can observe of it, and a run of requests
//! on an isolated domain, each followed by a comparison with fresh instances. Included by
//! path from both.

use lrpc_kernel::domain::Isolation;
use lrpc_kernel::error::Fault;
use lrpc_kernel::{Domain, DomainOptions, Error, Kernel};

/// The test guest. Its state: a memory (1 page, grows to 4) with an active and a passive
/// data segment, a shadow-stack-like global `$sp` and a global `$g` (neither exported), a
/// table of 4 funcrefs with an active and a passive element segment, and a start function
/// that changes all of them, so the fresh state is not the module's image.
///
/// `run(a, b, c, d)` runs up to 16 operations packed as 16-bit words (4 per parameter, low
/// bits first): the high 4 bits pick the operation, the low 12 are its argument.
pub const GUEST: &str = r#"
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

/// What a request can see of a domain.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Seen {
    pub size: i32,
    pub hash: i64,
    pub sp: i32,
    pub g: i64,
    pub tsize: i32,
    pub probes: Vec<i32>,
    /// `Some(1)`, or `None` when the call trapped (the segment was dropped).
    pub init_data: Option<i32>,
    pub init_elem: Option<i32>,
}

/// Each observation is a call of its own (a request of its own); `on` gives the domain to
/// make it on. An error when a call fails otherwise than by the trap of a dropped segment.
pub fn observe(mut on: impl FnMut() -> Domain) -> Result<Seen, Error> {
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

pub fn isolated(kernel: &Kernel, name: &str) -> Domain {
    let options = DomainOptions::default().with_isolation(Isolation::Request);
    kernel.domain_with(name, GUEST.as_bytes(), options).unwrap()
}

/// What fresh, ordinary instances show: a new domain for every observation.
pub fn fresh_view(kernel: &Kernel) -> Seen {
    plain_view(kernel, None)
}

/// What ordinary instances show after a first request ran `init` on them: a new domain for
/// every observation (an ordinary domain is terminated by a trap).
pub fn plain_view(kernel: &Kernel, init: Option<(i64, i64, i64, i64)>) -> Seen {
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

/// What happened over a run of requests ([`run_requests`]).
#[derive(Debug, Default)]
pub struct Tally {
    /// Requests after which the domain was compared with fresh instances.
    pub compared: usize,
    /// Requests that trapped.
    pub traps: usize,
    /// Requests that grew the table, after which the domain was terminated.
    pub grown: usize,
    /// Requests after which the real memory was larger than the first one.
    pub memory_grown: usize,
}

/// Runs `requests` (each the four words of a `run` call) on a new isolated domain of
/// `kernel`, and after each compares what the next requests see with `fresh` (see
/// [`fresh_view`]). A domain whose table a request grew must be terminated; a new one
/// takes its place. Panics on any difference, naming the request.
pub fn run_requests(kernel: &Kernel, fresh: &Seen, requests: &[[u64; 4]], name: &str) -> Tally {
    let mut tally = Tally::default();
    let mut domain = isolated(kernel, name);
    for (i, words) in requests.iter().enumerate() {
        let args = (
            words[0] as i64,
            words[1] as i64,
            words[2] as i64,
            words[3] as i64,
        );
        let ran = domain.call::<(i64, i64, i64, i64), ()>("run", args);
        if domain.memory_size().is_ok_and(|s| s > 65536) {
            tally.memory_grown += 1;
        }
        match ran {
            Ok(()) => {}
            Err(Error::Fault(Fault::Trapped { .. })) => tally.traps += 1,
            Err(Error::Reset { .. }) => {
                // The previous request grew the table: the domain could not be put back
                // and is gone; nothing of it is reachable any more.
                assert!(domain.is_terminated(), "request {i}");
                tally.grown += 1;
                domain = isolated(kernel, &format!("{name}-{i}"));
                continue;
            }
            Err(e) => panic!("request {i} ({words:x?}): {e}"),
        }
        match observe(|| domain.clone()) {
            Ok(seen) => {
                assert_eq!(&seen, fresh, "request {i}: ops {words:x?}");
                tally.compared += 1;
            }
            Err(Error::Reset { .. }) => {
                // The request grew the table: the domain is terminated rather than shown to
                // the next request.
                assert!(domain.is_terminated(), "request {i}: ops {words:x?}");
                tally.grown += 1;
                domain = isolated(kernel, &format!("{name}-{i}"));
            }
            Err(e) => panic!("request {i} ({words:x?}): {e}"),
        }
    }
    tally
}
