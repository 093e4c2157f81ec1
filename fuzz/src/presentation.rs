//! Presentation files: arbitrary text and structured files through
//! `SidePresentation::parse`, then `combine` and the Rust back end.

use arbitrary::{Arbitrary, Unstructured};
use lrpc_presentation::{
    Error, InterfacePlan, Side, SidePresentation, Wit, combine, generate_rust_with,
};
use std::fmt::Write as _;
use std::sync::OnceLock;

/// The project's interfaces, loaded once.
pub fn wit() -> &'static Wit {
    static WIT: OnceLock<Wit> = OnceLock::new();
    WIT.get_or_init(|| Wit::load_sources(&crate::project_wit()).expect("the project's WIT loads"))
}

/// Runs one fuzzer input: a first byte of 0 means the rest is the file's text (the seed
/// corpus holds the example files this way); anything else builds a file from parts with
/// [`GenFile`]. Accepted files go through `combine` (against the default presentation of
/// the other side) and the back end too.
pub fn run(data: &[u8]) {
    match data.split_first() {
        Some((0, text)) => check_text(&String::from_utf8_lossy(text)),
        Some((_, rest)) => {
            if let Ok(g) = GenFile::arbitrary_take_rest(Unstructured::new(rest)) {
                check_text(&g.render());
            }
        }
        None => {}
    }
}

/// Parses `text` and checks what comes back. Never panics unless the parser broke a promise.
pub fn check_text(text: &str) {
    let lines = text.split('\n').count();
    match SidePresentation::parse("fuzz.toml", text, |n| wit().interface(n)) {
        Err(Error::Presentation { line, .. }) => {
            assert!(line <= lines, "line {line} of a {lines}-line file")
        }
        Err(e) => panic!("a presentation error must be `Presentation`, got {e:?}"),
        Ok(p) => {
            let plan = wit()
                .interface(&p.interface)
                .expect("an accepted file names a known interface");
            check_accepted(&plan, &p);
        }
    }
}

fn check_accepted(plan: &InterfacePlan, p: &SidePresentation) {
    for (&i, f) in &p.functions {
        let proc = &plan.procs[i];
        for &k in f.ins.keys().chain(&f.special) {
            assert!(k < proc.params.len());
        }
        if p.side == Side::Client {
            assert!(f.astack_count.is_none() && f.astack_size.is_none());
        }
    }
    let other = SidePresentation::default_for(&plan.name, other_side(p.side));
    let (client, server) = match p.side {
        Side::Client => (p, &other),
        Side::Server => (&other, p),
    };
    let comb = combine(plan, client, server).expect("sides and interface match");
    for (proc, c) in plan.procs.iter().zip(&comb.procs) {
        assert_eq!(c.borrow.len(), proc.params.len());
    }
    // Mismatched sides are refused with a typed error.
    assert!(combine(plan, server, client).is_err());
    let code = generate_rust_with(plan, Some(client), Some(server));
    assert!(code.contains(&plan.name));
}

fn other_side(s: Side) -> Side {
    match s {
        Side::Client => Side::Server,
        Side::Server => Side::Client,
    }
}

/// A presentation file from parts: indices pick real interfaces, functions and parameters
/// (or, rarely, made-up ones).
#[derive(Debug, Arbitrary)]
pub struct GenFile {
    interface: u8,
    server: bool,
    trust: Option<u8>,
    functions: Vec<GenFunction>,
}

/// One `[function.x]` table.
#[derive(Debug, Arbitrary)]
pub struct GenFunction {
    function: u8,
    ins: Vec<(u8, u8)>,
    out: Option<u8>,
    astack_count: Option<u32>,
    astack_size: Option<u32>,
    special: Vec<u8>,
}

fn pick(names: &[String], i: u8) -> &str {
    let i = usize::from(i);
    if i < names.len() {
        &names[i]
    } else {
        ["nope", "", "a\"b", "é"][i % 4]
    }
}

impl GenFile {
    /// The TOML text.
    pub fn render(&self) -> String {
        let names = wit().interface_names();
        let iface = pick(&names, self.interface % (names.len() as u8 + 1)).to_string();
        let plan = wit().interface(&iface).ok();
        let mut o = String::new();
        let _ = writeln!(o, "interface = {iface:?}");
        let _ = writeln!(
            o,
            "side = \"{}\"",
            if self.server { "server" } else { "client" }
        );
        if let Some(t) = self.trust {
            let t = ["none", "leaky", "leaky+unprotected", "full"][usize::from(t % 4)];
            let _ = writeln!(o, "trust = \"{t}\"");
        }
        let procs: Vec<String> = plan
            .as_ref()
            .map(|p| p.procs.iter().map(|p| p.name.clone()).collect())
            .unwrap_or_default();
        for f in self.functions.iter().take(8) {
            let fname = pick(&procs, f.function % (procs.len() as u8 + 1));
            let params: Vec<String> = plan
                .as_ref()
                .and_then(|p| p.procs.iter().find(|p| p.name == fname))
                .map(|p| p.params.iter().map(|(n, _)| n.clone()).collect())
                .unwrap_or_default();
            let _ = writeln!(o, "\n[function.{fname:?}]");
            for (p, m) in f.ins.iter().take(4) {
                let p = pick(&params, p % (params.len() as u8 + 1));
                let m = ["trashable", "preserved", "borrowed"][usize::from(m % 3)];
                let _ = writeln!(o, "in.{p:?} = \"{m}\"");
            }
            if let Some(m) = f.out {
                let m = [
                    "caller-allocates",
                    "callee-allocates",
                    "dealloc(never)",
                    "dealloc",
                ][usize::from(m % 4)];
                let _ = writeln!(o, "out = \"{m}\"");
            }
            if let Some(n) = f.astack_count {
                let _ = writeln!(o, "astack-count = {}", i64::from(n) - 8);
            }
            if let Some(n) = f.astack_size {
                let _ = writeln!(o, "astack-size = {n}");
            }
            if !f.special.is_empty() {
                let list: Vec<String> = f
                    .special
                    .iter()
                    .take(4)
                    .map(|p| format!("{:?}", pick(&params, p % (params.len() as u8 + 1))))
                    .collect();
                let _ = writeln!(o, "special = [{}]", list.join(", "));
            }
        }
        o
    }
}
