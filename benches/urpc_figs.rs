//! URPC Figs. 3 and 4 on this machine: latency and throughput of asynchronous Null calls for
//! T = 1..8 user-level threads, C = 1 client processor and S = 0 or 1 server processors
//! (see `lrpc_benches::urpc`), for an embedder client and for a guest client. Prints tables; the report (`--bench report`) keeps the
//! numbers. `cargo bench -p lrpc-benches --bench urpc`.

fn main() {
    let rounds: usize = std::env::var("LRPC_URPC_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    println!(
        "cross-processor floor (atomic ping-pong): {:.0} ns per round trip\n",
        lrpc_benches::urpc::pingpong_floor(rounds)
    );
    println!("| C | S | T | latency (ns) | throughput (calls/s) |");
    println!("| --- | --- | --- | --- | --- |");
    for s in [0usize, 1] {
        let u = lrpc_benches::urpc::Urpc::new(s);
        u.check();
        for t in 1..=8usize {
            let p = u.best(t, rounds);
            println!(
                "| 1 | {s} | {t} | {:.0} | {:.0} |",
                p.latency_ns, p.calls_per_sec
            );
        }
    }
    println!("\nguest client (user-level threads on the SDK's executor):\n");
    println!("| C | S | T | latency (ns) | throughput (calls/s) |");
    println!("| --- | --- | --- | --- | --- |");
    for s in [0usize, 1] {
        let u = lrpc_benches::urpc::GuestUrpc::new(s);
        u.check();
        for t in [1usize, 2, 4, 8] {
            let p = u.best(t, rounds);
            println!(
                "| 1 | {s} | {t} | {:.0} | {:.0} |",
                p.latency_ns, p.calls_per_sec
            );
        }
    }
}
