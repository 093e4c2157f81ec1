//! The records of a WASI 0.2 handler's instances: an instance in its Store, those waiting
//! between requests and the room for those at work (p2.rs serves requests on them).

use super::HttpState;
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::Store;
use wasmtime_wasi_http::p2::bindings::Proxy;

/// An instance of a handler, in its own Store.
pub(super) struct HandlerInstance {
    pub(super) generation: u64,
    pub(super) store: Store<HttpState>,
    pub(super) proxy: Proxy,
    /// Requests it has served.
    pub(super) served: usize,
}

/// A WASI 0.2 handler's instances between requests: the idle ones that may serve again
/// (with `reuse` above 1), and the room for instances at work.
pub(super) struct Instances {
    pub(super) idle: Mutex<Vec<HandlerInstance>>,
    /// A permit per instance at work: as many as the handler's routes have workers, which
    /// the kernel's instance pool is sized for.
    pub(super) room: Arc<Semaphore>,
}

impl Instances {
    /// Room for `workers` instances at work at once.
    pub(super) fn new(workers: usize) -> Instances {
        Instances {
            idle: Mutex::default(),
            room: Arc::new(Semaphore::new(workers.max(1))),
        }
    }
}

/// An instance at work on a request, with its room; gives both back when dropped.
pub(super) struct AtWork {
    pub(super) instance: Option<HandlerInstance>,
    pub(super) _room: OwnedSemaphorePermit,
}
