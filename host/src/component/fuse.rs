//! The trusted component pair: a client that trusts a server fully (`leaky+unprotected`)
//! gets the server composed into itself at creation (`wac-graph`), so its calls go through
//! wasmtime's fused adapters with no host crossing — the component analog of the
//! direct-linked path. The copy of the server lives in the client's Store, with its own
//! memory and state (so it suits servers that keep no state between calls), and a trap in it
//! traps the client too.

use wac_graph::types::Package;
use wac_graph::{CompositionGraph, EncodeOptions};

/// Composes `server` (exporting `interface`) into `client` (importing it): one component
/// whose client instance imports `interface` from the server instance and which exports
/// everything the client exports. The two components' other imports become imports of the
/// composition.
pub(crate) fn compose(client: &[u8], server: &[u8], interface: &str) -> Result<Vec<u8>, String> {
    let e = |e: &dyn std::fmt::Display| format!("{e:#}");
    let mut graph = CompositionGraph::new();
    let s = Package::from_bytes(
        "lrpc:fused-server",
        None,
        server.to_vec(),
        graph.types_mut(),
    )
    .map_err(|x| e(&x))?;
    let s = graph.register_package(s).map_err(|x| e(&x))?;
    let c = Package::from_bytes(
        "lrpc:fused-client",
        None,
        client.to_vec(),
        graph.types_mut(),
    )
    .map_err(|x| e(&x))?;
    let c = graph.register_package(c).map_err(|x| e(&x))?;
    let client_exports: Vec<String> = graph.types()[graph[c].ty()]
        .exports
        .keys()
        .cloned()
        .collect();
    let si = graph.instantiate(s);
    let ci = graph.instantiate(c);
    let served = graph
        .alias_instance_export(si, interface)
        .map_err(|x| e(&x))?;
    graph
        .set_instantiation_argument(ci, interface, served)
        .map_err(|x| e(&x))?;
    for name in &client_exports {
        let item = graph.alias_instance_export(ci, name).map_err(|x| e(&x))?;
        graph.export(item, name).map_err(|x| e(&x))?;
    }
    graph.encode(EncodeOptions::default()).map_err(|x| e(&x))
}
