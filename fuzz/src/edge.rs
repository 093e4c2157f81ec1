//! The edge server's requests to plugins and what plugins pass back (`lrpc_runtime::edge`):
//! `encode_request` writes an HTTP request as the arguments of `lrpc:http/plugin#handle`;
//! `decode_request` reads the request a plugin passes on, `decode_response` the answer it
//! gives. Plugins are untrusted, so the decoders see arbitrary bytes.
//!
//! An input's first byte picks the mode: 0, the rest are raw bytes for both decoders
//! ([`check_raw`]); anything else, the rest builds a request and a response from parts
//! ([`Parts`], [`check_parts`]). The oracle for both is the plan of
//! `lrpc:http/plugin@0.2.0` (`wit/http-bytes.wit`, header values as bytes): the host's
//! hand-written codec must lay out exactly the plan's encoding, which the plan's own reader
//! (`lrpc_remote::wire::to_wire`) checks. The plan of the string version
//! (`lrpc:http/plugin`, `wit/http.wit`) must accept exactly the requests whose header values
//! are all UTF-8: the two versions share the encoding, so the driver passes requests between
//! them unchanged.

use crate::alloc::counted;
use arbitrary::{Arbitrary, Unstructured};
use lrpc_presentation::{InterfacePlan, Ty, Wit};
use lrpc_remote::wire::{from_wire_whole, to_wire};
use lrpc_runtime::edge::{decode_request, decode_response, encode_request};
use lrpc_runtime::http::{Answer, Incoming};
use std::sync::OnceLock;

/// The longest input looked at.
pub const MAX_INPUT: usize = 64 << 10;

/// The plugin interface's plan, `handle`'s parameter types and the `response` record; and the
/// plan of the string version.
struct Plugin {
    plan: InterfacePlan,
    strings: InterfacePlan,
    handle: usize,
    response: Ty,
}

impl Plugin {
    fn get() -> &'static Plugin {
        static PLUGIN: OnceLock<Plugin> = OnceLock::new();
        PLUGIN.get_or_init(|| {
            let wit = Wit::load_sources(lrpc_kernel::domain::EMBEDDED_WIT)
                .expect("the embedded WIT loads");
            let plan = wit
                .interface(lrpc_runtime::config::PLUGIN_INTERFACE_BYTES)
                .expect("the plugin interface plans");
            let strings = wit
                .interface(lrpc_runtime::config::PLUGIN_INTERFACE)
                .expect("the string version plans");
            let handle = plan
                .procs
                .iter()
                .position(|p| p.name == "handle")
                .expect("plugins have `handle`");
            let response = plan
                .defs
                .iter()
                .position(|d| d.name == "response")
                .expect("plugins answer a `response`");
            Plugin {
                plan,
                strings,
                handle,
                response: Ty::Named(response),
            }
        })
    }

    fn handle_params(&self) -> Vec<&Ty> {
        self.handle_params_of(&self.plan)
    }

    fn handle_params_of<'a>(&self, plan: &'a InterfacePlan) -> Vec<&'a Ty> {
        plan.procs[self.handle]
            .params
            .iter()
            .map(|(_, t)| t)
            .collect()
    }
}

/// A request and a response from parts.
#[derive(Debug, Arbitrary)]
pub struct Parts {
    /// The request's method.
    pub method: String,
    /// Its path and query.
    pub path: String,
    /// Header lines of both (values as bytes, UTF-8 or not).
    pub headers: Vec<(String, Vec<u8>)>,
    /// Body of both.
    pub body: Vec<u8>,
    /// The response's status (any: the decoder refuses those outside 100..=999).
    pub status: u16,
    /// Where to cut the encoded request short.
    pub cut: u16,
    /// A byte to append to it.
    pub extra: u8,
}

/// Runs one input (see the module docs).
pub fn run(data: &[u8]) {
    if data.len() > MAX_INPUT {
        return;
    }
    match data.split_first() {
        Some((0, raw)) => check_raw(raw),
        Some((_, rest)) => {
            if let Ok(p) = Parts::arbitrary_take_rest(Unstructured::new(rest)) {
                check_parts(&p);
            }
        }
        None => {}
    }
}

/// A `response` record in the plan's encoding (what a plugin's stub writes): status, the
/// header lines, the body, with `u32` lengths and counts.
pub fn encode_response(status: u16, headers: &[(String, Vec<u8>)], body: &[u8]) -> Vec<u8> {
    fn bytes(out: &mut Vec<u8>, b: &[u8]) {
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(b);
    }
    let mut out = status.to_le_bytes().to_vec();
    out.extend_from_slice(&(headers.len() as u32).to_le_bytes());
    for (n, v) in headers {
        bytes(&mut out, n.as_bytes());
        bytes(&mut out, v);
    }
    bytes(&mut out, body);
    out
}

/// Checks a request and a response built from `p`: the decoders give back what was encoded,
/// refuse it cut short or with a byte more, and the request's encoding is `handle`'s
/// arguments as the plan lays them out; then both encodings go through [`check_raw`].
pub fn check_parts(p: &Parts) {
    let enc = encode_request(&p.method, &p.path, &p.headers, &p.body);
    let want = Incoming {
        method: p.method.clone(),
        path: p.path.clone(),
        headers: p.headers.clone(),
        body: p.body.clone(),
    };
    assert_eq!(decode_request(&enc).as_ref(), Some(&want));
    let pl = Plugin::get();
    let tys = pl.handle_params();
    let w = to_wire(&pl.plan, &tys, &enc)
        .unwrap_or_else(|e| panic!("encode_request wrote what `handle`'s plan refuses: {e}"));
    assert_eq!(
        from_wire_whole(&pl.plan, &tys, &w, usize::MAX).as_ref(),
        Ok(&enc)
    );
    let cut = usize::from(p.cut) % enc.len();
    assert_eq!(decode_request(&enc[..cut]), None, "cut at {cut}");
    let mut longer = enc.clone();
    longer.push(p.extra);
    assert_eq!(decode_request(&longer), None);

    let resp = encode_response(p.status, &p.headers, &p.body);
    let want = (100..=999).contains(&p.status).then(|| Answer {
        status: p.status,
        headers: p.headers.clone(),
        body: p.body.clone(),
    });
    assert_eq!(decode_response(&resp), want);
    check_raw(&enc);
    check_raw(&resp);
}

/// Checks the decoders on arbitrary bytes `b`: no panic; memory in proportion to `b` (never
/// to a count or length it announces); `decode_request` accepts exactly the encodings of
/// `handle`'s arguments in the plan, and `decode_response` exactly those of a `response`
/// with a status in 100..=999; what they accept encodes back into `b`.
pub fn check_raw(b: &[u8]) {
    let pl = Plugin::get();
    let bound = 32 * b.len() + 1024;
    let (req, asked) = counted(|| decode_request(b));
    assert!(
        asked <= bound,
        "decode_request: {asked} bytes for {}",
        b.len()
    );
    let plan_ok = to_wire(&pl.plan, &pl.handle_params(), b);
    assert_eq!(
        req.is_some(),
        plan_ok.is_ok(),
        "decode_request {req:?}, the plan {plan_ok:?}"
    );
    if let Some(r) = &req {
        assert_eq!(encode_request(&r.method, &r.path, &r.headers, &r.body), b);
    }
    // The string version reads the same bytes, and its values must be UTF-8.
    let strings_ok = to_wire(&pl.strings, &pl.handle_params_of(&pl.strings), b);
    let all_text = req.as_ref().is_some_and(|r| {
        r.headers
            .iter()
            .all(|(_, v)| std::str::from_utf8(v).is_ok())
    });
    assert_eq!(
        strings_ok.is_ok(),
        all_text,
        "decode_request {req:?}, the string version's plan {strings_ok:?}"
    );

    let (resp, asked) = counted(|| decode_response(b));
    assert!(
        asked <= bound,
        "decode_response: {asked} bytes for {}",
        b.len()
    );
    let status_ok = b
        .first_chunk::<2>()
        .is_some_and(|s| (100..=999).contains(&u16::from_le_bytes(*s)));
    let plan_ok = to_wire(&pl.plan, &[&pl.response], b);
    assert_eq!(
        resp.is_some(),
        status_ok && plan_ok.is_ok(),
        "decode_response {resp:?}, the plan {plan_ok:?}"
    );
    if let Some(a) = &resp {
        assert_eq!(encode_response(a.status, &a.headers, &a.body), b);
    }
}
