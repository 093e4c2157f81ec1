//! How a request finds its route: the longest prefix that matches its path, the path below that prefix, and one authority for the whole chain.

use axum::http::HeaderValue;

pub(super) fn matches(prefix: &str, path: &str) -> bool {
    prefix == "/"
        || path
            .strip_prefix(prefix.trim_end_matches('/'))
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || rest.starts_with('?'))
}

/// `path` below the route's prefix, always starting with `/`.
pub(super) fn strip<'a>(prefix: &str, path: &'a str) -> std::borrow::Cow<'a, str> {
    let rest = path
        .strip_prefix(prefix.trim_end_matches('/'))
        .unwrap_or(path);
    if rest.starts_with('/') {
        rest.into()
    } else {
        format!("/{rest}").into()
    }
}

/// Gives the request one authority that every plugin and the handler see alike: its `host`
/// line. The target's own authority (HTTP/2's `:authority`, or an HTTP/1.1 absolute-form
/// target) takes the place of any `host` line, as RFC 9112 §3.2.2 asks; otherwise plugins
/// would check one authority while the handler used another. Two `host` lines are a bad
/// request (RFC 9112 §3.2). The error says why the request is refused.
pub(super) fn one_authority(parts: &mut axum::http::request::Parts) -> Result<(), &'static str> {
    use axum::http::header::HOST;
    if let Some(authority) = parts.uri.authority() {
        match HeaderValue::from_str(authority.as_str()) {
            Ok(v) => {
                parts.headers.insert(HOST, v);
            }
            Err(_) => return Err("a malformed authority\n"),
        }
    } else if parts.headers.get_all(HOST).iter().nth(1).is_some() {
        return Err("more than one host header\n");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{matches, strip};

    #[test]
    fn prefixes() {
        assert!(matches("/api", "/api"));
        assert!(matches("/api", "/api/x"));
        assert!(matches("/api/", "/api/x"));
        assert!(!matches("/api", "/apix"));
        assert!(matches("/", "/anything"));
        assert_eq!(strip("/api", "/api/x?y"), "/x?y");
        assert_eq!(strip("/api", "/api"), "/");
        assert_eq!(strip("/", "/x"), "/x");
    }
}
