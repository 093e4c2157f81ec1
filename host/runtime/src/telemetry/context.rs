//! W3C Trace Context values, read and written by hand: `traceparent`
//! (`00-<trace id, 32 hex>-<parent id, 16 hex>-<flags, 2 hex>`) and `tracestate`, which is
//! carried as it came.
//!
//! Both come from the network: whatever does not parse is ignored (the span then starts a
//! trace of its own), never a panic.

use std::sync::Arc;

/// The caller's span as a `traceparent` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Remote {
    /// The trace, never 0.
    pub trace: u128,
    /// The caller's span, never 0.
    pub span: u64,
    /// Whether the caller sampled the trace (flag bit 0).
    pub sampled: bool,
}

/// The flag bit of a sampled trace.
const SAMPLED: u8 = 0x01;

/// Reads a `traceparent` value; `None` when it is malformed.
///
/// Version `00` is exactly 55 characters. A later version may append fields after a `-`;
/// its first four fields are read as version `00`'s (what the W3C asks of a parser that
/// meets a version it does not know). Version `ff` is invalid, as are an all-zero trace or
/// parent id and upper-case hex.
pub(crate) fn parse_traceparent(value: &[u8]) -> Option<Remote> {
    let v = value.trim_ascii();
    if v.len() < 55 || v[2] != b'-' || v[35] != b'-' || v[52] != b'-' {
        return None;
    }
    let version = hex(&v[0..2])?;
    let trace = hex(&v[3..35])?;
    let span = u64::try_from(hex(&v[36..52])?).ok()?;
    let flags = u8::try_from(hex(&v[53..55])?).ok()?;
    let fits = match version {
        0xff => false,
        0 => v.len() == 55,
        _ => v.len() == 55 || v[55] == b'-',
    };
    (fits && trace != 0 && span != 0).then_some(Remote {
        trace,
        span,
        sampled: flags & SAMPLED != 0,
    })
}

/// The value of lower-case hex `digits` (at most 32 of them); `None` for any other byte.
fn hex(digits: &[u8]) -> Option<u128> {
    if digits.is_empty() || digits.len() > 32 {
        return None;
    }
    digits.iter().try_fold(0u128, |acc, &d| {
        let n = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some(acc << 4 | u128::from(n))
    })
}

/// The `traceparent` of span `span` in trace `trace`.
pub(crate) fn traceparent(trace: u128, span: u64, sampled: bool) -> String {
    let flags = if sampled { SAMPLED } else { 0 };
    // Written digit by digit: `format!`'s machinery costs more than the rest of a request's
    // context.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 55];
    out[..3].copy_from_slice(b"00-");
    for (i, b) in trace
        .to_be_bytes()
        .into_iter()
        .chain(span.to_be_bytes())
        .enumerate()
    {
        // The span's id after the trace's and a dash.
        let at = 3 + 2 * i + usize::from(i >= 16);
        out[at] = HEX[usize::from(b >> 4)];
        out[at + 1] = HEX[usize::from(b & 0xf)];
    }
    out[35] = b'-';
    out[52] = b'-';
    out[53] = HEX[usize::from(flags >> 4)];
    out[54] = HEX[usize::from(flags & 0xf)];
    String::from_utf8_lossy(&out).into_owned()
}

/// Longest `tracestate` carried (the W3C limit of 32 entries fits in it).
const MAX_STATE: usize = 512;

/// A `tracestate` value worth carrying: trimmed, not empty, at most 512 bytes of printable
/// ASCII (what a header may hold). Its entries are not checked one by one: it is the
/// vendors' to read, and goes on as it came.
pub(crate) fn tracestate(value: &[u8]) -> Option<Arc<str>> {
    let v = value.trim_ascii();
    let printable = v.iter().all(|b| (0x20..0x7f).contains(b));
    if v.is_empty() || v.len() > MAX_STATE || !printable {
        return None;
    }
    std::str::from_utf8(v).ok().map(Arc::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_traceparent_reads_and_writes_back_the_same() {
        let r = parse_traceparent(GOOD.as_bytes()).expect("valid");
        assert_eq!(r.trace, 0x4bf92f3577b34da6a3ce929d0e0e4736);
        assert_eq!(r.span, 0x00f067aa0ba902b7);
        assert!(r.sampled);
        assert_eq!(traceparent(r.trace, r.span, r.sampled), GOOD);
        let unsampled = GOOD.replace("-01", "-00");
        let r = parse_traceparent(unsampled.as_bytes()).expect("valid");
        assert!(!r.sampled);
        assert_eq!(traceparent(r.trace, r.span, false), unsampled);
        // Other flag bits do not sample; space around the value is a header's.
        let r = parse_traceparent(GOOD.replace("-01", "-02").as_bytes()).expect("valid");
        assert!(!r.sampled);
        assert!(parse_traceparent(format!(" {GOOD}\t").as_bytes()).is_some());
        // A later version may carry more, after a dash.
        let later = GOOD.replacen("00", "01", 1);
        assert!(parse_traceparent(format!("{later}-what-next").as_bytes()).is_some());
        assert!(parse_traceparent(format!("{later}x").as_bytes()).is_none());
    }

    #[test]
    fn a_malformed_traceparent_is_ignored() {
        let bad = [
            String::new(),
            "00".into(),
            GOOD[..54].into(),
            format!("{GOOD}-"),
            GOOD.to_uppercase(),
            GOOD.replacen("00", "ff", 1),
            GOOD.replace("4bf92f3577b34da6a3ce929d0e0e4736", &"0".repeat(32)),
            GOOD.replace("00f067aa0ba902b7", &"0".repeat(16)),
            GOOD.replace('-', "_"),
            GOOD.replace("4bf9", "4bg9"),
            GOOD.replace("4bf9", "+bf9"),
            GOOD.replace("-01", "-1x"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\u{e9}".into(),
        ];
        for b in &bad {
            assert_eq!(parse_traceparent(b.as_bytes()), None, "{b:?}");
        }
        assert_eq!(parse_traceparent(&[0xff; 55]), None);
    }

    #[test]
    fn tracestate_goes_on_as_it_came_when_printable_and_short() {
        assert_eq!(
            tracestate(b"congo=t61rcWkgMzE, rojo=00f067aa0ba902b7").as_deref(),
            Some("congo=t61rcWkgMzE, rojo=00f067aa0ba902b7")
        );
        assert_eq!(tracestate(b"  "), None);
        assert_eq!(tracestate(b"a=b\n"), Some("a=b".into()));
        assert_eq!(tracestate(b"a=\x01"), None);
        assert_eq!(tracestate("a=\u{e9}".as_bytes()), None);
        assert_eq!(tracestate(&[b'a'; MAX_STATE + 1]), None);
    }
}
