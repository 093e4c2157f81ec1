//! The records a chain passes: a request as `lrpc:http/plugin#handle`'s arguments, and a
//! plugin's response, decoded strictly (no length is believed before its bytes are there).

use crate::http::{Answer, Incoming};

/// The arguments of `lrpc:http/plugin#handle` (see `lrpc_presentation::plan` for the
/// encoding): the head record, then the body. Both versions of the interface share it: a
/// header value is a length then its bytes, as a string (`lrpc:http/plugin`) or as a byte
/// list (`lrpc:http/plugin@0.2.0`); only a string must be UTF-8.
pub fn encode_request(
    method: &str,
    path: &str,
    headers: &[(String, Vec<u8>)],
    body: &[u8],
) -> Vec<u8> {
    encode_request_with(method, path, headers, body)
}

/// [`encode_request`] with header names of any string type and values of any byte type.
pub(super) fn encode_request_with<N: AsRef<str>, V: AsRef<[u8]>>(
    method: &str,
    path: &str,
    headers: &[(N, V)],
    body: &[u8],
) -> Vec<u8> {
    fn string(out: &mut Vec<u8>, s: &[u8]) {
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s);
    }
    let lines: usize = headers
        .iter()
        .map(|(n, v)| 8 + n.as_ref().len() + v.as_ref().len())
        .sum();
    let mut out = Vec::with_capacity(16 + method.len() + path.len() + lines + body.len());
    string(&mut out, method.as_bytes());
    string(&mut out, path.as_bytes());
    out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
    for (n, v) in headers {
        string(&mut out, n.as_ref().as_bytes());
        string(&mut out, v.as_ref());
    }
    string(&mut out, body);
    out
}

/// A reader of encoded records that believes no length before the bytes are there.
struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }
    fn len(&mut self) -> Option<usize> {
        usize::try_from(u32::from_le_bytes(self.take(4)?.try_into().ok()?)).ok()
    }
    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }
    fn string(&mut self) -> Option<String> {
        std::str::from_utf8(self.bytes()?).ok().map(str::to_owned)
    }
    /// A list of header lines (name a string, value bytes): a count the bytes left can not
    /// hold (two lengths each) is refused before anything is allocated.
    fn headers(&mut self) -> Option<Vec<(String, Vec<u8>)>> {
        let n = self.len()?;
        if n > self.0.len() / 8 {
            return None;
        }
        let mut headers = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.string()?;
            let value = self.bytes()?.to_vec();
            headers.push((name, value));
        }
        Some(headers)
    }
}

/// Decodes `handle`'s encoded arguments (the inverse of [`encode_request`]), header values as
/// `lrpc:http/plugin@0.2.0` reads them (any bytes); `None` when they are malformed.
pub fn decode_request(b: &[u8]) -> Option<Incoming> {
    let mut c = Cursor(b);
    let method = c.string()?;
    let path = c.string()?;
    let headers = c.headers()?;
    let body = c.bytes()?.to_vec();
    c.0.is_empty().then_some(Incoming {
        method,
        path,
        headers,
        body,
    })
}

/// Decodes an encoded `response` record, header values as bytes; `None` when it is
/// malformed.
pub fn decode_response(b: &[u8]) -> Option<Answer> {
    let mut c = Cursor(b);
    let status = u16::from_le_bytes(c.take(2)?.try_into().ok()?);
    if !(100..=999).contains(&status) {
        return None;
    }
    let headers = c.headers()?;
    let body = c.bytes()?.to_vec();
    c.0.is_empty().then_some(Answer {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_decode_strictly() {
        let headers = [
            ("a".to_string(), b"b".to_vec()),
            ("x-user".to_string(), b"caf\xe9".to_vec()),
        ];
        let b = encode_request("POST", "/x?y", &headers, b"body");
        let r = decode_request(&b).expect("valid");
        assert_eq!(
            r,
            Incoming {
                method: "POST".into(),
                path: "/x?y".into(),
                headers: headers.to_vec(),
                body: b"body".to_vec(),
            }
        );
        for cut in 0..b.len() {
            assert_eq!(decode_request(&b[..cut]), None);
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode_request(&long), None);
        // The method, path and names are strings; only values are bytes.
        let bad = encode_request("G\u{e9}T", "/", &[], b"");
        let mut bad_utf8 = bad.clone();
        bad_utf8[5] = 0xff;
        assert_eq!(decode_request(&bad_utf8), None);
        let named = encode_request("GET", "/", &[("n\u{e9}".to_string(), Vec::new())], b"");
        let mut bad_name = named.clone();
        bad_name[21] = 0xff;
        assert!(decode_request(&named).is_some());
        assert_eq!(decode_request(&bad_name), None);
    }

    #[test]
    fn responses_decode_strictly() {
        let mut b = 200u16.to_le_bytes().to_vec();
        b.extend_from_slice(&1u32.to_le_bytes());
        for s in [&b"a"[..], b"\xff"] {
            b.extend_from_slice(&1u32.to_le_bytes());
            b.extend_from_slice(s);
        }
        b.extend_from_slice(&2u32.to_le_bytes());
        b.extend_from_slice(b"hi");
        let a = decode_response(&b).expect("valid");
        assert_eq!(a.status, 200);
        assert_eq!(a.headers, [("a".to_string(), b"\xff".to_vec())]);
        assert_eq!(a.body, b"hi");
        for cut in 0..b.len() {
            assert_eq!(decode_response(&b[..cut]), None);
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(decode_response(&long), None);
    }
}
