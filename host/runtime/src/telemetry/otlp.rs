//! The OTLP trace request (`ExportTraceServiceRequest` of
//! `opentelemetry/proto/collector/trace/v1`), encoded by hand in protobuf's wire format.
//!
//! A span's attributes are encoded once, when they are recorded ([`attribute`]), as the
//! bytes of the `attributes` fields of its `Span` message; the span is encoded when it
//! closes ([`span`]), as a `spans` field of a `ScopeSpans`, and the export copies these
//! into its requests ([`request`]). A message's length is counted before it is written,
//! so that its bytes are written once, where they stay (none is moved to put a length in
//! front of it).

use super::spans::Record;

/// Protobuf's wire types used here.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const FIXED32: u8 = 5;

/// `Span.attributes`, a repeated `KeyValue`.
const SPAN_ATTRIBUTES: u32 = 9;

/// Appends `v` as a varint.
fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Appends the key of field `field` with wire type `wire`.
fn key(buf: &mut Vec<u8>, field: u32, wire: u8) {
    varint(buf, u64::from(field) << 3 | u64::from(wire));
}

/// Appends field `field` holding `bytes` (a string, bytes, or an encoded message).
fn bytes_field(buf: &mut Vec<u8>, field: u32, bytes: &[u8]) {
    key(buf, field, LEN);
    varint(buf, bytes.len() as u64);
    buf.extend_from_slice(bytes);
}

/// The length of `v` as a varint.
fn varint_len(v: u64) -> usize {
    // 7 bits a byte, at least one byte.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// An attribute's value (`AnyValue`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Value<'v> {
    Str(&'v str),
    Bool(bool),
    I64(i64),
    F64(f64),
}

/// Appends `key = value` to `buf`, as one more `attributes` field of a `Span`.
pub(crate) fn attribute(buf: &mut Vec<u8>, key_name: &str, value: Value<'_>) {
    keyvalue(buf, SPAN_ATTRIBUTES, key_name, value);
}

/// Appends a `KeyValue` as field `field`, its lengths counted first (this runs for every
/// field of every span, on the thread that records it).
fn keyvalue(buf: &mut Vec<u8>, field: u32, key_name: &str, value: Value<'_>) {
    // AnyValue's one field: its key (one byte for fields 1 to 4) and value.
    let any = 1 + match value {
        Value::Str(s) => varint_len(s.len() as u64) + s.len(),
        Value::Bool(_) => 1,
        // int64 is the two's complement as a varint (10 bytes when negative).
        Value::I64(i) => varint_len(i as u64),
        Value::F64(_) => 8,
    };
    let kv =
        1 + varint_len(key_name.len() as u64) + key_name.len() + 1 + varint_len(any as u64) + any;
    buf.reserve(kv + 2 + varint_len(kv as u64));
    key(buf, field, LEN);
    varint(buf, kv as u64);
    bytes_field(buf, 1, key_name.as_bytes());
    key(buf, 2, LEN);
    varint(buf, any as u64);
    match value {
        Value::Str(s) => bytes_field(buf, 1, s.as_bytes()),
        Value::Bool(b) => {
            key(buf, 2, VARINT);
            varint(buf, u64::from(b));
        }
        Value::I64(i) => {
            key(buf, 3, VARINT);
            varint(buf, i as u64);
        }
        Value::F64(f) => {
            key(buf, 4, FIXED64);
            buf.extend_from_slice(&f.to_le_bytes());
        }
    }
}

/// `SpanFlags`: bit 8 says whether the parent is known to be remote, bit 9 that it is.
const HAS_IS_REMOTE: u32 = 0x100;
const IS_REMOTE: u32 = 0x200;

/// `ScopeSpans.spans`, a repeated `Span`.
const SCOPE_SPANS: u32 = 2;

/// Appends `r` as a `Span` message, a `spans` field of a `ScopeSpans`: its length counted
/// first, then the fields written after it (nothing moved).
pub(crate) fn span(buf: &mut Vec<u8>, r: &Record) {
    let field = |len: usize| 1 + varint_len(len as u64) + len;
    let kind = u64::from(r.kind as u8);
    let len = field(16)
        + field(8)
        + r.state.as_ref().map_or(0, |s| field(s.len()))
        + if r.parent != 0 { field(8) } else { 0 }
        + field(r.name.len())
        + 1
        + varint_len(kind)
        + 2 * (1 + 8)
        + r.attributes.len()
        // Field 16 takes a two-byte key.
        + 2
        + 4;
    buf.reserve(1 + varint_len(len as u64) + len);
    key(buf, SCOPE_SPANS, LEN);
    varint(buf, len as u64);
    let at = buf.len();
    bytes_field(buf, 1, &r.trace.to_be_bytes());
    bytes_field(buf, 2, &r.id.to_be_bytes());
    if let Some(state) = &r.state {
        bytes_field(buf, 3, state.as_bytes());
    }
    if r.parent != 0 {
        bytes_field(buf, 4, &r.parent.to_be_bytes());
    }
    bytes_field(buf, 5, r.name.as_bytes());
    key(buf, 6, VARINT);
    varint(buf, kind);
    key(buf, 7, FIXED64);
    buf.extend_from_slice(&r.start.to_le_bytes());
    key(buf, 8, FIXED64);
    buf.extend_from_slice(&r.end.to_le_bytes());
    buf.extend_from_slice(&r.attributes);
    let remote = if r.remote_parent { IS_REMOTE } else { 0 };
    key(buf, 16, FIXED32);
    buf.extend_from_slice(&(u32::from(r.sampled) | HAS_IS_REMOTE | remote).to_le_bytes());
    debug_assert_eq!(buf.len() - at, len, "the span's length as counted");
}

/// The spans [`span`] appended to `bytes`, one slice each (stopping at anything else).
pub(crate) fn spans(mut bytes: &[u8]) -> impl Iterator<Item = &[u8]> + Clone {
    std::iter::from_fn(move || {
        let key = u64::from(SCOPE_SPANS) << 3 | u64::from(LEN);
        if u64::from(*bytes.first()?) != key {
            return None;
        }
        let mut len = 0u64;
        let mut at = 1;
        for shift in (0..64).step_by(7) {
            let b = *bytes.get(at)?;
            at += 1;
            len |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
        }
        let end = at.checked_add(usize::try_from(len).ok()?)?;
        let one = bytes.get(..end)?;
        bytes = &bytes[end..];
        Some(one)
    })
}

/// The `Resource` message of the process's spans, encoded once: `attributes`
/// (`service.name` and the others) as `KeyValue`s.
pub(crate) fn resource(attributes: &[(String, String)]) -> Vec<u8> {
    let mut buf = Vec::new();
    for (k, v) in attributes {
        keyvalue(&mut buf, 1, k, Value::Str(v));
    }
    buf
}

/// The instrumentation scope the spans are reported under.
const SCOPE: &str = "lrpc";

/// The `ExportTraceServiceRequest` of `spans` (each as [`span`] encoded it), from the
/// process `resource` (encoded by [`resource`]), in `out` (cleared first).
pub(crate) fn request<'s>(
    out: &mut Vec<u8>,
    resource: &[u8],
    spans: impl IntoIterator<Item = &'s [u8]> + Clone,
) {
    out.clear();
    // The lengths first, so that the spans are copied once, where they stay.
    let field = |len: usize| 1 + varint_len(len as u64) + len;
    let spans_len: usize = spans.clone().into_iter().map(<[u8]>::len).sum();
    let scope = field(SCOPE.len());
    let scope_spans = field(scope) + spans_len;
    let resource_spans = field(resource.len()) + field(scope_spans);
    out.reserve(field(resource_spans));
    // ExportTraceServiceRequest.resource_spans (1): ResourceSpans.
    key(out, 1, LEN);
    varint(out, resource_spans as u64);
    bytes_field(out, 1, resource);
    // ResourceSpans.scope_spans (2): ScopeSpans.
    key(out, 2, LEN);
    varint(out, scope_spans as u64);
    // ScopeSpans.scope (1): InstrumentationScope.name (1).
    key(out, 1, LEN);
    varint(out, scope as u64);
    bytes_field(out, 1, SCOPE.as_bytes());
    for s in spans {
        out.extend_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::super::spans::Kind;
    use super::*;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;

    /// Decoded attributes as (key, value) pairs.
    fn pairs(
        kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    ) -> Vec<(String, Option<Any>)> {
        kvs.iter()
            .map(|kv| (kv.key.clone(), kv.value.clone().and_then(|v| v.value)))
            .collect()
    }

    fn record(id: u64, parent: u64) -> Record {
        let mut r = Record::for_test("call", 0x4bf92f3577b34da6a3ce929d0e0e4736, id, parent);
        r.start = 1_700_000_000_000_000_000;
        r.end = r.start + 1234;
        r
    }

    #[test]
    fn the_request_decodes_as_opentelemetry_s_own() {
        let mut a = record(0x00f0_67aa_0ba9_02b7, 0);
        a.kind = Kind::Server;
        a.remote_parent = false;
        attribute(&mut a.attributes, "route", Value::Str("/api"));
        attribute(&mut a.attributes, "status", Value::I64(200));
        attribute(&mut a.attributes, "negative", Value::I64(-3));
        attribute(&mut a.attributes, "ok", Value::Bool(true));
        attribute(&mut a.attributes, "share", Value::F64(0.5));
        let mut b = record(7, a.id);
        b.state = Some("congo=t61rcWkgMzE".into());
        b.remote_parent = true;
        b.sampled = true;
        let long = "x".repeat(300);
        attribute(&mut b.attributes, "long", Value::Str(&long));
        let resource = resource(&[
            ("service.name".into(), "edge".into()),
            ("deployment.environment".into(), "test".into()),
        ]);
        let mut encoded = Vec::new();
        span(&mut encoded, &a);
        span(&mut encoded, &b);
        let one: Vec<&[u8]> = spans(&encoded).collect();
        assert_eq!(one.len(), 2);
        assert_eq!(one.concat(), encoded);
        let mut out = Vec::new();
        request(&mut out, &resource, one);
        let got = ExportTraceServiceRequest::decode(out.as_slice()).expect("decodes");

        assert_eq!(got.resource_spans.len(), 1);
        let rs = &got.resource_spans[0];
        let res = pairs(&rs.resource.as_ref().unwrap().attributes);
        assert_eq!(
            res,
            [
                ("service.name".into(), Some(Any::StringValue("edge".into()))),
                (
                    "deployment.environment".into(),
                    Some(Any::StringValue("test".into()))
                ),
            ]
        );
        let ss = &rs.scope_spans[0];
        assert_eq!(ss.scope.as_ref().unwrap().name, "lrpc");
        let [sa, sb] = &ss.spans[..] else {
            panic!("two spans: {:?}", ss.spans)
        };
        assert_eq!(
            sa.trace_id,
            0x4bf92f3577b34da6a3ce929d0e0e4736u128.to_be_bytes()
        );
        assert_eq!(sa.span_id, 0x00f0_67aa_0ba9_02b7u64.to_be_bytes());
        assert!(sa.parent_span_id.is_empty());
        assert_eq!(sa.name, "call");
        assert_eq!(sa.kind, 2);
        assert_eq!(sa.start_time_unix_nano, 1_700_000_000_000_000_000);
        assert_eq!(sa.end_time_unix_nano, 1_700_000_000_000_001_234);
        assert_eq!(sa.trace_state, "");
        assert_eq!(sa.flags, 0x101, "sampled, the parent known not remote");
        let attrs = pairs(&sa.attributes);
        assert_eq!(
            attrs,
            [
                ("route".into(), Some(Any::StringValue("/api".into()))),
                ("status".into(), Some(Any::IntValue(200))),
                ("negative".into(), Some(Any::IntValue(-3))),
                ("ok".into(), Some(Any::BoolValue(true))),
                ("share".into(), Some(Any::DoubleValue(0.5))),
            ]
        );
        assert_eq!(sb.parent_span_id, sa.span_id);
        assert_eq!(sb.trace_state, "congo=t61rcWkgMzE");
        assert_eq!(sb.flags, 0x301);
        assert_eq!(sb.kind, 1, "internal");
        assert_eq!(
            sb.attributes[0].value.clone().and_then(|v| v.value),
            Some(Any::StringValue(long))
        );
    }

    #[test]
    fn varints_take_seven_bits_a_byte() {
        let mut b = Vec::new();
        varint(&mut b, 300);
        assert_eq!(b, [0xac, 0x02]);
        for v in [0, 1, 127, 128, 300, 1 << 35, u64::MAX] {
            b.clear();
            varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
    }
}
