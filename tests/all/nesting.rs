//! Nested calls: chains A→B→C, call-backs B→A while A waits, and chains deep enough to need
//! more A-stacks than a binding starts with. A call lends its byte lists (here `route`) in
//! place unless the server can reach its client through bindings: a call-back needs the
//! cycle of bindings to exist before the call, and a re-entry through a binding made during
//! a lent call is refused.

use lrpc_kernel::{Domain, ExportOptions, Kernel, Status};

fn nodes(n: u8) -> (Kernel, Vec<Domain>) {
    let kernel = Kernel::new().unwrap();
    let mut v = Vec::new();
    for id in 1..=n {
        let d = kernel
            .domain(&format!("node-{id}"), lrpc_artifacts::NODE)
            .unwrap();
        d.call::<(i32,), ()>("set_id", (i32::from(id),)).unwrap();
        kernel
            .export_as(
                &d,
                "lrpc:test/node",
                &format!("node-{id}"),
                ExportOptions::default(),
            )
            .unwrap();
        v.push(d);
    }
    (kernel, v)
}

/// What `drive(route, value)` must return: the last node answers `value*31+id`, each node on
/// the way back maps `x` to `x*31+id`.
fn expected(route: &[u8], value: u32) -> u32 {
    let mut x = value
        .wrapping_mul(31)
        .wrapping_add(u32::from(*route.last().unwrap()));
    for &id in route[..route.len() - 1].iter().rev() {
        x = x.wrapping_mul(31).wrapping_add(u32::from(id));
    }
    x
}

/// Binds every node to every other one, from outside any call (each node calls each other
/// node once), so that every server can reach every client.
fn close_cycles(n: &[Domain]) {
    for (i, d) in n.iter().enumerate() {
        for j in (0..n.len()).filter(|&j| j != i) {
            let id = j as u8 + 1;
            assert_eq!(drive(d, &[id], 1), i64::from(expected(&[id], 1)));
        }
    }
}

/// `hop` requests copied into the private memory of `d`'s stubs so far.
fn in_copies(d: &Domain) -> i64 {
    d.call("lrpc_in_copies", ()).unwrap()
}

fn drive(d: &Domain, route: &[u8], value: u32) -> i64 {
    let mut packed = [0u8; 8];
    packed[..route.len()].copy_from_slice(route);
    d.call(
        "drive",
        (i64::from_le_bytes(packed), route.len() as i32, value as i32),
    )
    .unwrap()
}

#[test]
fn a_chain_a_b_c_returns_through_every_hop() {
    let _guard = crate::shared();
    let (_k, n) = nodes(3);
    let route = [2, 3];
    assert_eq!(drive(&n[0], &route, 5), i64::from(expected(&route, 5)));
}

#[test]
fn a_server_can_call_back_into_its_waiting_client() {
    let _guard = crate::shared();
    let (_k, n) = nodes(3);
    close_cycles(&n);
    // node-1 calls node-2, which calls node-1 while node-1 waits for it.
    let route = [2, 1];
    assert_eq!(drive(&n[0], &route, 7), i64::from(expected(&route, 7)));
    let route = [2, 1, 3, 1, 2];
    assert_eq!(drive(&n[0], &route, 9), i64::from(expected(&route, 9)));
}

#[test]
fn deep_recursion_between_two_domains_grows_the_astacks() {
    let _guard = crate::shared();
    let (_k, n) = nodes(2);
    close_cycles(&n);
    // node-1 and node-2 call each other 24 times deep: 12 calls nested on each binding,
    // more than the 5 A-stacks a binding starts with (LRPC 5.2: allocate more).
    let hops = 24;
    let route: Vec<u8> = (0..hops).map(|i| if i % 2 == 0 { 2 } else { 1 }).collect();
    let r: i64 = n[0].call("drive_pingpong", (hops, 3)).unwrap();
    assert_eq!(r, i64::from(expected(&route, 3)));
    let hop_proc = 0;
    for d in &n {
        let b = &d.client_bindings()[0];
        assert!(b.live);
        assert!(
            b.windows.len() > 1,
            "{}: more A-stack extents were mapped (proc {hop_proc})",
            d.name()
        );
    }
    // And the grown binding keeps working for shallow calls.
    assert_eq!(drive(&n[0], &[2], 1), i64::from(expected(&[2], 1)));
}

#[test]
fn unbinding_a_binding_while_a_call_on_it_is_in_flight_is_safe() {
    let _guard = crate::shared();
    let (_k, n) = nodes(2);
    close_cycles(&n);
    // node-1 calls node-2, which calls back into node-1 with the route [0]: node-1 then
    // unbinds its binding to node-2 — the one its outer call is still travelling on.
    let r: i64 = n[0]
        .call(
            "drive",
            (i64::from_le_bytes([2, 1, 0, 0, 0, 0, 0, 0]), 3, 4),
        )
        .unwrap();
    // The inner calls complete; the outer one learns that its binding went away under it.
    assert_eq!(r, -(lrpc_kernel::Status::StaleBinding as i64));
    assert!(!n[0].is_terminated() && !n[1].is_terminated());
    // The outer call finished on the revoked binding; node-1 binds afresh and goes on.
    assert!(n[0].client_bindings().is_empty(), "the binding is gone");
    assert_eq!(drive(&n[0], &[2], 1), i64::from(expected(&[2], 1)));
}

#[test]
fn a_call_lends_its_route_until_the_server_can_reach_its_client() {
    let _guard = crate::shared();
    let (_k, n) = nodes(2);
    let hop = |from: usize, route: &[u8], copier: usize| -> i64 {
        let before = in_copies(&n[copier]);
        assert_eq!(drive(&n[from], route, 3), i64::from(expected(route, 3)));
        in_copies(&n[copier]) - before
    };
    // node-2 binds nothing: node-1's call lends the route, node-2 copies nothing.
    assert_eq!(hop(0, &[2], 1), 0, "lent");
    // node-2 binds node-1 (outside any call of node-1): now node-2 can reach its client,
    // and node-1's calls to it copy.
    assert_eq!(
        hop(1, &[1], 0),
        1,
        "node-1 can reach node-2 already: copied"
    );
    assert_eq!(hop(0, &[2], 1), 1, "node-2 can reach node-1: copied");
    // node-2 unbinds node-1 (asked to during a call, which still copies): lent again.
    let before = in_copies(&n[1]);
    assert_eq!(drive(&n[0], &[2, 0], 3), i64::from(expected(&[2], 3)));
    assert_eq!(in_copies(&n[1]) - before, 1);
    assert!(n[1].client_bindings().is_empty());
    assert_eq!(hop(0, &[2], 1), 0, "lent once the cycle is gone");
}

#[test]
fn a_reentry_through_a_binding_made_during_a_lent_call_is_refused() {
    let _guard = crate::shared();
    let (_k, n) = nodes(2);
    // node-1 calls node-2, lending the route (node-2 binds nothing yet). node-2 binds
    // node-1 during the call and calls it: node-1's suspended call lends its arguments, so
    // running node-1's code now is refused.
    let route = [2, 1];
    let r = drive(&n[0], &route, 5);
    assert_eq!(r, -(Status::ReentryWhileLent as i64));
    assert!(!n[0].is_terminated() && !n[1].is_terminated());
    // The binding node-2 made stays: the cycle exists before the next call, which copies
    // and may call back.
    let before = in_copies(&n[1]);
    assert_eq!(drive(&n[0], &route, 5), i64::from(expected(&route, 5)));
    assert_eq!(
        in_copies(&n[1]) - before,
        2,
        "node-2 copied the route, and its own call's arguments onto the A-stack"
    );
}
