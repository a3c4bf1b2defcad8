//! Routing a path to exactly one provider by its final extension.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::{Answer, LspError, LspFuture, LspProvider, RegisterError, Request, UnavailableReason};

/// The final extension of `path`, lowercase with its leading dot:
/// `foo.d.ts` → `.ts`, `Main.RS` → `.rs`; dotfiles (`.bashrc`), names
/// ending in a dot and names without a dot have none.
pub fn final_extension(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_string_lossy();
    let dot = name.rfind('.')?;
    if dot == 0 || dot + 1 == name.len() {
        return None;
    }
    Some(name[dot..].to_lowercase())
}

/// Picks one provider per path by its final extension (case-insensitive).
/// Conflicting registrations are rejected when made.
#[derive(Default, Clone)]
pub struct Router {
    providers: Vec<Arc<dyn LspProvider>>,
    routes: BTreeMap<String, usize>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(
                self.routes
                    .iter()
                    .map(|(ext, i)| (ext, self.providers[*i].name())),
            )
            .finish()
    }
}

impl Router {
    /// An empty router: every path is `no_provider`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `provider` for every extension it declares. Nothing is
    /// registered when any extension is malformed or already claimed.
    pub fn register(&mut self, provider: Arc<dyn LspProvider>) -> Result<(), RegisterError> {
        let extensions = provider.extensions();
        for ext in &extensions {
            let well_formed = ext.len() > 1
                && ext.starts_with('.')
                && !ext[1..].contains('.')
                && !ext.contains('/')
                && ext.to_lowercase() == *ext;
            if !well_formed {
                return Err(RegisterError::MalformedExtension {
                    extension: ext.clone(),
                    provider: provider.name().to_owned(),
                });
            }
            if let Some(&i) = self.routes.get(ext) {
                return Err(RegisterError::Conflict {
                    extension: ext.clone(),
                    existing: self.providers[i].name().to_owned(),
                    new: provider.name().to_owned(),
                });
            }
        }
        let mut unique = extensions;
        unique.sort();
        unique.dedup();
        let index = self.providers.len();
        self.providers.push(provider);
        for ext in unique {
            self.routes.insert(ext, index);
        }
        Ok(())
    }

    /// The provider for `path`, or `LSP_UNAVAILABLE` / `no_provider`.
    pub fn route(&self, path: &Path) -> Result<&Arc<dyn LspProvider>, LspError> {
        let ext = final_extension(path);
        match ext.as_ref().and_then(|e| self.routes.get(e)) {
            Some(&i) => Ok(&self.providers[i]),
            None => Err(LspError::Unavailable {
                reason: UnavailableReason::NoProvider,
                message: format!(
                    "no language server handles {} (extension {}); configured: {}",
                    path.display(),
                    ext.as_deref().unwrap_or("none"),
                    if self.routes.is_empty() {
                        "none".to_owned()
                    } else {
                        self.routes.keys().cloned().collect::<Vec<_>>().join(", ")
                    }
                ),
            }),
        }
    }

    /// The registered extensions and the name of the provider of each.
    pub fn routes(&self) -> Vec<(String, String)> {
        self.routes
            .iter()
            .map(|(e, &i)| (e.clone(), self.providers[i].name().to_owned()))
            .collect()
    }

    /// Routes `request` by its path and dispatches it to the provider.
    pub fn dispatch<'a>(&'a self, request: &'a Request) -> LspFuture<'a, Answer> {
        match self.route(request.path()) {
            Ok(provider) => crate::dispatch(provider.as_ref(), request),
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
}
