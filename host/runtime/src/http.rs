//! The records of HTTP traffic every handler kind shares: a request as a plugin or handler
//! receives it, and the answer on its way back to the client.

/// A request as `handle`'s arguments carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// Method.
    pub method: String,
    /// Path (below the route's prefix) and query.
    pub path: String,
    /// Header lines: names, and values as bytes (a plugin of `lrpc:http/plugin@0.2.0` may
    /// pass on a value that is not UTF-8).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body.
    pub body: Vec<u8>,
}

/// An answer on its way back to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// Header lines: names, and values as bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Answer {
    pub(crate) fn text(status: u16, body: String) -> Answer {
        Answer {
            status,
            headers: vec![("content-type".into(), b"text/plain".to_vec())],
            body: body.into_bytes(),
        }
    }
}

/// What a route sends back: a whole answer (a plugin's, or an error), or the head a
/// `wasi:http` handler set, with a body that streams while the handler writes it.
pub enum Reply {
    /// A whole answer.
    Whole(Answer),
    /// A response whose body is still being written.
    Streamed(axum::http::Response<axum::body::Body>),
}

impl Reply {
    /// The status code.
    pub fn status(&self) -> u16 {
        match self {
            Reply::Whole(a) => a.status,
            Reply::Streamed(r) => r.status().as_u16(),
        }
    }
}

impl From<Answer> for Reply {
    fn from(a: Answer) -> Reply {
        Reply::Whole(a)
    }
}
