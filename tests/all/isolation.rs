//! A-stacks are shared by exactly the two domains of a binding, and binding handles can not be
//! forged, reused after unbinding or borrowed from another domain.

use crate::{bench_pair, memfd_mappings, neg};
use lrpc_kernel::Status;
use std::collections::HashSet;

#[test]
fn astack_pages_are_shared_by_the_pair_and_by_no_third_domain() {
    let _guard = crate::exclusive();
    let before = memfd_mappings();
    // A client that leaves residue on its A-stacks, so the test can look at it.
    let (kernel, server, client) = crate::bench_pair_with(Some("bench-client-leaky"), None);
    assert_eq!(
        memfd_mappings(),
        before + 2,
        "one A-stack segment, mapped into exactly two memories"
    );
    let third = kernel.domain("third", lrpc_artifacts::HOSTILE).unwrap();

    // The client sends 1000 bytes of 0xAB; they sit on an A-stack of `big-in`.
    let s: i32 = client.call("fill", (1000, 0xab)).unwrap();
    assert_eq!(s, 0);
    let info = &client.client_bindings()[0];
    let (c_off, s_offs, len) = info.windows[0].clone();
    let s_off = s_offs[0];
    let c_bytes = client.read_memory(c_off, len).unwrap();
    let s_bytes = server.read_memory(s_off, len).unwrap();
    assert_eq!(c_bytes, s_bytes, "both sides see the same A-stack pages");
    assert!(c_bytes.windows(1000).any(|w| w.iter().all(|&b| b == 0xab)));

    // A write on one side is visible on the other side, at its own offset.
    client.write_memory(c_off + 16, b"from the client").unwrap();
    assert_eq!(
        server.read_memory(s_off + 16, 15).unwrap(),
        b"from the client"
    );

    // The third domain sees none of it: not at the same offset, not anywhere.
    let pattern = i64::from_le_bytes([0xab; 8]);
    let found: i32 = third.call("scan", (pattern,)).unwrap();
    assert_eq!(found, 0, "a third domain's memory holds no A-stack bytes");
    let pages: i32 = third.call("mem_pages", ()).unwrap();
    if (c_off as u64) < (pages as u64) * 65536 {
        third
            .call::<(i32, i32), ()>("poke", (c_off as i32 + 16, 0x55))
            .unwrap();
        let b: i32 = third.call("peek", (c_off as i32 + 16,)).unwrap();
        assert_eq!(b, 0x55, "the third domain writes its own memory");
        assert_eq!(client.read_memory(c_off + 16, 4).unwrap(), b"from");
    }
    assert_eq!(memfd_mappings(), before + 2, "still mapped twice only");
    drop((server, client, third, kernel));
}

#[test]
fn forged_stale_foreign_handles_bad_procedures_and_astacks_are_refused_distinctly() {
    let _guard = crate::shared();
    let (kernel, _server, client) = bench_pair();
    let fp = kernel.interface("lrpc:bench/bench").unwrap().fingerprint as i64;
    let h = kernel.domain("hostile", lrpc_artifacts::HOSTILE).unwrap();

    let wrong: i64 = h.call("bind_raw", (fp ^ 1,)).unwrap();
    assert_eq!(wrong, neg(Status::InterfaceMismatch));
    let handle: i64 = h.call("bind_raw", (fp,)).unwrap();
    assert!(handle > 0, "bind: {handle}");
    let a0: i32 = h.call("astack", (0,)).unwrap();
    let a1: i32 = h.call("astack", (1,)).unwrap();
    let call = |hd: i64, p: i32, a: i32| -> i32 { h.call("call_raw", (hd, p, a)).unwrap() };
    assert_eq!(
        call(handle, 0, a0),
        Status::Ok as i32,
        "a well-formed null call"
    );

    let mut seen = HashSet::new();
    let mut expect = |got: i32, want: Status, what: &str| {
        assert_eq!(got, want as i32, "{what}: got {:?}", Status::try_from(got));
        seen.insert(want);
    };
    // Forged: a slot never issued, a generation never issued, an owner that is no domain.
    expect(
        call(handle + (5 << 32), 0, a0),
        Status::ForgedBinding,
        "unissued slot",
    );
    expect(
        call(handle + 1, 0, a0),
        Status::ForgedBinding,
        "future generation",
    );
    expect(
        call(0x7fff_0000_0000_0001, 0, a0),
        Status::ForgedBinding,
        "unknown owner",
    );
    expect(call(0, 0, a0), Status::ForgedBinding, "zero");
    // Foreign: the real client's live handle, presented by another domain.
    let theirs = client.client_bindings()[0].handle as i64;
    expect(
        call(theirs, 0, a0),
        Status::ForeignBinding,
        "another domain's handle",
    );
    // Procedures out of range.
    expect(
        call(handle, 4, a0),
        Status::BadProcedure,
        "proc past the end",
    );
    expect(call(handle, -1, a0), Status::BadProcedure, "negative proc");
    // A-stacks that are not the procedure's.
    expect(
        call(handle, 0, a0 + 1),
        Status::BadAStack,
        "misaligned A-stack",
    );
    expect(
        call(handle, 0, a1),
        Status::BadAStack,
        "another procedure's A-stack",
    );
    expect(call(handle, 0, 0), Status::BadAStack, "address 0");
    expect(call(handle, 0, -8), Status::BadAStack, "address past 4 GiB");
    let size = kernel.interface("lrpc:bench/bench").unwrap().procs[0].astack_size as i32;
    expect(
        call(handle, 0, a0 + 5 * size),
        Status::BadAStack,
        "one past the last",
    );
    // Stale: after unbinding, the same handle is dead.
    assert_eq!(h.call::<(i64,), i32>("unbind_raw", (handle,)).unwrap(), 0);
    expect(call(handle, 0, a0), Status::StaleBinding, "after unbind");
    let again: i32 = h.call("unbind_raw", (handle,)).unwrap();
    assert_eq!(again, Status::StaleBinding as i32);
    // The slot is reused with a new generation: the old handle stays stale.
    let handle2: i64 = h.call("bind_raw", (fp,)).unwrap();
    assert_ne!(handle2, handle);
    expect(call(handle, 0, a0), Status::StaleBinding, "old generation");
    let a0b: i32 = h.call("astack", (0,)).unwrap();
    assert_eq!(call(handle2, 0, a0b), 0);

    assert_eq!(seen.len(), 5, "five distinct refusals: {seen:?}");
    assert!(!h.is_terminated(), "refusals are statuses, not traps");
}

#[test]
fn every_kernel_import_survives_arbitrary_arguments() {
    let _guard = crate::shared();
    let (kernel, server, client) = bench_pair();
    let fp = kernel.interface("lrpc:bench/bench").unwrap().fingerprint as i64;
    let h = kernel.domain("hostile", lrpc_artifacts::HOSTILE).unwrap();
    let handle: i64 = h.call("bind_raw", (fp,)).unwrap();
    assert!(handle > 0);
    let a0: i32 = h.call("astack", (0,)).unwrap();
    let scratch: i32 = h.call("scratch", ()).unwrap();
    let pages: i32 = h.call("mem_pages", ()).unwrap();
    let mem = i64::from(pages) * 65536;
    // A deterministic stream of values mixing plausible and absurd ones.
    let mut x = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = || crate::xorshift(&mut x);
    let pick32 = |r: u64| crate::pick32(r, scratch, a0, 64, mem);
    let pick64 = |r: u64| crate::pick64(r, handle);
    let valid = |s: i32| lrpc_kernel::Status::try_from(s).is_ok();
    for _ in 0..4000 {
        let r = next();
        let s: i32 = match r % 6 {
            0 => h
                .call(
                    "call_raw",
                    (pick64(next()), pick32(next()) % 6, pick32(next())),
                )
                .unwrap(),
            1 => h
                .call(
                    "oob_raw",
                    (
                        pick64(next()),
                        pick32(next()) % 6,
                        pick32(next()),
                        pick32(next()) % 3,
                        pick32(next()),
                        pick32(next()),
                    ),
                )
                .unwrap(),
            2 => h
                .call(
                    "more_raw",
                    (pick64(next()), pick32(next()) % 6, pick32(next())),
                )
                .unwrap(),
            3 => h
                .call("reply_raw", (pick32(next()), pick32(next())))
                .unwrap(),
            4 => h
                .call(
                    "bind_any",
                    (
                        pick32(next()),
                        pick32(next()) % 600,
                        fp,
                        pick32(next()),
                        pick32(next()),
                    ),
                )
                .unwrap(),
            _ => h.call("unbind_raw", (pick64(next()),)).unwrap(),
        };
        assert!(valid(s), "a kernel import answered {s}, not a status");
    }
    assert!(!h.is_terminated(), "refusals never trap the caller");
    assert!(!server.is_terminated(), "the server is untouched");
    // Everyone still works.
    assert_eq!(client.call::<(i32, i32), i64>("add", (2, 3)).unwrap(), 5);
    assert_eq!(
        client
            .call::<(i32, i32), i32>("big_in_out", (3000, 2))
            .unwrap(),
        0
    );
}

/// Whether `d`'s memory (replica 0) holds a run of 64 bytes equal to `byte`.
fn holds_run(d: &lrpc_kernel::Domain, byte: u8) -> bool {
    let mem = d.read_memory(0, d.memory_size().unwrap()).unwrap();
    let mut run = 0;
    mem.iter().any(|&b| {
        run = if b == byte { run + 1 } else { 0 };
        run >= 64
    })
}

/// Calls leave their arguments on the pair's A-stack (nothing clears it), so what keeps them
/// from other pairs is the placement: a fresh memory file per binding, mapped into that pair
/// only, and zero pages mapped over it when it is revoked.
#[test]
fn no_byte_of_one_pair_reaches_another_pair_s_server_after_unbind_revocation_and_rebind() {
    const BENCH: &str = "lrpc:bench/bench";
    let _guard = crate::shared();
    let kernel = lrpc_kernel::Kernel::new().unwrap();
    let bench = |name: &str, export: &str| {
        let s = kernel.domain(name, lrpc_artifacts::BENCH_SERVER).unwrap();
        kernel
            .export_as(&s, BENCH, export, Default::default())
            .unwrap();
        s
    };
    // Pair one: a bench client and server under the interface's name.
    let s1 = bench("server one", BENCH);
    let a = kernel
        .domain("client one", lrpc_artifacts::BENCH_CLIENT)
        .unwrap();
    assert_eq!(a.call::<(), i32>("bind", ()).unwrap(), 0);
    // Pair two: another bench server under "two", bound by a raw client.
    let s2 = bench("server two", "two");
    let b = kernel
        .domain("client two", lrpc_artifacts::HOSTILE)
        .unwrap();
    let fp = kernel.interface(BENCH).unwrap().fingerprint as i64;
    let scratch: i32 = b.call("scratch", ()).unwrap();
    b.write_memory(scratch as usize, b"two").unwrap();
    let bind_two = || {
        let s: i32 = b
            .call("bind_any", (scratch, 3, fp, scratch + 256, 2048))
            .unwrap();
        assert_eq!(s, 0);
        let info = b.client_bindings()[0].clone();
        let at = info.windows[0].0 as i32;
        assert_eq!(
            b.call::<(i64, i32, i32), i32>("call_raw", (info.handle as i64, 0, at))
                .unwrap(),
            0
        );
        info.handle as i64
    };
    let mut two = bind_two();
    let others_hold = |byte: u8| [&s2, &b].iter().any(|d| holds_run(d, byte));

    // Pair one's call lends its bytes to s1 and leaves them on the A-stack.
    assert_eq!(a.call::<(i32, i32), i32>("fill", (1000, 0xab)).unwrap(), 0);
    let (_, s_offs, len) = a.client_bindings()[0].windows[0].clone();
    let window = s1.read_memory(s_offs[0], len).unwrap();
    assert!(window.windows(64).any(|w| w.iter().all(|&x| x == 0xab)));
    assert!(!others_hold(0xab), "after the call");

    // Unbind: zero pages over the window in both memories; pair two binds afresh.
    assert_eq!(a.call::<(), i32>("unbind", ()).unwrap(), 0);
    assert!(
        s1.read_memory(s_offs[0], len)
            .unwrap()
            .iter()
            .all(|&x| x == 0)
    );
    assert_eq!(b.call::<(i64,), i32>("unbind_raw", (two,)).unwrap(), 0);
    two = bind_two();
    assert!(!others_hold(0xab), "after unbind and re-bind");

    // Re-bind pair one and leave other bytes; then revoke it by terminating its server.
    assert_eq!(a.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(a.call::<(i32, i32), i32>("fill", (1000, 0xcd)).unwrap(), 0);
    kernel.terminate(&s1);
    assert_eq!(b.call::<(i64,), i32>("unbind_raw", (two,)).unwrap(), 0);
    bind_two();
    assert!(!others_hold(0xab) && !others_hold(0xcd), "after revocation");

    // A new server under pair one's old name: a new pair with the same client, on a fresh
    // segment. Neither its server nor pair two sees anything of the old pair.
    let s3 = bench("server three", BENCH);
    assert_eq!(a.call::<(), i32>("bind", ()).unwrap(), 0);
    assert_eq!(a.call::<(i32,), i32>("null", (1,)).unwrap(), 0);
    for byte in [0xab, 0xcd] {
        assert!(!holds_run(&s3, byte), "the new pair's server, {byte:#x}");
        assert!(!others_hold(byte), "pair two, {byte:#x}");
    }
}
