//! Front end: WIT text to a resolved set of packages.

use crate::Error;
use crate::plan::{InterfacePlan, Presentation, plan_interface};
use std::path::Path;
use wit_parser::Resolve;

/// A loaded set of WIT packages.
pub struct Wit {
    pub(crate) resolve: Resolve,
}

impl Wit {
    /// Loads every `*.wit` file of `dir`, each file its own package, in name order.
    pub fn load_dir(dir: &Path) -> Result<Wit, Error> {
        let io = |source| Error::Io {
            path: dir.display().to_string(),
            source,
        };
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "wit"))
            .collect();
        files.sort();
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
        Wit::load_sources(&refs)
    }

    /// Loads WIT given as `(file name, text)` pairs, each its own package. Packages may use
    /// earlier ones.
    pub fn load_sources(sources: &[(&str, &str)]) -> Result<Wit, Error> {
        let mut resolve = Resolve::default();
        for (path, text) in sources {
            if let Err(e) = resolve.push_str(path, text) {
                return Err(Error::Parse {
                    path: path.to_string(),
                    message: resolve.render_error(&e),
                });
            }
        }
        Ok(Wit { resolve })
    }

    /// Names of every named interface, like `lrpc:bench/bench`.
    pub fn interface_names(&self) -> Vec<String> {
        self.resolve
            .interfaces
            .iter()
            .filter_map(|(id, _)| self.resolve.id_of(id))
            .collect()
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
