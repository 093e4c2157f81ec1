//! Per-request isolation (`Isolation::Request`) on arbitrary request sequences: the
//! differential check of the kernel's test `tests/reset.rs`, driven by the fuzzer. Each
//! input is up to [`MAX_REQUESTS`] requests, each up to 16 guest operations (memory writes,
//! fills and copies, grows, global and table sets, segment drops and inits, traps); after
//! each request, a new isolated domain must show what fresh instances show.

use lrpc_kernel::Kernel;
use std::sync::OnceLock;

#[path = "../../host/tests/differential/mod.rs"]
#[allow(
    dead_code,
    unreachable_pub,
    reason = "shared with the kernel's test, which uses more of it"
)]
mod differential;

/// The most requests one input runs.
pub const MAX_REQUESTS: usize = 32;

/// The kernel and what fresh instances show, made once.
fn setup() -> &'static (Kernel, differential::Seen) {
    static SETUP: OnceLock<(Kernel, differential::Seen)> = OnceLock::new();
    SETUP.get_or_init(|| {
        let kernel = Kernel::new().expect("a kernel");
        let fresh = differential::fresh_view(&kernel);
        (kernel, fresh)
    })
}

/// Runs one input: its bytes, 32 to a request (four little-endian words of four 16-bit
/// operations each), on a new isolated domain. Panics if any request leaves a trace.
pub fn run(data: &[u8]) {
    let requests: Vec<[u64; 4]> = data
        .chunks_exact(32)
        .take(MAX_REQUESTS)
        .map(|c| {
            let word = |i: usize| {
                let mut b = [0u8; 8];
                b.copy_from_slice(&c[i * 8..i * 8 + 8]);
                u64::from_le_bytes(b)
            };
            [word(0), word(1), word(2), word(3)]
        })
        .collect();
    let (kernel, fresh) = setup();
    differential::run_requests(kernel, fresh, &requests, "fuzzed");
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_request_of_every_operation_leaves_no_trace() {
        // Operations 0-15 with small arguments, the trap (9) last in its request.
        let mut data = Vec::new();
        for op in [0u16, 1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 15, 9] {
            data.extend_from_slice(&((op << 12) | 0x011).to_le_bytes());
        }
        data.extend_from_slice(&[0u8; 32]);
        super::run(&data);
    }
}
