//! Presentation files: one side's annotations of an interface (Flick's programmer's
//! contract), written by hand in TOML, listing only deviations from the default.
//!
//! ```toml
//! interface = "lrpc:bench/bench"
//! side = "server"                 # or "client"
//! trust = "none"                  # none | leaky | leaky+unprotected (toward the peer)
//! channel-slots = 16              # client only: calls in flight on an asynchronous binding
//! types = "borrowed"              # strings and byte lists in the interface's types are `Cow`s
//!
//! [function.big-in]
//! in.data = "preserved"           # server: preserved or stable; client: trashable
//! astack-count = 8                # server only: the procedure descriptor list (LRPC 5.2)
//! astack-size = 4096
//! special = ["data"]              # marshaled by the programmer's own routine
//! ```
//!
//! A file is checked against the WIT when it is loaded: unknown functions or parameters,
//! annotations of the wrong side and malformed values are refused with the file, line and
//! reason. [`combine`] then computes a binding's combination signature from both sides
//! (Flick 4.5).

use crate::Error;
use crate::layout::is_bytes;
use crate::plan::{InterfacePlan, Ty};
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Spanned;

/// Which side of a binding a presentation describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The client.
    Client,
    /// The server.
    Server,
}

/// How far a side trusts its peer (Flick 4.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
pub enum Trust {
    /// No trust: data the peer could still change is copied before it is validated. On
    /// pairwise A-stacks it behaves as `leaky`: what a call leaves there only the pair's
    /// server can see, and it saw it during the call.
    #[default]
    #[serde(rename = "none")]
    None,
    /// Confidentiality toward the peer is not needed (no different from `none` on pairwise
    /// A-stacks; kept for presentations that say so).
    #[serde(rename = "leaky")]
    Leaky,
    /// Full trust: the peer may also corrupt this side (a client allows the direct-linked
    /// path, where a server trap unwinds the client too).
    #[serde(rename = "leaky+unprotected")]
    LeakyUnprotected,
}

/// An annotation of an `in` parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InMode {
    /// Client side: the server may scribble on this argument (no copy needed for it).
    Trashable,
    /// Server side: the server promises not to modify this argument (it may read in place).
    Preserved,
    /// Server side: the server always reads this argument from a private copy no one else
    /// can change, even when the call could lend it in place (it checks the bytes, then
    /// reads them again).
    Stable,
}

/// An annotation of the result's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutMode {
    /// The caller provides the buffer.
    CallerAllocates,
    /// The callee allocates the buffer.
    CalleeAllocates,
    /// Server side: the result is a view into the server's own storage, never freed.
    #[serde(rename = "dealloc(never)")]
    DeallocNever,
}

/// How the generated Rust types hold the strings and byte lists inside records, variants,
/// tuples, options, results and lists. It changes the API only, never the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Types {
    /// `String` and `Vec<u8>`: every value decoded is a copy the handler owns.
    #[default]
    Owned,
    /// `Cow<'a, str>` and `Cow<'a, [u8]>` (the types carry a lifetime): a server's handler
    /// receives them lent from its private copy of the request (no allocation per string),
    /// and may return them in its result; a client's results are decoded owned.
    Borrowed,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawFile {
    interface: Spanned<String>,
    side: Spanned<Side>,
    #[serde(default)]
    trust: Option<Spanned<Trust>>,
    #[serde(default)]
    channel_slots: Option<Spanned<u32>>,
    #[serde(default)]
    types: Option<Spanned<Types>>,
    #[serde(default)]
    function: BTreeMap<Spanned<String>, Spanned<RawFunction>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct RawFunction {
    #[serde(default, rename = "in")]
    ins: BTreeMap<Spanned<String>, Spanned<InMode>>,
    #[serde(default)]
    out: Option<Spanned<OutMode>>,
    #[serde(default)]
    astack_count: Option<Spanned<u32>>,
    #[serde(default)]
    astack_size: Option<Spanned<u32>>,
    #[serde(default)]
    special: Vec<Spanned<String>>,
}

/// One function's annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FunctionAnnotations {
    /// `in` annotations by parameter index.
    pub ins: BTreeMap<usize, InMode>,
    /// The result buffer's annotation.
    pub out: Option<OutMode>,
    /// A-stack count override (server side).
    pub astack_count: Option<u32>,
    /// A-stack size override (server side).
    pub astack_size: Option<u32>,
    /// Parameters marshaled by the programmer's own routine, by index.
    pub special: Vec<usize>,
}

/// A checked presentation of one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidePresentation {
    /// Where it came from (a file name), for messages.
    pub origin: String,
    /// The interface it annotates.
    pub interface: String,
    /// The side.
    pub side: Side,
    /// Trust toward the peer.
    pub trust: Trust,
    /// Annotations by procedure index.
    pub functions: BTreeMap<usize, FunctionAnnotations>,
    /// Client side: how many calls may be in flight on an asynchronous binding (a URPC
    /// channel's slots) the generated `AsyncClient::bind` asks for; `None`: the kernel's
    /// default.
    pub channel_slots: Option<u32>,
    /// How this side's generated types hold strings and byte lists.
    pub types: Types,
}

impl SidePresentation {
    /// The default presentation of a side: no annotations, no trust.
    pub fn default_for(interface: &str, side: Side) -> SidePresentation {
        SidePresentation {
            origin: "(default presentation)".into(),
            interface: interface.to_string(),
            side,
            trust: Trust::None,
            functions: BTreeMap::new(),
            channel_slots: None,
            types: Types::Owned,
        }
    }

    /// Parses and checks a presentation file (`origin` names it in messages) against the
    /// interface plans `plan_of` returns.
    pub fn parse(
        origin: &str,
        text: &str,
        plan_of: impl FnOnce(&str) -> Result<InterfacePlan, Error>,
    ) -> Result<SidePresentation, Error> {
        let at = |span: std::ops::Range<usize>, reason: String| Error::Presentation {
            file: origin.to_string(),
            line: line_of(text, span.start),
            reason,
        };
        let raw: RawFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| line_of(text, s.start));
            Error::Presentation {
                file: origin.to_string(),
                line,
                reason: e.message().trim().to_string(),
            }
        })?;
        let plan = plan_of(raw.interface.get_ref()).map_err(|e| {
            at(
                raw.interface.span(),
                format!("interface `{}`: {e}", raw.interface.get_ref()),
            )
        })?;
        let side = *raw.side.get_ref();
        let mut functions = BTreeMap::new();
        for (fname, f) in &raw.function {
            let Some(pi) = plan.procs.iter().position(|p| p.name == *fname.get_ref()) else {
                return Err(at(
                    fname.span(),
                    format!("`{}` has no function `{}`", plan.name, fname.get_ref()),
                ));
            };
            let proc = &plan.procs[pi];
            let f = f.get_ref();
            let param = |name: &Spanned<String>| -> Result<usize, Error> {
                proc.params
                    .iter()
                    .position(|(n, _)| n == name.get_ref())
                    .ok_or_else(|| {
                        at(
                            name.span(),
                            format!(
                                "function `{}` has no parameter `{}`",
                                proc.name,
                                name.get_ref()
                            ),
                        )
                    })
            };
            let mut ann = FunctionAnnotations::default();
            for (pname, mode) in &f.ins {
                let i = param(pname)?;
                let wrong = match (side, mode.get_ref()) {
                    (Side::Client, InMode::Preserved) => Some(
                        "`preserved` is the server's promise: a client presentation can not make it",
                    ),
                    (Side::Client, InMode::Stable) => Some(
                        "`stable` is the server's request: a client presentation can not make it",
                    ),
                    (Side::Server, InMode::Trashable) => Some(
                        "`trashable` is the client's permission: a server presentation can not give it",
                    ),
                    _ => None,
                };
                if let Some(w) = wrong {
                    return Err(at(mode.span(), w.to_string()));
                }
                ann.ins.insert(i, *mode.get_ref());
            }
            if let Some(out) = &f.out {
                match &proc.result {
                    None => {
                        return Err(at(
                            out.span(),
                            format!("function `{}` has no result to allocate", proc.name),
                        ));
                    }
                    Some(t) if !is_buffer(t) && *out.get_ref() != OutMode::CalleeAllocates => {
                        return Err(at(
                            out.span(),
                            format!(
                                "function `{}`: only `string` or `list<u8>` results have a buffer to allocate",
                                proc.name
                            ),
                        ));
                    }
                    _ => {}
                }
                if side == Side::Client && *out.get_ref() == OutMode::DeallocNever {
                    return Err(at(
                        out.span(),
                        "`dealloc(never)` is a server's promise about its own storage".into(),
                    ));
                }
                ann.out = Some(*out.get_ref());
            }
            for (v, what) in [
                (&f.astack_count, "astack-count"),
                (&f.astack_size, "astack-size"),
            ] {
                if let Some(v) = v {
                    if side == Side::Client {
                        return Err(at(
                            v.span(),
                            format!("`{what}` belongs to the server's procedure descriptor list"),
                        ));
                    }
                    if *v.get_ref() == 0 || *v.get_ref() > 1 << 24 {
                        return Err(at(
                            v.span(),
                            format!("`{what}` must be between 1 and 16777216"),
                        ));
                    }
                }
            }
            ann.astack_count = f.astack_count.as_ref().map(|v| *v.get_ref());
            ann.astack_size = f.astack_size.as_ref().map(|v| *v.get_ref());
            for s in &f.special {
                ann.special.push(param(s)?);
            }
            functions.insert(pi, ann);
        }
        if let Some(n) = &raw.channel_slots {
            if side == Side::Server {
                return Err(at(
                    n.span(),
                    "`channel-slots` is the client's request for its asynchronous binding".into(),
                ));
            }
            if *n.get_ref() == 0 || *n.get_ref() > MAX_CHANNEL_SLOTS {
                return Err(at(
                    n.span(),
                    format!("`channel-slots` must be between 1 and {MAX_CHANNEL_SLOTS}"),
                ));
            }
        }
        Ok(SidePresentation {
            origin: origin.to_string(),
            interface: plan.name.clone(),
            side,
            trust: raw.trust.map_or(Trust::None, |t| *t.get_ref()),
            functions,
            channel_slots: raw.channel_slots.map(|n| *n.get_ref()),
            types: raw.types.map_or(Types::Owned, |t| *t.get_ref()),
        })
    }

    /// The annotations of procedure `proc`, or none.
    pub fn function(&self, proc: usize) -> FunctionAnnotations {
        self.functions.get(&proc).cloned().unwrap_or_default()
    }
}

/// Most slots a channel may have.
const MAX_CHANNEL_SLOTS: u32 = lrpc_abi::chan::MAX_SLOTS;

fn side_name(s: Side) -> &'static str {
    match s {
        Side::Client => "client",
        Side::Server => "server",
    }
}

fn is_buffer(t: &Ty) -> bool {
    *t == Ty::String || is_bytes(t)
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// How a binding carries calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// Through the kernel: validated, isolated (a server fault fails the call only).
    Isolated,
    /// The client fully trusts the server: the direct-linked path is permitted.
    Direct,
}

/// The decisions for one procedure of a binding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcCombination {
    /// Per `in` parameter: may the server read it in place (borrow) on every call, instead
    /// of copying it? True when the client said `trashable` or the server said `preserved`,
    /// and the server did not ask for `stable`.
    pub borrow: Vec<bool>,
    /// Per `in` parameter: may the server read it in place when the call lends its
    /// arguments (the client can not run until the call returns)? True for what `borrow`
    /// allows and for byte lists the server did not ask to keep `stable`.
    pub lend: Vec<bool>,
    /// The result buffer: what each side asked for.
    pub out: (Option<OutMode>, Option<OutMode>),
    /// Whether the result is copied between two buffers both sides insist on (Flick Fig. 11).
    pub out_copy: bool,
}

impl ProcCombination {
    /// The borrow decisions as the bit mask the kernel passes to the server's entry stub.
    pub fn borrow_mask(&self) -> u32 {
        mask(&self.borrow)
    }

    /// The lend decisions as that bit mask, for calls that lend their arguments.
    pub fn lend_mask(&self) -> u32 {
        mask(&self.lend)
    }
}

/// Bit `k` set for each `k < 32` whose flag is true.
fn mask(flags: &[bool]) -> u32 {
    flags
        .iter()
        .take(32)
        .enumerate()
        .fold(0, |m, (i, &b)| if b { m | 1 << i } else { m })
}

/// A binding's combination signature (Flick 4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combination {
    /// Per procedure.
    pub procs: Vec<ProcCombination>,
    /// The client's trust toward the server.
    pub client_trust: Trust,
    /// The server's trust toward the client.
    pub server_trust: Trust,
    /// The transport the trust settings permit.
    pub transport: Transport,
}

/// Computes the combination signature of a binding from both sides' presentations.
pub fn combine(
    plan: &InterfacePlan,
    client: &SidePresentation,
    server: &SidePresentation,
) -> Result<Combination, Error> {
    for (p, want) in [(client, Side::Client), (server, Side::Server)] {
        if p.side != want || p.interface != plan.name {
            return Err(Error::Presentation {
                file: p.origin.clone(),
                line: 0,
                reason: format!(
                    "expected a {} presentation of `{}`, found a {} presentation of `{}`",
                    side_name(want),
                    plan.name,
                    side_name(p.side),
                    p.interface
                ),
            });
        }
    }
    let procs = plan
        .procs
        .iter()
        .enumerate()
        .map(|(i, proc)| {
            let c = client.function(i);
            let s = server.function(i);
            let stable = |k: usize| s.ins.get(&k) == Some(&InMode::Stable);
            let borrow: Vec<bool> = (0..proc.params.len())
                .map(|k| {
                    !stable(k)
                        && (c.ins.get(&k) == Some(&InMode::Trashable)
                            || s.ins.get(&k) == Some(&InMode::Preserved))
                })
                .collect();
            // Byte lists are not validated before use (their length is read once), so a call
            // the client can not disturb lends them; strings, the rest and what the server
            // decodes with its own routine (`special`) are copied.
            let lend = proc
                .params
                .iter()
                .enumerate()
                .map(|(k, (_, t))| {
                    borrow[k] || (is_bytes(t) && !stable(k) && !s.special.contains(&k))
                })
                .collect();
            // The server insists on its own buffer when it allocates the result itself; the
            // client insists when it allocates or receives a buffer of its own (every client
            // presentation does so far).
            let server_insists = matches!(s.out, None | Some(OutMode::CalleeAllocates));
            let client_insists = matches!(
                c.out,
                None | Some(OutMode::CalleeAllocates) | Some(OutMode::CallerAllocates)
            );
            ProcCombination {
                borrow,
                lend,
                out: (c.out, s.out),
                out_copy: proc.result.is_some() && client_insists && server_insists,
            }
        })
        .collect();
    Ok(Combination {
        procs,
        client_trust: client.trust,
        server_trust: server.trust,
        transport: if client.trust == Trust::LeakyUnprotected {
            Transport::Direct
        } else {
            Transport::Isolated
        },
    })
}
