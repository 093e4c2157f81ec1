//! Runs one Table IV case a given number of times and nothing else, for instruction counts:
//!
//! ```text
//! cargo build --profile bench -p lrpc-benches --example callpath
//! valgrind --tool=callgrind target/release/examples/callpath isolated 100000
//! ```
//!
//! Cases: `cross-store` (the bare mechanism), `raw` (the kernel without the client stub),
//! `isolated` (Null through the stubs), `big-in` and `big-in-out` (on the default presentation; the
//! third argument is the size, 200 B unless given), `caller-buffer` (BigInOut into the caller's
//! buffer, Flick Fig. 11), `component-host` (Null between the two bench
//! components linked by wasmtime through the host) and `component-kernel` (the same components
//! as kernel domains, bound through the clerk); `component-host-big-in` (and `-out`) and
//! `component-to-astack-big-in` (BigIn of the size given from a component client to the
//! host-linked server component, or through the kernel to the core server);
//! `component-null-timed` times the two component Null peers in alternating rounds and
//! prints their medians. The setup runs before the measured loop; compare two runs with different
//! counts to take it out. With `LRPC_PERFMAP=1` the kernel's engine writes
//! `/tmp/perf-PID.map`, which names the guest functions behind callgrind's `???:0x…` entries;
//! the `precompile` example turns a guest into machine code to read beside those counts.

use lrpc_benches::Peer;

fn main() {
    let mut args = std::env::args().skip(1);
    let case = args.next().unwrap_or_else(|| "isolated".into());
    let n: i32 = args
        .next()
        .map(|s| s.parse().expect("a call count"))
        .unwrap_or(100_000);
    let size: i32 = args
        .next()
        .map(|s| s.parse().expect("an argument size in bytes"))
        .unwrap_or(200);
    let status = match case.as_str() {
        "cross-store" => {
            let (kernel, _, _) = lrpc_benches::setup(1);
            lrpc_benches::CrossStore::new(&kernel).run(n)
        }
        "raw" => lrpc_benches::RawCall::new().run(n),
        "isolated" | "big-in" | "big-in-out" => {
            let (kernel, client) = lrpc_benches::pair(
                lrpc_artifacts::BENCH_CLIENT,
                lrpc_artifacts::BENCH_SERVER,
                None,
                None,
                lrpc_kernel::Serving::Migrate,
            );
            let mut peer = lrpc_benches::Lrpc::new(kernel, &client);
            match case.as_str() {
                "isolated" => peer.null(n),
                "big-in" => peer.big_in(size, n).min(0),
                _ => peer.big_in_out(size, n),
            }
        }
        "caller-buffer" => {
            // Flick Fig. 11's caller-buffer client (BigInOut into the caller's buffer), as the
            // report's `flick-fig11/caller-buffer` rows run it.
            let (_kernel, client) = lrpc_benches::pair(
                lrpc_artifacts::BENCH_CLIENT_INTO,
                lrpc_artifacts::BENCH_SERVER,
                Some(lrpc_benches::presentation_text("client", "leaky", "")),
                None,
                lrpc_kernel::Serving::Migrate,
            );
            let f = client
                .func::<(i32, i32), i32>("big_in_out_loop")
                .expect("big_in_out_loop");
            i64::from(f.call((size, n)).expect("big_in_out_loop"))
        }
        "component-host" => {
            let kernel = lrpc_kernel::Kernel::new().expect("kernel");
            let mut peer = lrpc_benches::components::HostLinked::new(kernel.engine())
                .expect("host-linked components");
            peer.null(n)
        }
        "component-kernel" => lrpc_benches::components::KernelLinked::new()
            .expect("component domains")
            .null(n),
        "component-host-big-in" | "component-host-big-in-out" => {
            let kernel = lrpc_kernel::Kernel::new().expect("kernel");
            let mut peer = lrpc_benches::components::HostLinked::new(kernel.engine())
                .expect("host-linked components");
            if case.ends_with("-out") {
                peer.big_in_out(size, n).min(0)
            } else {
                peer.big_in(size, n).min(0)
            }
        }
        "component-to-astack-big-in" => lrpc_benches::components::KernelLinked::to_astack()
            .expect("a mixed pair")
            .big_in(size, n)
            .min(0),
        "astack-to-component-big-in" | "astack-to-component-big-in-out" => {
            let (kernel, client) = lrpc_benches::astack_to_component();
            let mut peer = lrpc_benches::Lrpc::new(kernel.clone(), &client);
            if case.ends_with("-out") {
                peer.big_in_out(size, n)
            } else {
                peer.big_in(size, n).min(0)
            }
        }
        "component-null-timed" => {
            // Times the two component Null peers in alternating rounds and prints their
            // medians (ns per call), as the report's `component-null/interleaved` rows do.
            let kernel = lrpc_kernel::Kernel::new().expect("kernel");
            let mut host = lrpc_benches::components::HostLinked::new(kernel.engine())
                .expect("host-linked components");
            let mut through =
                lrpc_benches::components::KernelLinked::new().expect("component domains");
            let (h, k) =
                lrpc_benches::per_call_interleaved(|n| host.null(n), |n| through.null(n), n);
            println!(
                "component-host {:.1} ns, component-kernel {:.1} ns, ratio {:.3}",
                h,
                k,
                k / h
            );
            0
        }
        other => panic!("unknown case {other}"),
    };
    assert!(status >= 0, "a call failed ({status})");
}
