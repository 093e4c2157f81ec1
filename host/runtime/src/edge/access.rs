//! The access log: one line per request the routes answer, at INFO on the target
//! [`TARGET`], in the log's format (text, or one JSON object per line): the method, the
//! route's prefix (none when no route matched), the path without its query, the status, the
//! time to the answer's head in microseconds, the request and response body bytes where they
//! are known, and the trace id of a valid W3C `traceparent` header.
//!
//! When the target is not logged at INFO, nothing of this is gathered: the check is tracing's
//! cached interest in the callsite.

use axum::http::HeaderMap;
use std::time::Duration;

/// The access log's target: `RUST_LOG=lrpc::access=off` turns it off.
pub(super) const TARGET: &str = "lrpc::access";

/// Whether the access log's lines are written.
pub(super) fn on() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::INFO)
}

/// A trace id of a `traceparent` header (W3C Trace Context): 32 lowercase hex digits, not
/// all zero, kept by value so that the request's headers may go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TraceId([u8; 32]);

impl TraceId {
    /// The trace id of the request's one `traceparent` header; `None` when there is none,
    /// more than one, or it is malformed.
    pub(super) fn of(headers: &HeaderMap) -> Option<TraceId> {
        let mut values = headers.get_all("traceparent").iter();
        let value = values.next()?;
        if values.next().is_some() {
            return None;
        }
        TraceId::parse(value.as_bytes())
    }

    /// `version-traceid-parentid-flags`: 2, 32, 16 and 2 lowercase hex digits. Version `ff`
    /// is invalid, and an all-zero trace or parent id; version `00` has nothing after the
    /// flags, a later version may have more after a `-`.
    fn parse(v: &[u8]) -> Option<TraceId> {
        const LEN: usize = 55;
        let hex = |b: &[u8]| {
            b.iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
        };
        let zero = |b: &[u8]| b.iter().all(|c| *c == b'0');
        let head = v.get(..LEN)?;
        let (version, trace, parent, flags) =
            (&head[..2], &head[3..35], &head[36..52], &head[53..]);
        let dashes = head[2] == b'-' && head[35] == b'-' && head[52] == b'-';
        let fields = hex(version) && hex(trace) && hex(parent) && hex(flags);
        let tail = match v.get(LEN) {
            None => true,
            Some(&c) => version != b"00" && c == b'-',
        };
        if !dashes || !fields || !tail || version == b"ff" || zero(trace) || zero(parent) {
            return None;
        }
        let mut id = [0u8; 32];
        id.copy_from_slice(trace);
        Some(TraceId(id))
    }

    fn as_str(&self) -> &str {
        // Hex digits only (checked by `parse`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// What the access line tells of one request.
pub(super) struct Line<'a> {
    pub method: &'a str,
    pub route: Option<&'a str>,
    pub path: &'a str,
    pub status: u16,
    pub took: Duration,
    pub request_bytes: Option<u64>,
    pub response_bytes: Option<u64>,
    pub trace: Option<TraceId>,
}

/// Writes the line.
pub(super) fn log(l: &Line<'_>) {
    let duration_us = u64::try_from(l.took.as_micros()).unwrap_or(u64::MAX);
    tracing::info!(
        target: TARGET,
        method = l.method,
        route = l.route,
        path = l.path,
        status = l.status,
        duration_us,
        request_bytes = l.request_bytes,
        response_bytes = l.response_bytes,
        trace_id = l.trace.as_ref().map(TraceId::as_str),
        "request"
    );
}

#[cfg(test)]
mod tests {
    use super::TraceId;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_valid_traceparent_gives_its_trace_id() {
        let id = TraceId::parse(GOOD.as_bytes()).expect("valid");
        assert_eq!(id.as_str(), "4bf92f3577b34da6a3ce929d0e0e4736");
        // A later version may carry more after the flags.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
        assert!(TraceId::parse(later.as_bytes()).is_some());
    }

    #[test]
    fn malformed_traceparents_give_none() {
        let bad = [
            "",
            "00",
            &GOOD[..54],
            &format!("{GOOD}-x"),
            &format!("{GOOD}x"),
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ];
        for b in bad {
            assert_eq!(TraceId::parse(b.as_bytes()), None, "{b:?}");
        }
        // Bytes that are not UTF-8 are refused, not read.
        let mut raw = GOOD.as_bytes().to_vec();
        raw[10] = 0xff;
        assert_eq!(TraceId::parse(&raw), None);
    }
}
