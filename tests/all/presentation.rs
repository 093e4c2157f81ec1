//! Presentations at work: copy, borrow or lend of `in` data, the combination signature a
//! binding gets, what a call leaves on a pair's A-stack, and a hostile peer rewriting
//! shared memory.

use crate::{bench_pair_with, shared};
use lrpc_kernel::{Domain, Kernel, Status, presentation::Transport};

/// Copy counters of a domain's stubs: (in copies, out copies).
fn counts(d: &Domain) -> (i64, i64) {
    (
        d.call("lrpc_in_copies", ()).unwrap(),
        d.call("lrpc_out_copies", ()).unwrap(),
    )
}

fn delta(before: (i64, i64), after: (i64, i64)) -> (i64, i64) {
    (after.0 - before.0, after.1 - before.1)
}

/// Example presentations for one cell of the trashable × preserved matrix.
fn sides(trashable: bool, preserved: bool) -> (Option<&'static str>, Option<&'static str>) {
    (
        Some(if trashable {
            "bench-client-trashable"
        } else {
            "bench-client-leaky"
        }),
        preserved.then_some("bench-server-preserved"),
    )
}

/// The bench server can not reach the bench client (it binds nothing), so every call lends
/// its byte lists: the server reads them in place whatever the presentations say, and only
/// the client copies (onto the A-stack). Strings and scalars are another matter (see
/// `a_server_borrowing_a_body_beside_strings_...` and the fixed-size `add` below).
#[test]
fn a_call_whose_client_can_not_run_lends_its_byte_lists_in_every_combination() {
    let _guard = shared();
    const CALLS: i64 = 10;
    let cells = [(None, None), sides(false, false), sides(true, false)]
        .into_iter()
        .chain([sides(false, true), sides(true, true)]);
    for (c, s) in cells {
        let (_k, server, client) = bench_pair_with(c, s);
        let info = &client.client_bindings()[0];
        let borrow = c == Some("bench-client-trashable") || s.is_some();
        assert_eq!(info.combination.procs[2].borrow, [borrow], "{c:?}/{s:?}");
        assert_eq!(info.combination.procs[2].lend, [true], "{c:?}/{s:?}");
        let (cb, sb) = (counts(&client), counts(&server));
        let r: i64 = client.call("big_in", (1000, CALLS as i32)).unwrap();
        assert_eq!(r >> 8, 1000, "the server saw every byte");
        let (cd, sd) = (delta(cb, counts(&client)), delta(sb, counts(&server)));
        assert_eq!(
            (cd.0, sd.0),
            (CALLS, 0),
            "in copies (client onto the A-stack, server into private memory), {c:?}/{s:?}"
        );
        // Results: one copy onto the A-stack (server), one out of it (client).
        assert_eq!((cd.1, sd.1), (CALLS, CALLS));
        // Big arguments travel out of band and are lent there too.
        let (cb, sb) = (counts(&client), counts(&server));
        let ok: i32 = client.call("big_in_out", (100_000, 2)).unwrap();
        assert_eq!(ok, 0);
        let (cd, sd) = (delta(cb, counts(&client)), delta(sb, counts(&server)));
        assert_eq!((cd.0, sd.0), (2, 0), "{c:?}/{s:?}");
        // Fixed-size arguments are read once into values: copied (the bound) either way.
        let sb = counts(&server);
        assert_eq!(client.call::<(i32, i32), i64>("add", (40, 2)).unwrap(), 42);
        assert_eq!(delta(sb, counts(&server)).0, 1);
    }
}

/// `in.data = "stable"`: the server keeps a private copy of `big-in`'s data on every call,
/// even when the client allows a borrow; `big-in-out` is still lent.
#[test]
fn a_server_asking_for_a_stable_copy_always_gets_one() {
    let _guard = shared();
    for client in [None, Some("bench-client-trashable")] {
        let (_k, server, client) = bench_pair_with(client, Some("bench-server-stable"));
        let comb = client.client_bindings()[0].combination.clone();
        assert_eq!(
            (comb.procs[2].borrow_mask(), comb.procs[2].lend_mask()),
            (0, 0)
        );
        let bytes = || -> i64 { server.call("lrpc_in_copied_bytes", ()).unwrap() };
        let (before, b0) = (counts(&server), bytes());
        let r: i64 = client.call("big_in", (1000, 4)).unwrap();
        assert_eq!(r >> 8, 1000);
        assert_eq!(delta(before, counts(&server)).0, 4, "one copy per call");
        let b = bytes() - b0;
        assert!(b >= 4 * 1000, "the whole request each time: {b}");
        let before = counts(&server);
        assert_eq!(
            client
                .call::<(i32, i32), i32>("big_in_out", (1000, 4))
                .unwrap(),
            0
        );
        assert_eq!(delta(before, counts(&server)).0, 0, "big-in-out is lent");
    }
}

/// No call clears the A-stack any more, whatever the client's trust: what a call leaves
/// there only this pair's server can see (see `isolation`), and it saw it during the call.
/// Trust `none` and `leaky` behave alike on pairwise A-stacks.
#[test]
fn what_a_call_leaves_on_the_astack_stays_with_the_pair_whatever_the_trust() {
    let _guard = shared();
    for client in [None, Some("bench-client-leaky")] {
        let (_k, server, client) = bench_pair_with(client, None);
        let s: i32 = client.call("fill", (1000, 0xab)).unwrap();
        assert_eq!(s, 0);
        let sum: i64 = client
            .call("add", (0x0101_0101_i32, 0x3c3c_3c3c_i32))
            .unwrap();
        assert_eq!(sum, 0x3d3d_3d3d);
        // What the server can see of the binding's A-stacks after the calls.
        let info = &client.client_bindings()[0];
        let seen: Vec<u8> = info
            .windows
            .iter()
            .flat_map(|(_, s_offs, len)| server.read_memory(s_offs[0], *len).unwrap())
            .collect();
        let trust = info.combination.client_trust;
        assert!(
            seen.windows(64).any(|w| w.iter().all(|&b| b == 0xab)),
            "fill's argument stays (no clearing pass), client trust {trust:?}"
        );
        // The result overwrote the first argument in place; the second stays.
        assert!(seen.windows(4).any(|w| w == [0x3c; 4]), "{trust:?}");
        assert!(seen.windows(4).any(|w| w == [0x3d; 4]), "{trust:?}");
    }
}

#[test]
fn the_trust_matrix_decides_only_the_transport() {
    let _guard = shared();
    let levels = ["none", "leaky", "leaky+unprotected"];
    let text = |side: &str, t: &str| {
        format!("interface = \"lrpc:bench/bench\"\nside = \"{side}\"\ntrust = \"{t}\"\n")
    };
    for ct in levels {
        for st in levels {
            let kernel = Kernel::new().unwrap();
            let server = kernel.domain("s", lrpc_artifacts::BENCH_SERVER).unwrap();
            let sp = kernel
                .presentation("server.toml", &text("server", st))
                .unwrap();
            crate::export_with(
                &kernel,
                &server,
                "lrpc:bench/bench",
                lrpc_kernel::ExportOptions::default().with_presentation(Some(sp)),
            )
            .unwrap();
            let cp = kernel
                .presentation("client.toml", &text("client", ct))
                .unwrap();
            let client = kernel
                .domain_with(
                    "c",
                    lrpc_artifacts::BENCH_CLIENT,
                    lrpc_kernel::DomainOptions::default().with_presentations(vec![cp]),
                )
                .unwrap();
            assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
            let comb = client.client_bindings()[0].combination.clone();
            let direct = ct == "leaky+unprotected";
            assert_eq!(comb.transport == Transport::Direct, direct, "{ct}/{st}");
            assert_eq!(comb.procs[2].lend, [true], "{ct}/{st}");
            let before = counts(&client);
            assert_eq!(client.call::<(i32,), i32>("null", (5,)).unwrap(), 0);
            assert_eq!(delta(before, counts(&client)), (0, 0), "{ct}/{st}");
            // Scalars-only procedures go through the server copy's register entry on the
            // direct transport: no A-stack, so no copies; the sums are still checked.
            let before = counts(&client);
            assert_eq!(client.call::<(i32,), i64>("add_loop", (5,)).unwrap(), 0);
            assert_eq!(
                delta(before, counts(&client)),
                if direct { (0, 0) } else { (5, 5) },
                "{ct}/{st}"
            );
            // A byte list still travels on the A-stack, on either transport; the isolated
            // server reads it in place (the direct path's server copy keeps its own counts).
            let (cb, sb) = (counts(&client), counts(&server));
            assert_eq!(
                client
                    .call::<(i32, i32), i32>("big_in_out", (64, 3))
                    .unwrap(),
                0
            );
            assert_eq!(delta(cb, counts(&client)).0, 3, "{ct}/{st}");
            assert_eq!(delta(sb, counts(&server)).0, 0, "{ct}/{st}");
        }
    }
}

#[test]
fn presentations_of_the_wrong_side_or_interface_are_refused() {
    let _guard = shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel.domain("s", lrpc_artifacts::BENCH_SERVER).unwrap();
    let client_side = kernel
        .load_presentation(&crate::example("bench-client-leaky"))
        .unwrap();
    let err = kernel
        .export_as(
            &server,
            "lrpc:bench/bench",
            "x",
            lrpc_kernel::ExportOptions::default().with_presentation(Some(client_side.clone())),
        )
        .unwrap_err();
    assert!(
        err.to_string().contains("expected a server presentation"),
        "{err}"
    );
    let server_side = kernel
        .load_presentation(&crate::example("bench-server-preserved"))
        .unwrap();
    let err = kernel
        .domain_with(
            "c",
            lrpc_artifacts::BENCH_CLIENT,
            lrpc_kernel::DomainOptions::default().with_presentations(vec![server_side]),
        )
        .unwrap_err();
    assert!(err.to_string().contains("client presentations"), "{err}");
    let err = kernel
        .presentation(
            "bad.toml",
            "interface = \"lrpc:bench/bench\"\nside = \"client\"\n[function.nope]\n",
        )
        .unwrap_err();
    assert!(err.to_string().contains("bad.toml:3"), "{err}");
}

#[test]
fn the_server_presentation_sizes_the_astacks() {
    let _guard = shared();
    let (kernel, server, client) = bench_pair_with(None, Some("bench-server-roomy"));
    let info = &client.client_bindings()[0];
    // big-in: 8 A-stacks of 66000 bytes; big-in-out: 2 of 66000; null and add as before.
    let total: usize = info.windows.iter().map(|w| w.2).sum();
    assert!(total >= 10 * 66000, "{total}");
    // 60 KiB now fits inline: no out-of-band segment is needed.
    let r: i64 = client.call("big_in", (60_000, 1)).unwrap();
    assert_eq!(r >> 8, 60_000);
    assert!(client.client_bindings()[0].oob_windows.is_empty());
    drop((kernel, server));
}

#[test]
fn a_hostile_peer_rewriting_the_astack_mid_call_can_not_break_the_server() {
    let _guard = shared();
    // The scribbler is the embedder's `write_window`, which breaks a lent view: the server
    // reads big-in-out's data in place while it changes, and still never traps (it reads the
    // length once and validates nothing else in a byte list).
    let (_k, server, client) = bench_pair_with(Some("bench-client-leaky"), None);
    let info = client.client_bindings()[0].clone();
    let (c_off, _, len) = info.windows[0].clone();
    let scribbler = client.clone();
    let (outcomes, writes) = beside_a_scribbler(
        move |x| {
            let at = c_off + (x as usize % (len - 8));
            scribbler.write_window(at, &x.to_le_bytes()).unwrap();
        },
        || client.call("big_in_out", (600, 20)).unwrap(),
    );
    assert!(writes >= 1000, "the scribbler ran ({writes} writes)");
    assert!(
        !server.is_terminated(),
        "the server never trapped: {outcomes:?}"
    );
    assert!(!client.is_terminated());
    for r in outcomes.keys() {
        let ok = *r == 0
            || *r == 1000
            || *r == -(Status::ServerRejected as i32)
            || *r == -(Status::BadReply as i32);
        assert!(ok, "unexpected outcome {r}: {outcomes:?}");
    }
    // The binding still works once the scribbling stops.
    assert_eq!(
        client
            .call::<(i32, i32), i32>("big_in_out", (600, 3))
            .unwrap(),
        0
    );
}

#[test]
fn results_are_copied_only_where_a_side_allocates_its_own_buffer() {
    let _guard = shared();
    const CALLS: i64 = 10;
    // (client module, server module, server out copies per call)
    let cases = [
        (
            lrpc_artifacts::BENCH_CLIENT,
            lrpc_artifacts::BENCH_SERVER,
            "big_in_out_loop",
            CALLS,
        ),
        (
            lrpc_artifacts::BENCH_CLIENT_INTO,
            lrpc_artifacts::BENCH_SERVER,
            "big_in_out_loop",
            CALLS,
        ),
        (
            lrpc_artifacts::BENCH_CLIENT,
            lrpc_artifacts::BENCH_SERVER_INPLACE,
            "big_in_out_loop",
            0,
        ),
        (
            lrpc_artifacts::BENCH_CLIENT_INTO,
            lrpc_artifacts::BENCH_SERVER_INPLACE,
            "big_in_out_loop",
            0,
        ),
    ];
    for (client_wasm, server_wasm, export, server_out) in cases {
        let kernel = Kernel::new().unwrap();
        let server = kernel.domain("s", server_wasm).unwrap();
        kernel.export(&server, "lrpc:bench/bench").unwrap();
        let client = kernel.domain("c", client_wasm).unwrap();
        assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
        for len in [0, 200, 1000, 5000] {
            let (cb, sb) = (counts(&client), counts(&server));
            let r: i32 = client.call(export, (len, CALLS as i32)).unwrap();
            assert_eq!(r, 0, "{len} bytes");
            let (cd, sd) = (delta(cb, counts(&client)), delta(sb, counts(&server)));
            assert_eq!(sd.1, server_out, "server out copies, {len} bytes");
            assert_eq!(cd.1, CALLS, "the client copies each result out once");
        }
    }
}

#[test]
fn a_fully_trusting_client_calls_a_copy_of_the_server_directly() {
    let _guard = shared();
    let (_k, server, client) = bench_pair_with(Some("bench-client-trusting"), None);
    let info = client.client_bindings()[0].clone();
    assert_eq!(info.combination.transport, Transport::Direct);
    let before = counts(&server);
    assert_eq!(client.call::<(i32,), i32>("null", (1000,)).unwrap(), 0);
    assert_eq!(client.call::<(i32, i32), i64>("add", (40, 2)).unwrap(), 42);
    let r: i64 = client.call("big_in", (200, 10)).unwrap();
    assert_eq!(r >> 8, 200);
    assert_eq!(
        client
            .call::<(i32, i32), i32>("big_in_out", (1000, 10))
            .unwrap(),
        0
    );
    assert_eq!(
        counts(&server),
        before,
        "the exported server domain never ran: the calls went to the client's own copy"
    );
    // Arguments too large for an A-stack take the isolated path, to the exported server,
    // which reads them in place (lent) and copies its result out.
    assert_eq!(
        client
            .call::<(i32, i32), i32>("big_in_out", (5000, 1))
            .unwrap(),
        0
    );
    assert_eq!(delta(before, counts(&server)), (0, 1));
}

#[test]
fn under_full_trust_a_server_trap_takes_the_client_down() {
    let _guard = shared();
    let kernel = Kernel::new().unwrap();
    let server = kernel
        .domain("faulty", lrpc_artifacts::FAULTY_SERVER)
        .unwrap();
    kernel.export(&server, "lrpc:test/faulty").unwrap();
    let trusting = kernel
        .presentation(
            "trusting.toml",
            "interface = \"lrpc:test/faulty\"\nside = \"client\"\ntrust = \"leaky+unprotected\"\n",
        )
        .unwrap();
    let client = kernel
        .domain_with(
            "c",
            lrpc_artifacts::FAULTY_CLIENT,
            lrpc_kernel::DomainOptions::default().with_presentations(vec![trusting]),
        )
        .unwrap();
    assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(client.call::<(i32,), i64>("echo", (1,)).unwrap(), 2);
    let err = client.call::<(), i32>("crash", ()).unwrap_err();
    assert!(
        matches!(
            err,
            lrpc_kernel::Error::Fault(lrpc_kernel::error::Fault::Trapped { .. })
        ),
        "{err}"
    );
    assert!(
        client.is_terminated(),
        "the trap unwound through the client"
    );
    assert!(
        !server.is_terminated(),
        "the exported server never ran the call"
    );
}

#[test]
fn special_parameters_are_marshaled_by_the_programmers_own_routines() {
    let _guard = shared();
    // Client marshals big-in's argument itself (bench-client-into), server unmarshals it
    // itself (bench-server-inplace); each also works against the other side's ordinary stubs.
    let cases = [
        (
            lrpc_artifacts::BENCH_CLIENT_INTO,
            lrpc_artifacts::BENCH_SERVER_INPLACE,
            "big_in_special",
        ),
        (
            lrpc_artifacts::BENCH_CLIENT_INTO,
            lrpc_artifacts::BENCH_SERVER,
            "big_in_special",
        ),
        (
            lrpc_artifacts::BENCH_CLIENT,
            lrpc_artifacts::BENCH_SERVER_INPLACE,
            "big_in",
        ),
    ];
    for (client_wasm, server_wasm, export) in cases {
        let kernel = Kernel::new().unwrap();
        let server = kernel.domain("s", server_wasm).unwrap();
        kernel.export(&server, "lrpc:bench/bench").unwrap();
        let client = kernel.domain("c", client_wasm).unwrap();
        assert_eq!(client.call::<(), i32>("bind", ()).unwrap(), 0);
        for len in [0usize, 1, 200, 1487, 1488, 5000] {
            let p = crate::pattern(len);
            let ends = match p.as_slice() {
                [] => 0,
                [only] => *only,
                [first, .., last] => first ^ last,
            };
            let want = ((len as i64) << 8) | i64::from(ends);
            let r: i64 = client.call(export, (len as i32, 3)).unwrap();
            assert_eq!(r, want, "{export}, {len} bytes");
        }
    }
}

/// `lrpc:http/plugin@0.2.0#handle` from a client that speaks the raw ABI to `http-hello`, which
/// promises `in.body = "preserved"`: the request holds strings (the head), so the server
/// copies the head into private memory and reads the body in place. While another thread
/// rewrites the A-stack mid-call, the server never traps: a head that no longer decodes is
/// rejected, and the body's length is read once (the body itself may change under the
/// handler, which the promise allows).
#[test]
fn a_server_borrowing_a_body_beside_strings_copies_the_head_and_survives_a_scribbler() {
    const PLUGIN: &str = "lrpc:http/plugin@0.2.0";
    let _guard = shared();
    let kernel = Kernel::new().unwrap();
    let hello = kernel.domain("hello", lrpc_artifacts::HTTP_HELLO).unwrap();
    let preserved = kernel
        .load_presentation(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../guests/http-hello/server.toml"),
        )
        .unwrap();
    crate::export_with(
        &kernel,
        &hello,
        PLUGIN,
        lrpc_kernel::ExportOptions::default().with_presentation(Some(preserved)),
    )
    .unwrap();
    let h = kernel.domain("hostile", lrpc_artifacts::HOSTILE).unwrap();
    let fp = kernel.interface(PLUGIN).unwrap().fingerprint as i64;
    let scratch: i32 = h.call("scratch", ()).unwrap();
    h.write_memory(scratch as usize, PLUGIN.as_bytes()).unwrap();
    let bound: i32 = h
        .call(
            "bind_any",
            (scratch, PLUGIN.len() as i32, fp, scratch + 256, 2048),
        )
        .unwrap();
    assert_eq!(bound, 0);
    let info = h.client_bindings()[0].clone();
    assert_eq!(info.combination.procs[0].borrow, [false, true]);
    let at = info.windows[0].0;
    let len = kernel.interface(PLUGIN).unwrap().procs[0].astack_size as usize;

    // The request, inline after its header: head { "POST", "/x", [("a", "b")] }, then a body
    // filling most of the A-stack (well past what is copied whole).
    let mut req = Vec::new();
    let put = |req: &mut Vec<u8>, b: &[u8]| {
        req.extend_from_slice(&(b.len() as u32).to_le_bytes());
        req.extend_from_slice(b);
    };
    put(&mut req, b"POST");
    put(&mut req, b"/x");
    req.extend_from_slice(&1u32.to_le_bytes());
    put(&mut req, b"a");
    put(&mut req, b"b");
    let body: Vec<u8> = (0..len - 8 - req.len() - 4 - 64)
        .map(|i| (i * 7) as u8)
        .collect();
    assert!(body.len() > 1000, "an A-stack of {len} bytes");
    put(&mut req, &body);
    let mut astack = 0u32.to_le_bytes().to_vec();
    astack.extend_from_slice(&(req.len() as u32).to_le_bytes());
    astack.extend_from_slice(&req);
    let handle = info.handle as i64;
    let call = || -> i32 {
        h.write_window(at, &astack).unwrap();
        h.call("call_raw", (handle, 0, at as i32)).unwrap()
    };
    let copied = || -> (i64, i64) {
        (
            hello.call("lrpc_in_copies", ()).unwrap(),
            hello.call("lrpc_in_copied_bytes", ()).unwrap(),
        )
    };
    let before = copied();
    assert_eq!(call(), 0);
    let after = copied();
    // One copy, of the head's string bytes ("POST", "/x", "a", "b"): the body stays put.
    assert_eq!((after.0 - before.0, after.1 - before.1), (1, 8));
    let span = 8 + req.len() - 4;
    let scribbler = h.clone();
    let (outcomes, writes) = beside_a_scribbler(
        move |x| {
            // Mostly the head and the body's length, sometimes the body.
            let off = if x.is_multiple_of(4) {
                x as usize % span
            } else {
                8 + x as usize % 48
            };
            scribbler.write_window(at + off, &x.to_le_bytes()).unwrap();
        },
        call,
    );
    assert!(writes >= 1000, "the scribbler ran ({writes} writes)");
    assert!(
        !hello.is_terminated(),
        "the server never trapped: {outcomes:?}"
    );
    for s in outcomes.keys() {
        assert!(
            *s == 0 || *s == Status::ServerRejected as i32,
            "unexpected status {s}: {outcomes:?}"
        );
    }
    // Once the scribbling stops, the same request goes through again.
    assert_eq!(call(), 0);
}

/// Calls `call` at least 300 times while another thread keeps calling `scribble` with fresh
/// pseudo-random words, and on until it has done so 1,000 times (a loaded machine may not run
/// it at all during the first 300 calls), for at most two minutes. Answers how often each
/// outcome came, and the scribbler's writes.
fn beside_a_scribbler(
    mut scribble: impl FnMut(u32) + Send + 'static,
    mut call: impl FnMut() -> i32,
) -> (std::collections::BTreeMap<i32, usize>, u64) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let scribbler = {
        let (stop, written) = (stop.clone(), written.clone());
        std::thread::spawn(move || {
            let mut x = 0x9e37_79b9_u32;
            while !stop.load(Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                scribble(x);
                written.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut outcomes = std::collections::BTreeMap::new();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut calls = 0;
    while (calls < 300 || written.load(Ordering::Relaxed) < 1000)
        && std::time::Instant::now() < until
    {
        *outcomes.entry(call()).or_insert(0) += 1;
        calls += 1;
    }
    stop.store(true, Ordering::Relaxed);
    scribbler.join().unwrap();
    (outcomes, written.load(Ordering::Relaxed))
}
