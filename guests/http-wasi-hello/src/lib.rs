//! The edge benchmark's hello handler (`http-hello`, the plugin at the end of its chains) as a
//! `wasi:http/incoming-handler` component, so that `wasmtime serve` can run the same answer as
//! a peer: a greeting naming the user, the method and the path, as `text/plain`.

use wasip2::exports::http::incoming_handler::Guest;
use wasip2::http::types::{
    Fields, IncomingRequest, Method, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Hello;

impl Guest for Hello {
    fn handle(request: IncomingRequest, out: ResponseOutparam) {
        let user = request
            .headers()
            .get("x-user")
            .into_iter()
            .next()
            .map(|v| String::from_utf8_lossy(&v).into_owned())
            .unwrap_or_else(|| "anonymous".into());
        let method = match request.method() {
            Method::Get => "GET".to_string(),
            Method::Post => "POST".to_string(),
            Method::Put => "PUT".to_string(),
            Method::Delete => "DELETE".to_string(),
            Method::Head => "HEAD".to_string(),
            Method::Other(m) => m,
            other => format!("{other:?}").to_uppercase(),
        };
        let path = request.path_with_query().unwrap_or_default();
        let greeting = format!("hello {user} at {method} {path}\n");
        let headers = Fields::from_list(&[
            ("content-type".into(), b"text/plain".to_vec()),
            ("x-plugin".into(), b"hello".to_vec()),
        ])
        .expect("valid header names");
        let response = OutgoingResponse::new(headers);
        let body = response.body().expect("a new response's body");
        ResponseOutparam::set(out, Ok(response));
        let stream = body.write().expect("a new body's stream");
        if stream.blocking_write_and_flush(greeting.as_bytes()).is_ok() {
            drop(stream);
            let _ = OutgoingBody::finish(body, None);
        }
    }
}

wasip2::http::proxy::export!(Hello with_types_in wasip2);
