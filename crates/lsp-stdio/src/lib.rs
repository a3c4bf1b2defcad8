//! An implementation of the dsh lsp seam (`lsp-seam`) over stdio language
//! servers, based on `async-lsp`. Any server is data: a [`ServerSpec`] (the
//! schema of the host's `[lsp.servers.NAME]` tables) made into a
//! [`ServerConfig`]. The built-in languages ([`language_presets`]) are the
//! same data, compiled in from the crate's `presets.toml`: Rust
//! (rust-analyzer), Python (pyright, else basedpyright, else pylsp),
//! TypeScript/JavaScript (TypeScript 7's `tsc --lsp`, else
//! typescript-language-server, chosen per project root), C/C++ (clangd)
//! and Go (gopls). What only code can do — rust-analyzer's
//! `experimental/serverStatus` readiness, TypeScript's choice by installed
//! version — is implemented here and named in the data.
//!
//! One [`StdioLspProvider`] serves one server kind and runs one process
//! per project root, started lazily (or eagerly with
//! [`StdioLspProvider::start`]). Before each query it re-syncs the file
//! from disk by content hash, waits (bounded) until the server has loaded
//! the project — so it never answers "nothing" while indexing — and turns
//! the server's answer into the seam's results, with positions converted
//! exactly between the model's 1-based Unicode-scalar columns and the
//! negotiated UTF-8 or UTF-16 offsets. Dead servers are restarted within a
//! budget; every server runs in its own session and is ended by session id,
//! so none outlives the provider.
//!
//! This crate deliberately is not a tool: it renders no text and
//! serializes nothing for the model (the tool layer does), and it does not
//! read configuration files (the host builds [`LspConfig`]).
//!
//! The modules (how the servers behave is `docs/subsystems/lsp.md`):
//!
//! * `spec`, `config` — servers as data ([`ServerSpec`], the built-in
//!   presets of `presets.toml`, each with its root markers, readiness proof
//!   and install hint) and the plain [`ServerConfig`] made of them;
//!   `typescript` — the code rule a preset names (`per_root =
//!   "typescript-version"`): TypeScript's native `tsc --lsp` for TypeScript
//!   7 and later, else typescript-language-server, per project root.
//! * `server` — one running server: its process (confined, in a session of
//!   its own — in a PID namespace when the host's [`Confine`] hook gives
//!   one — ended by session id), the async-lsp connection with per-request
//!   timeouts and `$/cancelRequest`, the `initialize` handshake and position
//!   encodings, readiness (for rust-analyzer: idle with its load healthy),
//!   its stderr, document sync by content hash, and its file watcher.
//! * `provider` — [`StdioLspProvider`]: one server per project root with a
//!   restart budget, one query's path (read policy, sync, readiness,
//!   retries), one file per op, and the proof an empty answer needs (for
//!   rust-analyzer, that the file is in a loaded crate).
//! * `pool` — [`ServerPool`]: the cap on running servers and the idle stop,
//!   shared by every provider of a process.
//! * `confine` — [`Confine`], the hook through which the host gives each
//!   server its sandbox step and environment.
//! * `text` — positions between the model's columns and the server's
//!   encoding.

mod config;
mod confine;
mod pool;
mod provider;
mod server;
mod spec;
mod text;
mod typescript;

pub use config::{
    ClientOptions, DiagnosisProgress, LanguagePreset, LspConfig, PerRoot, ReadinessSignal,
    RootStrategy, ServerConfig,
};
pub use confine::{Confine, Confined};
pub use pool::ServerPool;
pub use provider::{RawServer, StdioLspProvider};
pub use server::{SERVER_NICE, ServerProcess};
pub use spec::{PerRootRule, PresetsError, ServerSpec, language_presets, parse_presets};
pub use text::Encoding;

use std::sync::Arc;

use lsp_seam::{LspProvider, RegisterError, Router};

/// Builds a [`Router`] with one provider per configured server, plus one
/// per built-in language ([`language_presets`]) for the extensions no
/// configured server claims (config wins extension by extension). A
/// language whose server is not on `PATH` is still routed: its queries
/// answer `LSP_UNAVAILABLE` (`binary_not_found`) with the install hint.
/// Every provider shares one [`ServerPool`]. Returns the router and the
/// providers (to call [`StdioLspProvider::start`] or
/// [`StdioLspProvider::shutdown`] on).
pub fn build_router(
    config: &LspConfig,
) -> Result<(Router, Vec<Arc<StdioLspProvider>>), RegisterError> {
    build_router_confined(config, None)
}

/// [`build_router`], every server confined by `confine` (a sandbox and an
/// environment policy, see [`Confine`]).
pub fn build_router_confined(
    config: &LspConfig,
    confine: Option<Confine>,
) -> Result<(Router, Vec<Arc<StdioLspProvider>>), RegisterError> {
    let pool = ServerPool::new(config.options.max_servers, config.options.idle_stop);
    let mut router = Router::new();
    let mut providers = Vec::new();
    for (name, server) in &config.servers {
        let mut server = server.clone();
        if server.name.is_empty() {
            server.name.clone_from(name);
        }
        let provider = Arc::new(
            StdioLspProvider::with_pool(server, config.options.clone(), pool.clone())
                .with_confine(confine.clone()),
        );
        router.register(provider.clone() as Arc<dyn LspProvider>)?;
        providers.push(provider);
    }
    for preset in language_presets() {
        let Some(mut server) = preset.choose() else {
            continue;
        };
        server.extensions.retain(|ext, _| {
            !config
                .servers
                .values()
                .any(|s| s.extensions.contains_key(ext))
        });
        if server.extensions.is_empty() {
            continue;
        }
        let provider = Arc::new(
            StdioLspProvider::with_pool(server, config.options.clone(), pool.clone())
                .with_confine(confine.clone()),
        );
        router.register(provider.clone() as Arc<dyn LspProvider>)?;
        providers.push(provider);
    }
    Ok((router, providers))
}
