//! Per-request isolation of core domains (`Isolation::Request`, `Domain::reset`): whatever a
//! request does to an isolated domain, the next request meets the domain as a freshly
//! created one would be — compared, observation by observation, with fresh instances.

mod differential;

use differential::{GUEST, fresh_view, isolated, observe, plain_view, run_requests};
use lrpc_kernel::domain::Isolation;
use lrpc_kernel::error::Fault;
use lrpc_kernel::{DomainOptions, Error, Kernel};
use std::time::{Duration, Instant};

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

#[test]
fn after_random_requests_a_reset_domain_shows_what_a_fresh_one_shows() {
    let kernel = Kernel::new().unwrap();
    let fresh = fresh_view(&kernel);
    assert_eq!(fresh.sp, 49152, "the start function ran");
    assert_eq!(fresh.init_data, Some(1));
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let requests: Vec<[u64; 4]> = (0..240)
        .map(|_| [rng.next(), rng.next(), rng.next(), rng.next()])
        .collect();
    let tally = run_requests(&kernel, &fresh, &requests, "isolated");
    assert!(tally.compared >= 200, "{tally:?}");
    assert!(tally.traps > 10, "{tally:?}");
    assert!(tally.grown > 0, "no request grew the table: {tally:?}");
    assert!(
        tally.memory_grown > 0,
        "no request grew the memory: {tally:?}"
    );
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
