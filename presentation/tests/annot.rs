//! Presentation files: parsing, checking against the WIT, and combination signatures.

use lrpc_presentation::{
    Error, InMode, OutMode, Side, SidePresentation, Transport, Trust, Types, Wit, combine,
};
use std::path::Path;

fn wit() -> Wit {
    Wit::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit")).expect("project WIT")
}

fn parse(text: &str) -> Result<SidePresentation, Error> {
    let w = wit();
    SidePresentation::parse("p.toml", text, |name| w.interface(name))
}

/// The line an error points at, and its reason.
fn refused(text: &str) -> (usize, String) {
    match parse(text) {
        Err(Error::Presentation { file, line, reason }) => {
            assert_eq!(file, "p.toml");
            (line, reason)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_server_presentation_parses_with_every_annotation() {
    let p = parse(
        r#"
interface = "lrpc:bench/bench"
side = "server"
trust = "leaky"
types = "borrowed"

[function.big-in]
in.data = "preserved"
astack-count = 8
astack-size = 4096
special = ["data"]

[function.big-in-out]
out = "dealloc(never)"
"#,
    )
    .unwrap();
    assert_eq!(p.side, Side::Server);
    assert_eq!(p.trust, Trust::Leaky);
    assert_eq!(p.types, Types::Borrowed);
    let f = p.function(2);
    assert_eq!(f.ins.get(&0), Some(&InMode::Preserved));
    assert_eq!((f.astack_count, f.astack_size), (Some(8), Some(4096)));
    assert_eq!(f.special, [0]);
    assert_eq!(p.function(3).out, Some(OutMode::DeallocNever));
    assert_eq!(
        p.function(0),
        Default::default(),
        "unannotated functions keep the default"
    );
}

#[test]
fn mistakes_are_refused_with_file_line_and_reason() {
    let head = "interface = \"lrpc:bench/bench\"\nside = \"client\"\n";
    let cases: &[(&str, usize, &str)] = &[
        ("[function.nope]\n", 3, "no function `nope`"),
        ("types = \"shared\"\n", 3, "unknown variant `shared`"),
        (
            "[function.big-in]\nin.bytes = \"trashable\"\n",
            4,
            "no parameter `bytes`",
        ),
        (
            "[function.big-in]\nin.data = \"preserved\"\n",
            4,
            "server's promise",
        ),
        (
            "[function.big-in]\nastack-count = 3\n",
            4,
            "server's procedure descriptor list",
        ),
        (
            "[function.null]\nout = \"caller-allocates\"\n",
            4,
            "no result",
        ),
        (
            "[function.add]\nout = \"caller-allocates\"\n",
            4,
            "only `string` or `list<u8>`",
        ),
        (
            "[function.big-in-out]\nout = \"dealloc(never)\"\n",
            4,
            "server's promise",
        ),
        (
            "[function.big-in]\nin.data = \"scribble\"\n",
            4,
            "unknown variant",
        ),
        ("trust = \"some\"\n", 3, "unknown variant"),
        ("channel-slots = 0\n", 3, "between 1 and 256"),
        ("channel-slots = 257\n", 3, "between 1 and 256"),
        ("[function.big-in]\ncolour = 1\n", 4, "unknown field"),
        ("[function.big-in\n", 3, ""),
    ];
    for (body, line, reason) in cases {
        let (l, r) = refused(&format!("{head}{body}"));
        assert_eq!(l, *line, "line for {body:?}: {r}");
        assert!(r.contains(reason), "reason for {body:?}: {r}");
    }
    let (l, r) = refused("interface = \"lrpc:bench/none\"\nside = \"client\"\n");
    assert_eq!(l, 1);
    assert!(r.contains("lrpc:bench/none"), "{r}");
    let (_, r) = refused("side = \"client\"\n");
    assert!(r.contains("interface"), "{r}");
}

#[test]
fn copies_happen_only_when_neither_side_allows_a_borrow() {
    let w = wit();
    let plan = w.interface("lrpc:bench/bench").unwrap();
    // A presentation of `side` with `in.data = "{mode}"` on `big-in` when `on`.
    let side = |side: &str, mode: &str, on: bool| {
        let body = if on {
            format!("[function.big-in]\nin.data = \"{mode}\"\n")
        } else {
            String::new()
        };
        parse(&format!(
            "interface = \"lrpc:bench/bench\"\nside = \"{side}\"\n{body}"
        ))
        .unwrap()
    };
    let client = |trashable: bool| side("client", "trashable", trashable);
    let server = |preserved: bool| side("server", "preserved", preserved);
    for t in [false, true] {
        for p in [false, true] {
            let c = combine(&plan, &client(t), &server(p)).unwrap();
            assert_eq!(c.procs[2].borrow, [t || p], "trashable {t}, preserved {p}");
            assert_eq!(c.procs[2].borrow_mask(), u32::from(t || p));
            assert_eq!(c.procs[3].borrow, [false], "other functions are unaffected");
            // A call that lends its arguments lends byte lists whatever the sides said.
            assert_eq!(c.procs[2].lend, [true]);
            assert_eq!(c.procs[3].lend_mask(), 1);
            assert_eq!(
                (c.procs[0].lend_mask(), c.procs[1].lend.clone()),
                (0, vec![false, false])
            );
        }
    }
    // `stable` keeps a private copy always: not lent, and not borrowed even if the client
    // allows it.
    let stable = side("server", "stable", true);
    for t in [false, true] {
        let c = combine(&plan, &client(t), &stable).unwrap();
        assert_eq!((c.procs[2].borrow_mask(), c.procs[2].lend_mask()), (0, 0));
        assert_eq!(c.procs[3].lend, [true], "other functions are unaffected");
    }
    let (l, r) = refused(
        "interface = \"lrpc:bench/bench\"\nside = \"client\"\n[function.big-in]\nin.data = \"stable\"\n",
    );
    assert_eq!(l, 4);
    assert!(r.contains("server's request"), "{r}");
}

#[test]
fn only_byte_lists_are_lent_never_strings_or_what_the_server_decodes_itself() {
    let w = wit();
    let http = w.interface("lrpc:http/plugin").unwrap();
    let default = |side: &str| {
        parse(&format!(
            "interface = \"lrpc:http/plugin\"\nside = \"{side}\"\n"
        ))
        .unwrap()
    };
    let c = combine(&http, &default("client"), &default("server")).unwrap();
    let handle = &c.procs[0];
    assert_eq!(handle.borrow, [false, false]);
    assert_eq!(
        handle.lend,
        [false, true],
        "the head (strings) is copied, the body lent"
    );
    let bench = w.interface("lrpc:bench/bench").unwrap();
    let special = parse(
        "interface = \"lrpc:bench/bench\"\nside = \"server\"\n[function.big-in]\nspecial = [\"data\"]\n",
    )
    .unwrap();
    let client = parse("interface = \"lrpc:bench/bench\"\nside = \"client\"\n").unwrap();
    let c = combine(&bench, &client, &special).unwrap();
    assert_eq!(
        c.procs[2].lend,
        [false],
        "the server's own routine gets a copy"
    );
}

#[test]
fn the_result_is_copied_only_when_both_sides_insist_on_their_own_buffer() {
    let w = wit();
    let plan = w.interface("lrpc:bench/bench").unwrap();
    let side = |side: &str, out: Option<&str>| {
        let body = out.map_or(String::new(), |o| {
            format!("[function.big-in-out]\nout = \"{o}\"\n")
        });
        parse(&format!(
            "interface = \"lrpc:bench/bench\"\nside = \"{side}\"\n{body}"
        ))
        .unwrap()
    };
    let cases = [
        (None, None, true),
        (Some("caller-allocates"), None, true),
        (Some("caller-allocates"), Some("caller-allocates"), false),
        (None, Some("dealloc(never)"), false),
        (Some("callee-allocates"), Some("callee-allocates"), true),
    ];
    for (c, s, copy) in cases {
        let comb = combine(&plan, &side("client", c), &side("server", s)).unwrap();
        assert_eq!(comb.procs[3].out_copy, copy, "client {c:?}, server {s:?}");
    }
}

#[test]
fn trust_decides_only_the_transport() {
    let w = wit();
    let plan = w.interface("lrpc:bench/bench").unwrap();
    let side = |side: &str, trust: &str| {
        parse(&format!(
            "interface = \"lrpc:bench/bench\"\nside = \"{side}\"\ntrust = \"{trust}\"\n"
        ))
        .unwrap()
    };
    let levels = ["none", "leaky", "leaky+unprotected"];
    for ct in levels {
        for st in levels {
            let c = combine(&plan, &side("client", ct), &side("server", st)).unwrap();
            // Trust changes no copy: `none` and `leaky` combine alike on pairwise A-stacks.
            assert_eq!(
                c.procs,
                combine(&plan, &side("client", "leaky"), &side("server", st))
                    .unwrap()
                    .procs
            );
            let direct = ct == "leaky+unprotected";
            assert_eq!(c.transport == Transport::Direct, direct, "{ct}/{st}");
        }
    }
    // Sides must be the right way round.
    let err = combine(&plan, &side("server", "none"), &side("server", "none")).unwrap_err();
    assert!(
        err.to_string().contains("expected a client presentation"),
        "{err}"
    );
}

#[test]
fn a_client_asks_for_its_asynchronous_binding_s_slots() {
    let text = "interface = \"lrpc:bench/bench\"\nside = \"client\"\nchannel-slots = 8\n";
    let p = parse(text).unwrap();
    assert_eq!(p.channel_slots, Some(8));
    let w = wit();
    let plan = w.interface("lrpc:bench/bench").unwrap();
    let code = lrpc_presentation::generate_rust_with(&plan, Some(&p), None);
    assert!(
        code.contains("AsyncClient::bind_with(INTERFACE, 8)"),
        "the generated bind asks for 8 slots"
    );
    let (l, r) =
        refused("interface = \"lrpc:bench/bench\"\nside = \"server\"\nchannel-slots = 8\n");
    assert_eq!(l, 3);
    assert!(r.contains("client's request"), "{r}");
}
