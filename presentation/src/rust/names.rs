//! Rust names for WIT names.

const KEYWORDS: &[&str] = &[
    "as", "break", "const", "continue", "else", "enum", "extern", "false", "fn", "for", "if",
    "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "static",
    "struct", "trait", "true", "type", "unsafe", "use", "where", "while", "async", "await", "dyn",
    "abstract", "become", "box", "do", "final", "macro", "override", "priv", "typeof", "unsized",
    "virtual", "yield", "try", "gen",
];

/// `kebab-case` to `snake_case`, escaping keywords.
pub(crate) fn snake(name: &str) -> String {
    let s = name.replace('-', "_");
    if matches!(s.as_str(), "self" | "super" | "crate" | "Self") {
        format!("{s}_")
    } else if KEYWORDS.contains(&s.as_str()) {
        format!("r#{s}")
    } else {
        s
    }
}

/// `kebab-case` to `CamelCase`.
pub(crate) fn camel(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            match c.next() {
                Some(f) => f.to_uppercase().chain(c).collect::<String>(),
                None => String::new(),
            }
        })
        .collect()
}

/// The module of interface `name` (`ns:pkg/iface@version`): its interface name, in snake
/// case; the version is left out (it is in the module's `INTERFACE`).
pub fn module_name(name: &str) -> String {
    let iface = name.rsplit('/').next().unwrap_or(name);
    snake(iface.split('@').next().unwrap_or(iface))
}

/// `kebab-case` to `SHOUTING_CASE`.
pub(crate) fn shout(name: &str) -> String {
    name.replace('-', "_").to_uppercase()
}

/// The suffix of a named type's generated functions (`__enc_{suffix}` and the like).
pub(crate) fn def_fn(name: &str) -> String {
    snake(name).trim_start_matches("r#").to_string()
}
