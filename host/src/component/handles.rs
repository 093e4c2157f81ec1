//! Resource handles between two component domains.
//!
//! The component model keeps a table of handles per instance, and a handle means something
//! only in the instance that holds it. When a client's import is bound to a server's export
//! whose interface defines resources, the kernel defines each of those resources in the
//! client as a resource of the host (a dynamic host resource, its type unique to the
//! binding and the resource), and keeps, per binding, a table from the `rep` the client sees
//! to the handle the server gave ([`ResourceAny`], owned by the host in the server's Store):
//!
//! * a handle the server returns (`own<T>`) becomes a new entry, and the client gets an
//!   `own` of the host resource with that entry's `rep`;
//! * a client's `own` passed in a call is moved out of the table and handed to the server;
//!   a `borrow` is looked up and lent to the server for the call;
//! * the client dropping its handle runs the host resource's destructor, which drops the
//!   server's handle in the server (under its Store lock, like a call; a dead or terminated
//!   server is fine to ignore: its handles went with its Store).
//!
//! Each entry remembers the server instance it came from. After the server is restarted
//! the entry is stale: a call passing it fails as a failed call does (recorded, the failure
//! value answered, `StaleBinding`) without entering the server, and dropping it does
//! nothing. A call that fails while the client expects a handle back answers a handle with
//! no server handle behind it (stale from the start), since handles have no zero value.

use super::bind::holds_handles;
use super::record::ComponentData;
use crate::sync::lock;
use lrpc_abi::Status;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use wasmtime::StoreContextMut;
use wasmtime::component::types::Type;
use wasmtime::component::{ResourceAny, ResourceDynamic, ResourceType, Val};

/// The dynamic type numbers of host resources, unique in the process, so that a handle of
/// one binding (or one resource) never passes for another's.
static NEXT_TYPE: AtomicU32 = AtomicU32::new(1);

/// Most entries one binding keeps: handles the client holds into its server.
const MAX_ENTRIES: usize = 1 << 20;

/// One handle the client holds: the server's handle, the server instance it belongs to.
struct Entry {
    /// `None` for a handle answered by a failed call.
    server: Option<ResourceAny>,
    instance: u64,
}

#[derive(Default)]
struct Table {
    slots: Vec<Option<Entry>>,
    free: Vec<u32>,
}

/// The resources of one bound import and the handles the client holds into its server.
pub(crate) struct Handles {
    /// Per resource of the interface: its name, its type in the client's import, the dynamic
    /// type number of the host resource the client sees.
    kinds: Vec<(String, ResourceType, u32)>,
    table: Mutex<Table>,
}

impl Handles {
    /// The resources `(name, type in the client)` of an imported interface.
    pub(crate) fn new(resources: Vec<(String, ResourceType)>) -> Handles {
        Handles {
            kinds: resources
                .into_iter()
                .map(|(n, t)| (n, t, NEXT_TYPE.fetch_add(1, Ordering::Relaxed)))
                .collect(),
            table: Mutex::new(Table::default()),
        }
    }

    /// `(name, dynamic type number)` of each resource, to define them in the client.
    pub(crate) fn kinds(&self) -> impl Iterator<Item = (&str, u32)> {
        self.kinds.iter().map(|(n, _, id)| (n.as_str(), *id))
    }

    fn kind_of(&self, t: &ResourceType) -> Option<u32> {
        self.kinds.iter().find(|(_, k, _)| k == t).map(|k| k.2)
    }

    fn insert(&self, entry: Entry) -> Option<u32> {
        let mut t = lock(&self.table);
        if let Some(rep) = t.free.pop() {
            t.slots[rep as usize] = Some(entry);
            return Some(rep);
        }
        if t.slots.len() >= MAX_ENTRIES {
            return None;
        }
        t.slots.push(Some(entry));
        u32::try_from(t.slots.len() - 1).ok()
    }

    /// Takes the entry of `rep` out of the table (the client's handle is gone).
    pub(crate) fn take(&self, rep: u32) -> Option<(Option<ResourceAny>, u64)> {
        let mut t = lock(&self.table);
        let e = t.slots.get_mut(rep as usize)?.take()?;
        t.free.push(rep);
        Some((e.server, e.instance))
    }

    /// Takes every entry with a server handle behind it out of the table (the client is
    /// gone).
    pub(crate) fn take_all(&self) -> Vec<(ResourceAny, u64)> {
        let mut t = lock(&self.table);
        let t = &mut *t;
        let mut all = Vec::new();
        for (rep, slot) in t.slots.iter_mut().enumerate() {
            if let Some(e) = slot.take() {
                if let Some(server) = e.server {
                    all.push((server, e.instance));
                }
                t.free.push(rep as u32);
            }
        }
        all
    }

    fn get(&self, rep: u32) -> Option<(Option<ResourceAny>, u64)> {
        let t = lock(&self.table);
        let e = t.slots.get(rep as usize)?.as_ref()?;
        Some((e.server, e.instance))
    }

    /// A client handle of the resource `t` for the server's handle `server` of instance
    /// `instance` (`None`: a handle with nothing behind it).
    fn client_handle(
        &self,
        ctx: &mut StoreContextMut<'_, ComponentData>,
        t: &ResourceType,
        server: Option<ResourceAny>,
        instance: u64,
    ) -> Option<Val> {
        let ty = self.kind_of(t)?;
        let rep = self.insert(Entry { server, instance })?;
        match ResourceDynamic::new_own(rep, ty).try_into_resource_any(&mut *ctx) {
            Ok(any) => Some(Val::Resource(any)),
            Err(_) => {
                self.take(rep);
                None
            }
        }
    }

    /// A handle answered by a failed call in place of an `own` (see the module's
    /// documentation); `None` for other types.
    pub(crate) fn failed_handle(
        &self,
        ctx: &mut StoreContextMut<'_, ComponentData>,
        t: &Type,
    ) -> Option<Val> {
        match t {
            Type::Own(r) => self.client_handle(ctx, r, None, 0),
            _ => None,
        }
    }

    /// Translates a parameter from the client's handles to the server's, noting the server
    /// instance of each handle in `instances`. A client's `own` leaves the table.
    pub(crate) fn to_server(
        &self,
        ctx: &mut StoreContextMut<'_, ComponentData>,
        v: &Val,
        instances: &mut Vec<u64>,
    ) -> Result<Val, Status> {
        if let Val::Resource(any) = v {
            return self.handle_to_server(ctx, *any, instances);
        }
        let mut each = |v: &Val| self.to_server(ctx, v, instances);
        Ok(match v {
            Val::List(xs) => Val::List(xs.iter().map(each).collect::<Result<_, _>>()?),
            Val::Tuple(xs) => Val::Tuple(xs.iter().map(each).collect::<Result<_, _>>()?),
            Val::Record(fs) => Val::Record(
                fs.iter()
                    .map(|(n, v)| Ok((n.clone(), each(v)?)))
                    .collect::<Result<_, _>>()?,
            ),
            Val::Variant(c, p) => Val::Variant(c.clone(), boxed(p, each)?),
            Val::Option(p) => Val::Option(boxed(p, each)?),
            Val::Result(Ok(p)) => Val::Result(Ok(boxed(p, each)?)),
            Val::Result(Err(p)) => Val::Result(Err(boxed(p, each)?)),
            other => other.clone(),
        })
    }

    fn handle_to_server(
        &self,
        ctx: &mut StoreContextMut<'_, ComponentData>,
        any: ResourceAny,
        instances: &mut Vec<u64>,
    ) -> Result<Val, Status> {
        let d = any
            .try_into_resource_dynamic(&mut *ctx)
            .map_err(|_| Status::StaleBinding)?;
        if !self.kinds.iter().any(|k| k.2 == d.ty()) {
            return Err(Status::StaleBinding);
        }
        let found = if d.owned() {
            self.take(d.rep())
        } else {
            self.get(d.rep())
        };
        let Some((Some(server), instance)) = found else {
            return Err(Status::StaleBinding);
        };
        instances.push(instance);
        Ok(Val::Resource(server))
    }

    /// Translates a result of the server (instance `instance`) to the client's handles, led
    /// by its type `t` in the client's import: each server `own` becomes a new entry.
    pub(crate) fn to_client(
        &self,
        ctx: &mut StoreContextMut<'_, ComponentData>,
        v: Val,
        t: &Type,
        instance: u64,
    ) -> Result<Val, Status> {
        if !holds_handles(t) {
            return Ok(v);
        }
        let bad = Status::StaleBinding;
        Ok(match (t, v) {
            (Type::Own(r), Val::Resource(any)) => {
                self.client_handle(ctx, r, Some(any), instance).ok_or(bad)?
            }
            (Type::List(l), Val::List(xs)) => {
                let et = l.ty();
                Val::List(
                    xs.into_iter()
                        .map(|x| self.to_client(ctx, x, &et, instance))
                        .collect::<Result<_, _>>()?,
                )
            }
            (Type::Tuple(tt), Val::Tuple(xs)) => Val::Tuple(
                tt.types()
                    .zip(xs)
                    .map(|(t, x)| self.to_client(ctx, x, &t, instance))
                    .collect::<Result<_, _>>()?,
            ),
            (Type::Record(r), Val::Record(fs)) => Val::Record(
                r.fields()
                    .zip(fs)
                    .map(|(f, (n, x))| Ok((n, self.to_client(ctx, x, &f.ty, instance)?)))
                    .collect::<Result<_, _>>()?,
            ),
            (Type::Variant(vt), Val::Variant(c, p)) => {
                let ct = vt.cases().find(|k| k.name == c).and_then(|k| k.ty);
                let p = match (p, ct) {
                    (Some(p), Some(ct)) => Some(Box::new(self.to_client(ctx, *p, &ct, instance)?)),
                    (None, None) => None,
                    _ => return Err(bad),
                };
                Val::Variant(c, p)
            }
            (Type::Option(o), Val::Option(p)) => Val::Option(match p {
                Some(p) => Some(Box::new(self.to_client(ctx, *p, &o.ty(), instance)?)),
                None => None,
            }),
            (Type::Result(rt), Val::Result(r)) => {
                let (ok, p, pt) = match r {
                    Ok(p) => (true, p, rt.ok()),
                    Err(p) => (false, p, rt.err()),
                };
                let p = match (p, pt) {
                    (Some(p), Some(pt)) => Some(Box::new(self.to_client(ctx, *p, &pt, instance)?)),
                    (None, None) => None,
                    _ => return Err(bad),
                };
                Val::Result(if ok { Ok(p) } else { Err(p) })
            }
            _ => return Err(bad),
        })
    }
}

fn boxed(
    p: &Option<Box<Val>>,
    mut each: impl FnMut(&Val) -> Result<Val, Status>,
) -> Result<Option<Box<Val>>, Status> {
    Ok(match p {
        Some(v) => Some(Box::new(each(v)?)),
        None => None,
    })
}
