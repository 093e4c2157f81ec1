//! The config reference (`docs/src/config.md`) documents every key the config accepts, and
//! nothing else, and its examples are configs the runtime accepts.
//!
//! The keys come from `src/config/` itself: every struct deriving `Deserialize`, its fields
//! named as serde names them (`rename_all`, `rename`, `alias`, `flatten`, `skip`). Which
//! TOML table a struct is follows from where it is used: a field of a struct type is a
//! table, inside a map a table per name (`[domains.NAME]`), inside a `Vec` an array of tables
//! (`[[routes]]`).
//!
//! The page's markup: a section heading ends with the table it documents in backticks
//! (`` ## `[domains.NAME.limits]` ``), and the heading "Top level" documents the keys outside
//! any table. In a section, the first column of every table holds keys, each in backticks.
//! Every ```toml block on the page is a whole config.

use lrpc_runtime::config::Config;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A field of a `Deserialize` struct, as serde reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Field {
    /// The names the key may have (its name, then its aliases).
    keys: Vec<String>,
    /// The field's type, as written.
    ty: String,
    /// `#[serde(flatten)]`: its struct's keys are the parent's.
    flatten: bool,
}

/// The `Deserialize` structs of a source file, by name, each with its fields in order.
type Structs = BTreeMap<String, Vec<Field>>;

/// The table a struct is, and the keys it accepts.
#[derive(Debug, Default)]
struct Tables {
    /// The table's header as a section heading writes it (`[kernel]`, `[[routes]]`), or ""
    /// for the top level, with its keys.
    keys: BTreeMap<String, BTreeSet<String>>,
}

fn root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    root.canonicalize().unwrap_or(root)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Splits `s` at the commas outside brackets, parentheses, braces, angle brackets and
/// string literals.
fn split_top(s: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut in_str = false;
    let mut cur = String::new();
    let mut prev = ' ';
    for c in s.chars() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
            }
        } else {
            match c {
                '"' => in_str = true,
                '(' | '[' | '{' | '<' => depth += 1,
                ')' | ']' | '}' | '>' => depth -= 1,
                ',' if depth == 0 => {
                    parts.push(std::mem::take(&mut cur));
                    prev = c;
                    continue;
                }
                _ => {}
            }
        }
        cur.push(c);
        prev = c;
    }
    if !cur.trim().is_empty() {
        parts.push(cur);
    }
    parts
        .into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// The text between the first `open` and its matching `close`, from the start of `s`.
fn balanced(s: &str, open: char, close: char) -> Option<(String, usize)> {
    let start = s.find(open)?;
    let mut depth = 0;
    let mut in_str = false;
    let mut prev = ' ';
    for (i, c) in s[start..].char_indices() {
        if in_str {
            if c == '"' && prev != '\\' {
                in_str = false;
            }
        } else if c == '"' {
            in_str = true;
        } else if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return Some((s[start + 1..start + i].to_string(), start + i + 1));
            }
        }
        prev = c;
    }
    None
}

/// The string literal in `s` (`= "x"`).
fn literal(s: &str) -> String {
    let (_, rest) = s
        .split_once('"')
        .unwrap_or_else(|| panic!("no string in `{s}`"));
    let (lit, _) = rest
        .split_once('"')
        .unwrap_or_else(|| panic!("no string in `{s}`"));
    lit.to_string()
}

/// The value serde deserializes with, from `rename = "x"` or
/// `rename(deserialize = "x", ...)` (same for `rename_all`).
fn deserialize_name(item: &str, attr: &str) -> Option<String> {
    let rest = item.strip_prefix(attr)?.trim_start();
    if !rest.starts_with(['=', '(']) {
        return None;
    }
    if rest.starts_with('=') {
        return Some(literal(rest));
    }
    let (inner, _) = balanced(rest, '(', ')')?;
    split_top(&inner)
        .iter()
        .find(|p| p.starts_with("deserialize"))
        .map(|p| literal(p))
}

/// The items of every `#[serde(...)]` attribute in `attrs`.
fn serde_items(attrs: &[String]) -> Vec<String> {
    attrs
        .iter()
        .filter_map(|a| a.strip_prefix("#[serde"))
        .filter_map(|a| balanced(a, '(', ')'))
        .flat_map(|(inner, _)| split_top(&inner))
        .collect()
}

/// A snake_case field name as serde's `rename_all` rule writes it.
fn rename_all(name: &str, rule: &str) -> String {
    let words: Vec<&str> = name.split('_').filter(|w| !w.is_empty()).collect();
    let cap = |w: &str| {
        let mut c = w.chars();
        c.next()
            .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
            .unwrap_or_default()
    };
    match rule {
        "lowercase" | "snake_case" => name.to_lowercase(),
        "UPPERCASE" | "SCREAMING_SNAKE_CASE" => name.to_uppercase(),
        "kebab-case" => name.replace('_', "-"),
        "SCREAMING-KEBAB-CASE" => name.replace('_', "-").to_uppercase(),
        "PascalCase" => words.iter().map(|w| cap(w)).collect(),
        "camelCase" => words
            .iter()
            .enumerate()
            .map(|(i, w)| if i == 0 { w.to_string() } else { cap(w) })
            .collect(),
        other => panic!("rename_all = \"{other}\": teach this test the rule"),
    }
}

/// One field's text (attributes, then `pub? name: Type`) as serde reads it; `None` when
/// serde skips it.
fn field(text: &str, rule: Option<&str>) -> Option<Field> {
    let mut rest = text.trim();
    let mut attrs = Vec::new();
    while rest.starts_with("#[") {
        let (inner, end) = balanced(rest, '[', ']').expect("a closed attribute");
        attrs.push(format!("#[{inner}]"));
        rest = rest[end..].trim_start();
    }
    let rest = rest
        .strip_prefix("pub(crate)")
        .or_else(|| rest.strip_prefix("pub(super)"))
        .or_else(|| rest.strip_prefix("pub"))
        .unwrap_or(rest)
        .trim_start();
    let (name, ty) = rest
        .split_once(':')
        .unwrap_or_else(|| panic!("not a field: `{text}`"));
    let name = name.trim().trim_start_matches("r#");
    let items = serde_items(&attrs);
    if items
        .iter()
        .any(|i| i == "skip" || i == "skip_deserializing")
    {
        return None;
    }
    let key = items
        .iter()
        .find_map(|i| deserialize_name(i, "rename"))
        .unwrap_or_else(|| rule.map_or(name.to_string(), |r| rename_all(name, r)));
    let mut keys = vec![key];
    keys.extend(
        items
            .iter()
            .filter(|i| i.starts_with("alias"))
            .map(|i| literal(i)),
    );
    Some(Field {
        keys,
        ty: ty.split_whitespace().collect::<Vec<_>>().join(" "),
        flatten: items.iter().any(|i| i == "flatten"),
    })
}

/// `line` without its `//` comment (one outside a string literal).
fn without_comment(line: &str) -> &str {
    let bytes = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            // A char literal of a quote, `'"'`, opens no string.
            b'\'' if bytes.get(i + 1) == Some(&b'"') && bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'/' if !in_str && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// Every struct of `source` that derives `Deserialize`, with the fields serde reads.
fn deserialize_structs(source: &str) -> Structs {
    // Line comments out; string literals stay (serde attributes hold names in them).
    let code: String = source
        .lines()
        .map(without_comment)
        .collect::<Vec<_>>()
        .join("\n");
    let mut structs = Structs::new();
    let mut attrs: Vec<String> = Vec::new();
    let mut rest = code.as_str();
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        if rest.starts_with("#[") {
            let (inner, end) = balanced(rest, '[', ']').expect("a closed attribute");
            attrs.push(format!("#[{inner}]"));
            rest = &rest[end..];
            continue;
        }
        let line_end = rest.find('\n').unwrap_or(rest.len());
        let line = &rest[..line_end];
        let head = line
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ");
        let derives = attrs.iter().any(|a| {
            a.starts_with("#[derive")
                && a.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "Deserialize")
        });
        if let Some(decl) = head.strip_prefix("struct ")
            && derives
        {
            let name: String = decl
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // From the word `struct` on: a visibility's parentheses are not a tuple's.
            rest = &rest[line.len() - head.len()..];
            let named = rest
                .find(['{', ';', '('])
                .is_some_and(|at| rest[at..].starts_with('{'));
            assert!(
                named,
                "struct {name}: only structs with named fields are read"
            );
            let (body, end) = balanced(rest, '{', '}').expect("a closed struct");
            let items = serde_items(&attrs);
            let rule = items.iter().find_map(|i| deserialize_name(i, "rename_all"));
            let fields = split_top(&body)
                .iter()
                .filter_map(|f| field(f, rule.as_deref()))
                .collect();
            structs.insert(name, fields);
            rest = &rest[end..];
        } else {
            rest = &rest[line_end..];
        }
        attrs.clear();
    }
    structs
}

/// What a field's type makes of a struct: which struct, and whether it sits in a map (a
/// table per name) or a `Vec` (an array of tables).
fn nested<'a>(ty: &str, structs: &'a Structs) -> Option<(&'a str, bool, bool)> {
    let words: Vec<&str> = ty
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|w| !w.is_empty())
        .collect();
    let at = words.iter().position(|w| structs.contains_key(*w))?;
    let name = structs.get_key_value(words[at]).map(|(k, _)| k.as_str())?;
    let map = words[..at].iter().any(|w| w.ends_with("Map"));
    let array = words[..at].contains(&"Vec");
    assert!(
        !(map && array),
        "`{ty}`: a map of arrays of tables; teach this test how to write its header"
    );
    Some((name, map, array))
}

/// Adds the keys of `fields` to the table `header`, and the tables nested in them, whose
/// dotted path starts with `path`.
fn walk(structs: &Structs, fields: &[Field], path: &str, header: &str, out: &mut Tables) {
    out.keys.entry(header.to_string()).or_default();
    for f in fields {
        let inner = nested(&f.ty, structs);
        if f.flatten {
            let (name, _, _) = inner.expect("flatten names a Deserialize struct");
            walk(structs, &structs[name], path, header, out);
            continue;
        }
        let table = out.keys.get_mut(header).expect("entered above");
        table.extend(f.keys.iter().cloned());
        if let Some((name, map, array)) = inner {
            let dotted = if path.is_empty() {
                f.keys[0].clone()
            } else {
                format!("{path}.{}", f.keys[0])
            };
            let dotted = if map {
                format!("{dotted}.NAME")
            } else {
                dotted
            };
            let child = if array {
                format!("[[{dotted}]]")
            } else {
                format!("[{dotted}]")
            };
            walk(structs, &structs[name], &dotted, &child, out);
        }
    }
}

/// The tables and keys `source` accepts, from its one top-level `Deserialize` struct.
fn accepted(source: &str) -> Tables {
    let structs = deserialize_structs(source);
    let used: BTreeSet<&str> = structs
        .values()
        .flatten()
        .filter_map(|f| nested(&f.ty, &structs).map(|(n, _, _)| n))
        .collect();
    let roots: Vec<&String> = structs
        .keys()
        .filter(|n| !used.contains(n.as_str()))
        .collect();
    assert_eq!(
        roots.len(),
        1,
        "one Deserialize struct should be the file itself, not {roots:?}"
    );
    let mut out = Tables::default();
    walk(&structs, &structs[roots[0]], "", "", &mut out);
    out
}

/// The code spans of a line of Markdown.
fn code_spans(line: &str) -> Vec<String> {
    line.split('`')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect()
}

/// The page's documented tables and keys, and its ```toml blocks (with their first line).
fn documented(page: &str) -> (Tables, Vec<(usize, String)>) {
    let mut out = Tables::default();
    let mut examples = Vec::new();
    let mut fence: Option<(usize, bool, String)> = None;
    let mut section: Option<String> = None;
    let mut in_table = false;
    for (i, line) in page.lines().enumerate() {
        let t = line.trim();
        if let Some((start, toml, text)) = &mut fence {
            if t.starts_with("```") {
                if *toml {
                    examples.push((*start, std::mem::take(text)));
                }
                fence = None;
            } else {
                text.push_str(line);
                text.push('\n');
            }
            continue;
        }
        if let Some(info) = t.strip_prefix("```") {
            fence = Some((i + 1, info.trim() == "toml", String::new()));
            continue;
        }
        if t.starts_with('#') {
            let title = t.trim_start_matches('#').trim();
            section = if title == "Top level" {
                Some(String::new())
            } else {
                code_spans(title)
                    .pop()
                    .filter(|s| s.starts_with('[') && s.ends_with(']'))
            };
            if let Some(s) = &section {
                out.keys.entry(s.clone()).or_default();
            }
            in_table = false;
            continue;
        }
        if !t.starts_with('|') {
            in_table = false;
            continue;
        }
        let first_row = !in_table;
        in_table = true;
        let cells: Vec<&str> = t.trim_matches('|').split('|').map(str::trim).collect();
        let separator = cells
            .iter()
            .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':' | ' ')));
        let Some(s) = &section else { continue };
        if first_row || separator {
            continue;
        }
        let keys = code_spans(cells[0]);
        assert!(
            !keys.is_empty(),
            "config.md:{}: the first cell of a row in `{s}` is not a key in backticks",
            i + 1
        );
        out.keys.get_mut(s).expect("entered above").extend(keys);
    }
    assert!(fence.is_none(), "config.md: a code block is not closed");
    (out, examples)
}

fn show(table: &str) -> &str {
    if table.is_empty() {
        "the top level"
    } else {
        table
    }
}

/// Keys in `a` and not in `b`, one line each.
fn difference(a: &Tables, b: &Tables, what: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for (table, keys) in &a.keys {
        match b.keys.get(table) {
            None => lines.push(format!("{}: {what} has no such table", show(table))),
            Some(other) => lines.extend(
                keys.difference(other)
                    .map(|k| format!("{}: `{k}` is not in {what}", show(table))),
            ),
        }
    }
    lines
}

#[test]
fn every_config_key_is_documented_and_every_documented_key_exists() {
    // Every file of the config's folder, in name order.
    let folder = root().join("host/runtime/src/config");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .filter_map(|f| Some(f.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    let source: String = files.iter().map(|f| read(f)).collect::<Vec<_>>().join("\n");
    let page = read(&root().join("docs/src/config.md"));
    let code = accepted(&source);
    let (docs, _) = documented(&page);
    // The walk found the tables everyone knows are there.
    for table in ["", "[kernel]", "[domains.NAME.limits]", "[[routes]]"] {
        assert!(code.keys.contains_key(table), "config/: no {}", show(table));
    }
    assert!(code.keys["[serve]"].contains("max-body"), "renames apply");
    let mut problems = difference(&code, &docs, "docs/src/config.md");
    problems.extend(difference(&docs, &code, "host/runtime/src/config/"));
    assert!(
        problems.is_empty(),
        "the config reference and the config disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn every_example_of_the_reference_is_a_config_the_runtime_accepts() {
    let page = read(&root().join("docs/src/config.md"));
    let (_, examples) = documented(&page);
    assert!(examples.len() >= 3, "the page has its examples");
    // The page writes its examples as if the file sat at the repository's root.
    let file = root().join("lrpc.toml");
    for (line, text) in examples {
        if let Err(e) = Config::parse(&file, &text) {
            panic!("docs/src/config.md: the example at line {line} is refused: {e}");
        }
    }
}

#[test]
fn the_key_reader_applies_serde_attributes() {
    let source = r#"
        /// Not read: a comment naming `struct Fake {`.
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "kebab-case")]
        struct File {
            /// A doc comment.
            plain_key: Option<Spanned<String>>, // a comment with "a quote, and: a colon
            // a comment of its own, with a comma, and `struct Fake {`
            #[serde(default, rename = "other")]
            renamed: Vec<String>,
            #[serde(alias = "old_name")]
            new_name: bool,
            #[serde(skip)]
            hidden: u32,
            #[serde(flatten)]
            common: Common,
            items: Vec<Spanned<Item>>,
            by_name: BTreeMap<String, Item>,
            #[serde(rename(deserialize = "sub"))]
            section: Option<Sub>,
        }

        #[derive(Debug, Default, serde::Deserialize)]
        struct Common {
            shared_key: i64,
        }

        #[derive(Deserialize)]
        #[serde(rename_all(deserialize = "camelCase"))]
        pub struct Item {
            pub item_key: String,
        }

        #[derive(Deserialize)]
        struct Sub {
            r#type: String,
        }

        #[derive(Debug)]
        struct NotSerde {
            ignored: u8,
        }
    "#;
    let t = accepted(source);
    let keys = |table: &str| -> Vec<&str> { t.keys[table].iter().map(String::as_str).collect() };
    assert_eq!(
        keys(""),
        [
            "by-name",
            "items",
            "new-name",
            "old_name",
            "other",
            "plain-key",
            "shared_key",
            "sub"
        ]
    );
    assert_eq!(keys("[[items]]"), ["itemKey"]);
    assert_eq!(keys("[by-name.NAME]"), ["itemKey"]);
    assert_eq!(keys("[sub]"), ["type"]);
    assert_eq!(t.keys.len(), 4);

    let page = "# T\n\n## Top level\n\n| key | x |\n| --- | --- |\n| `a` (or `b`) | y |\n\n\
                ## Some `[t]`\n\n| key |\n| - |\n| `c` |\n\n```toml\n# not a heading\n[t]\n```\n\n\
                ## Prose\n\n| not | keys |\n| --- | --- |\n| plain | text |\n";
    let (docs, examples) = documented(page);
    assert_eq!(
        docs.keys[""].iter().map(String::as_str).collect::<Vec<_>>(),
        ["a", "b"]
    );
    assert_eq!(
        docs.keys["[t]"]
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        ["c"]
    );
    assert_eq!(docs.keys.len(), 2);
    assert_eq!(examples, [(15, "# not a heading\n[t]\n".to_string())]);
}
