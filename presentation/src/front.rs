//! Front end: WIT text to a resolved set of packages.
//!
//! WIT is read as `wit-parser` reads it: the files of one package are parsed together (a
//! package may be split over several files), and packages are added to the [`Resolve`] in
//! dependency order whatever order their files come in. One difference: a folder may hold
//! several single-file packages side by side (the project's own `wit/` does), so files are
//! grouped by the package their `package …;` header names. A file without a header belongs to
//! the one package declared in its folder.
//!
//! [`Wit::load_dir`] reads a folder as `wit-parser`'s `Resolve::push_dir` does: its `*.wit`
//! files, and its `deps/` folder, where each sub-folder is one package and each `*.wit` file
//! one package (or several, nested).

use crate::Error;
use crate::plan::{InterfacePlan, Presentation, plan_interface};
use std::path::{Path, PathBuf};
use wit_parser::{Resolve, SourceMap, UnresolvedPackageGroup};

/// A loaded set of WIT packages.
pub struct Wit {
    pub(crate) resolve: Resolve,
}

impl Wit {
    /// Loads the WIT packages of folder `dir`: its `*.wit` files and, if present, the
    /// packages of its `deps/` folder (each sub-folder one package, each `*.wit` file its own).
    pub fn load_dir(dir: &Path) -> Result<Wit, Error> {
        let mut files = wit_files(dir)?;
        let deps = dir.join("deps");
        if deps.is_dir() {
            for entry in sorted_entries(&deps)? {
                if entry.is_dir() {
                    files.extend(wit_files(&entry)?);
                } else if entry.extension().is_some_and(|x| x == "wit") {
                    files.push(entry);
                }
            }
        }
        let mut sources = Vec::with_capacity(files.len());
        for f in &files {
            let text = std::fs::read_to_string(f).map_err(|source| Error::Io {
                path: f.display().to_string(),
                source,
            })?;
            sources.push((f.display().to_string(), text));
        }
        let refs: Vec<(&str, &str)> = sources
            .iter()
            .map(|(p, t)| (p.as_str(), t.as_str()))
            .collect();
        load(&dir.display().to_string(), &refs)
    }

    /// Loads WIT given as `(file name, text)` pairs, in any order. Files naming the same
    /// package in the same folder (the folder is the name's parent path) form one package;
    /// packages may use each other in any order, as long as there is no cycle.
    pub fn load_sources(sources: &[(&str, &str)]) -> Result<Wit, Error> {
        load("WIT sources", sources)
    }

    /// Names of every named interface, like `lrpc:bench/bench` or `wasi:io/streams@0.2.6`.
    pub fn interface_names(&self) -> Vec<String> {
        self.resolve
            .interfaces
            .iter()
            .filter_map(|(id, _)| self.resolve.id_of(id))
            .collect()
    }

    /// The resolved packages, for callers that check other type systems against the WIT
    /// (the kernel's component domains).
    pub fn resolve(&self) -> &Resolve {
        &self.resolve
    }

    /// The plan of an interface under the default presentation.
    pub fn interface(&self, name: &str) -> Result<InterfacePlan, Error> {
        self.interface_with(name, &Presentation::default())
    }

    /// The plan of an interface under a presentation.
    pub fn interface_with(
        &self,
        name: &str,
        presentation: &Presentation,
    ) -> Result<InterfacePlan, Error> {
        let id = self
            .resolve
            .interfaces
            .iter()
            .find(|(id, _)| self.resolve.id_of(*id).as_deref() == Some(name))
            .map(|(id, _)| id)
            .ok_or_else(|| {
                Error::UnknownInterface(name.to_string(), self.interface_names().join(", "))
            })?;
        plan_interface(&self.resolve, id, name, presentation)
    }
}

/// The entries of `dir`, sorted by name.
fn sorted_entries(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let io = |source| Error::Io {
        path: dir.display().to_string(),
        source,
    };
    let mut entries = std::fs::read_dir(dir)
        .map_err(io)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io)?;
    entries.sort();
    Ok(entries)
}

/// The `*.wit` files directly in `dir`, sorted by name.
fn wit_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut files = sorted_entries(dir)?;
    files.retain(|p| p.is_file() && p.extension().is_some_and(|x| x == "wit"));
    Ok(files)
}

/// The files of one package, before parsing.
struct Group<'a> {
    /// The folder of its files.
    folder: &'a Path,
    /// The package its header names (`None` for a group of header-less files).
    package: Option<String>,
    /// Its files.
    files: Vec<(&'a str, &'a str)>,
}

/// Parses and resolves `sources` (see [`Wit::load_sources`]); `origin` names them in errors.
fn load(origin: &str, sources: &[(&str, &str)]) -> Result<Wit, Error> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    let mut headless = Vec::new();
    for &(path, text) in sources {
        let folder = Path::new(path).parent().unwrap_or(Path::new(""));
        let Some(package) = package_header(text) else {
            headless.push((folder, path, text));
            continue;
        };
        match groups
            .iter_mut()
            .find(|g| g.folder == folder && g.package.as_deref() == Some(package.as_str()))
        {
            Some(g) => g.files.push((path, text)),
            None => groups.push(Group {
                folder,
                package: Some(package),
                files: vec![(path, text)],
            }),
        }
    }
    for (folder, path, text) in headless {
        let mut here = groups.iter_mut().filter(|g| g.folder == folder);
        match (here.next(), here.next()) {
            (Some(g), None) => g.files.push((path, text)),
            (None, _) => groups.push(Group {
                folder,
                package: None,
                files: vec![(path, text)],
            }),
            (Some(_), Some(_)) => {
                return Err(Error::Parse {
                    path: path.to_string(),
                    message: "no `package` header, and its folder declares several packages".into(),
                });
            }
        }
    }
    let mut parsed = Vec::with_capacity(groups.len());
    for g in groups {
        let mut map = SourceMap::new();
        for (path, text) in &g.files {
            map.push_str(path, defuse(text));
        }
        let group: UnresolvedPackageGroup = map.parse().map_err(|(map, e)| Error::Parse {
            path: g.files[0].0.to_string(),
            message: e.render(&map),
        })?;
        parsed.push(group);
    }
    let mut resolve = Resolve::default();
    if parsed.is_empty() {
        return Ok(Wit { resolve });
    }
    let main = parsed.remove(0);
    // `push_groups` adds every package of every group, sorted by their dependencies.
    if let Err(e) = resolve.push_groups(main, parsed) {
        return Err(Error::Parse {
            path: origin.to_string(),
            message: e.render(&resolve.source_map),
        });
    }
    Ok(Wit { resolve })
}

/// `text` with every empty block comment `/**/` written `/* */`. wit-parser 0.254's lexer
/// takes `/**/` for a doc comment (it starts with `/**` and ends with `*/`, sharing the star)
/// and then panics taking the doc text out of it; both forms are the same empty comment, so
/// the rewrite changes no meaning (only columns after it on that line move by one).
fn defuse(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains("/**/") {
        std::borrow::Cow::Owned(text.replace("/**/", "/* */"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// The package a WIT file's header names (`package ns:name@1.2.3;` as `ns:name@1.2.3`), or
/// `None` when its first item is not such a header. Comments and white space before it are
/// skipped; a nested package (`package ns:name { … }`) is not a header.
fn package_header(text: &str) -> Option<String> {
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix("//") {
            rest = r.split_once('\n').map_or("", |(_, r)| r);
        } else if rest.starts_with("/*") {
            rest = skip_block_comment(rest)?;
        } else {
            break;
        }
    }
    let rest = rest.strip_prefix("package")?;
    if !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let end = rest.find([';', '{'])?;
    if rest[end..].starts_with('{') {
        return None;
    }
    Some(rest[..end].split_whitespace().collect())
}

/// `text`, which starts with `/*`, after that comment (WIT block comments nest).
fn skip_block_comment(text: &str) -> Option<&str> {
    let mut depth = 0usize;
    let mut i = 0;
    let bytes = text.as_bytes();
    while i + 1 < bytes.len() {
        match &bytes[i..i + 2] {
            b"/*" => {
                depth += 1;
                i += 2;
            }
            b"*/" => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return text.get(i..);
                }
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::package_header;

    #[test]
    fn an_empty_block_comment_is_a_comment_not_a_doc() {
        // wit-parser 0.254 alone panics on this text (found by the `wit_plan` fuzz target).
        let text =
            "/// Doc.\npackage a:b;\ninterface i {\n    /**/// the null call\n    f: func();\n}\n";
        let wit = super::Wit::load_sources(&[("a.wit", text)]).expect("loads");
        assert_eq!(wit.interface_names(), vec!["a:b/i".to_string()]);
    }

    #[test]
    fn headers_are_found_after_comments_only() {
        assert_eq!(
            package_header("/// doc\n// note\n/* a /* nested */ block */ package a:b@0.1.0;"),
            Some("a:b@0.1.0".into())
        );
        assert_eq!(
            package_header("package a:b;\ninterface x {}"),
            Some("a:b".into())
        );
        assert_eq!(package_header("package a:b { interface x {} }"), None);
        assert_eq!(package_header("interface x {}\npackage a:b;"), None);
        assert_eq!(package_header("packages a:b;"), None);
        assert_eq!(package_header("/* unterminated"), None);
    }
}
