//! What a client sees when a call through one of its imports fails in the server (see the
//! module docs of `component`): the failure recorded in the client domain
//! ([`CallFailure`]), and the value the call answers instead — the error channel of a
//! `result`, or the zero value of the result type.

use super::record::ComponentData;
use lrpc_abi::Status;
use wasmtime::component::Val;
use wasmtime::component::types::Type;

/// A call a component domain made through one of its imports that failed in the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFailure {
    /// The import's interface.
    pub interface: String,
    /// The function called.
    pub function: String,
    /// Why it failed (`ServerTrapped`, `DeadlineExceeded`, `ServerTerminated`, `ServerBusy`,
    /// `StaleBinding`).
    pub status: Status,
}

/// Failures kept per domain until the embedder takes them.
const MAX_FAILURES: usize = 256;

/// Records a failed call a domain made through an import (the latest [`MAX_FAILURES`]).
pub(super) fn record_failure(
    data: &mut ComponentData,
    interface: &str,
    function: &str,
    status: Status,
) {
    let failures = &mut data.failures;
    if failures.len() >= MAX_FAILURES {
        failures.remove(0);
    }
    failures.push(CallFailure {
        interface: interface.to_string(),
        function: function.to_string(),
        status,
    });
}

/// What a failed call answers (see the module's documentation): the error channel when the
/// result is a `result`, the zero value otherwise.
pub(super) fn failed_value(t: &Type, text: &str) -> Option<Val> {
    failed_value_with(t, text, &mut |_| None)
}

/// A handle a failed call answers where its result holds one (see `handles`).
pub(super) type HandleFor<'a> = dyn FnMut(&Type) -> Option<Val> + 'a;

/// [`failed_value`], with `handle` making the handles the value holds.
pub(super) fn failed_value_with(t: &Type, text: &str, handle: &mut HandleFor<'_>) -> Option<Val> {
    match t {
        Type::Result(r) => {
            let err = match r.err() {
                None => None,
                Some(e) => Some(Box::new(error_value(&e, text, handle)?)),
            };
            Some(Val::Result(Err(err)))
        }
        other => zero(other, handle),
    }
}

fn error_value(t: &Type, text: &str, handle: &mut HandleFor<'_>) -> Option<Val> {
    match t {
        Type::String => Some(Val::String(text.to_string())),
        Type::Enum(e) if e.names().any(|n| n == "call-failed") => {
            Some(Val::Enum("call-failed".into()))
        }
        Type::Variant(v) => match v.cases().find(|c| c.name == "call-failed") {
            Some(c) => {
                let payload = match c.ty {
                    None => None,
                    Some(Type::String) => Some(Box::new(Val::String(text.to_string()))),
                    Some(p) => Some(Box::new(zero(&p, handle)?)),
                };
                Some(Val::Variant("call-failed".into(), payload))
            }
            None => zero(t, handle),
        },
        other => zero(other, handle),
    }
}

/// The zero value of a type; handles come from `handle`; `None` for futures and streams.
fn zero(t: &Type, handle: &mut HandleFor<'_>) -> Option<Val> {
    Some(match t {
        Type::Bool => Val::Bool(false),
        Type::S8 => Val::S8(0),
        Type::U8 => Val::U8(0),
        Type::S16 => Val::S16(0),
        Type::U16 => Val::U16(0),
        Type::S32 => Val::S32(0),
        Type::U32 => Val::U32(0),
        Type::S64 => Val::S64(0),
        Type::U64 => Val::U64(0),
        Type::Float32 => Val::Float32(0.0),
        Type::Float64 => Val::Float64(0.0),
        Type::Char => Val::Char('\0'),
        Type::String => Val::String(String::new()),
        Type::List(_) => Val::List(Vec::new()),
        Type::Record(r) => Val::Record(
            r.fields()
                .map(|f| Some((f.name.to_string(), zero(&f.ty, handle)?)))
                .collect::<Option<_>>()?,
        ),
        Type::Tuple(t) => Val::Tuple(t.types().map(|t| zero(&t, handle)).collect::<Option<_>>()?),
        Type::Variant(v) => {
            let c = v.cases().next()?;
            let payload = match c.ty {
                None => None,
                Some(p) => Some(Box::new(zero(&p, handle)?)),
            };
            Val::Variant(c.name.to_string(), payload)
        }
        Type::Enum(e) => Val::Enum(e.names().next()?.to_string()),
        Type::Option(_) => Val::Option(None),
        Type::Result(r) => Val::Result(Ok(match r.ok() {
            None => None,
            Some(t) => Some(Box::new(zero(&t, handle)?)),
        })),
        Type::Flags(_) => Val::Flags(Vec::new()),
        Type::Map(_) => Val::Map(Vec::new()),
        Type::Own(_) | Type::Borrow(_) => return handle(t),
        Type::FixedLengthList(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return None;
        }
    })
}
