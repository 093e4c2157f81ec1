//! A node of a call chain: serves `lrpc:test/node` under the name `node-<id>` and calls other
//! nodes (including, re-entrantly, the one that called it).

include!(concat!(env!("OUT_DIR"), "/stubs.rs"));

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

thread_local! {
    static ID: Cell<u32> = const { Cell::new(0) };
    static PEERS: RefCell<BTreeMap<u8, Rc<node::Client>>> = const { RefCell::new(BTreeMap::new()) };
}

/// The client for `node-<id>`, bound on first use. No borrow of the cache is held during a
/// call, since the call may come back into this domain and bind another peer.
fn peer(id: u8) -> Result<Rc<node::Client>, u32> {
    if let Some(c) = PEERS.with(|p| p.borrow().get(&id).cloned()) {
        return Ok(c);
    }
    let c = Rc::new(node::Client::bind_named(&format!("node-{id}")).map_err(|e| e.code() as u32)?);
    PEERS.with(|p| p.borrow_mut().insert(id, c.clone()));
    Ok(c)
}

fn forward(route: &[u8], value: u32) -> Result<u32, u32> {
    let (first, rest) = route.split_first().ok_or(0u32)?;
    let c = peer(*first)?;
    match c.hop(rest, value) {
        Ok(r) => r,
        Err(e) => Err(e.code() as u32),
    }
}

#[derive(Default)]
struct Node;

impl node::Server for Node {
    fn hop(&self, route: &[u8], value: u32) -> Result<u32, u32> {
        let id = ID.with(|i| i.get());
        if route == [0] {
            // Drop (unbind) every cached peer binding of this node, including one that an
            // outer call of this node may still be travelling on, then answer.
            let peers = PEERS.with(|p| std::mem::take(&mut *p.borrow_mut()));
            for c in peers.values() {
                // Straight to the kernel: the outer call holds its own reference to the
                // client, so only a raw unbind revokes the binding under it.
                let _ = lrpc_sdk::sys::unbind(c.binding().handle() as i64);
            }
            return Ok(value.wrapping_mul(31).wrapping_add(id));
        }
        if route.is_empty() {
            return Ok(value.wrapping_mul(31).wrapping_add(id));
        }
        let inner = forward(route, value)?;
        Ok(inner.wrapping_mul(31).wrapping_add(id))
    }
}

node::export!(Node);

/// Sets this node's id.
#[unsafe(no_mangle)]
pub extern "C" fn set_id(id: i32) {
    ID.with(|i| i.set(id as u32));
}

fn encode(r: Result<u32, u32>) -> i64 {
    match r {
        Ok(v) => i64::from(v),
        Err(code) if code < 1000 => -i64::from(code),
        Err(code) => -(1000 + i64::from(code)),
    }
}

/// Calls hop along `route` (the low `len` bytes of `route_packed`, first hop first).
#[unsafe(no_mangle)]
pub extern "C" fn drive(route_packed: i64, len: i32, value: i32) -> i64 {
    let bytes = route_packed.to_le_bytes();
    let route = &bytes[..(len.clamp(0, 8) as usize)];
    encode(forward(route, value as u32))
}

/// Calls hop along a route of `hops` nodes alternating 2, 1, 2, 1, ...
#[unsafe(no_mangle)]
pub extern "C" fn drive_pingpong(hops: i32, value: i32) -> i64 {
    let route: Vec<u8> = (0..hops.max(0))
        .map(|i| if i % 2 == 0 { 2 } else { 1 })
        .collect();
    encode(forward(&route, value as u32))
}
