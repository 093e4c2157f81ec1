//! A call's trace context across the network (W3C Trace Context): the caller's span goes
//! with the call, so that the span of the kernel serving it is that span's child.
//!
//! This crate makes the spans (`tracing`) and carries the context; what a context means is
//! the embedder's business. An embedder that exports traces installs a [`Propagation`] once
//! ([`set_propagation`]): it says which context the current span has, and makes a served
//! call's span the child of the context that came with it. Without one nothing is carried,
//! and a call pays one load of a pointer.
//!
//! On the wire:
//! - **Sessions** (`session.rs`): a client opens a session with `open-2`; a server of this
//!   version answers it with version 2 and takes requests that carry a context (tag
//!   [`TRACED_REQUEST`](crate::session::TRACED_REQUEST)). An older server closes the
//!   connection at `open-2`; the client then opens version 1 sessions with it, which carry no
//!   context, and asks again after a while.
//! - **NATS**: the invocation's message carries `traceparent` and `tracestate` headers,
//!   which older servers ignore.
//! - **Plain wRPC** (a foreign peer): its framing has no place for them; nothing is sent.

use std::sync::OnceLock;

/// Longest `traceparent` or `tracestate` value accepted or sent (the W3C limits are 55 and
/// 512 characters).
pub const MAX_VALUE: usize = 512;

/// A call's trace context: the W3C `traceparent` and `tracestate` values.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TraceContext {
    /// `traceparent`, e.g. `00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01`.
    pub traceparent: String,
    /// `tracestate`: vendors' entries, carried as they are; empty when there are none.
    pub tracestate: String,
}

impl TraceContext {
    /// Whether both values fit the limit and are printable ASCII (what an HTTP header or a
    /// NATS header may hold).
    pub fn is_carriable(&self) -> bool {
        let ok = |v: &str| v.len() <= MAX_VALUE && v.bytes().all(|b| (0x20..0x7f).contains(&b));
        !self.traceparent.is_empty() && ok(&self.traceparent) && ok(&self.tracestate)
    }
}

/// What an embedder that exports traces tells this crate.
pub trait Propagation: Send + Sync + 'static {
    /// The context of the span current on this thread, to send with a call; `None` when
    /// there is none (or it is not sampled and need not travel).
    fn current(&self) -> Option<TraceContext>;

    /// Makes `span` (a served call's, not yet entered) the child of `incoming`, the context
    /// that came with the call.
    fn adopt(&self, span: &tracing::Span, incoming: &TraceContext);
}

static PROPAGATION: OnceLock<Box<dyn Propagation>> = OnceLock::new();

/// Installs the process's [`Propagation`]; a second one is refused (and returned).
pub fn set_propagation(p: Box<dyn Propagation>) -> Result<(), Box<dyn Propagation>> {
    PROPAGATION.set(p)
}

/// The context to send with a call made now, on this thread.
pub(crate) fn outgoing() -> Option<TraceContext> {
    PROPAGATION
        .get()?
        .current()
        .filter(TraceContext::is_carriable)
}

/// Whether a propagation is installed (a served call then gets a span).
pub(crate) fn installed() -> bool {
    PROPAGATION.get().is_some()
}

/// The span of a call served here: `export`'s procedure `function`, reached over
/// `transport`, the child of `incoming` when the call carried a context.
pub(crate) fn serving(
    transport: &'static str,
    export: &str,
    function: &str,
    incoming: Option<&TraceContext>,
) -> tracing::Span {
    let Some(p) = PROPAGATION.get() else {
        return tracing::Span::none();
    };
    let span = tracing::debug_span!(
        "remote serve",
        otel.kind = "server",
        transport,
        export,
        function,
        status = tracing::field::Empty,
    );
    if let Some(cx) = incoming.filter(|c| c.is_carriable()) {
        p.adopt(&span, cx);
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_short_printable_values_travel() {
        let mut c = TraceContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: "congo=t61rcWkgMzE".into(),
        };
        assert!(c.is_carriable());
        c.tracestate = "x\n".into();
        assert!(!c.is_carriable());
        c.tracestate = "a".repeat(MAX_VALUE + 1);
        assert!(!c.is_carriable());
        c.tracestate.clear();
        c.traceparent.clear();
        assert!(!c.is_carriable());
    }
}
