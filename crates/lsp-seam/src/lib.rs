//! The vocabulary of dsh semantic code queries: the closed [`Op`] union of
//! five queries (definition, references, hover, symbols, diagnostics), their request and
//! result types, one error enum [`LspError`] with stable codes, the
//! [`LspProvider`] trait with one required method per op, the one exhaustive
//! [`dispatch`], and the [`Router`] that picks a provider by a path's final
//! extension.
//!
//! Every query carries the caller's [`ReadAccess`]: a provider reads no
//! file it refuses (the queried file fails with `SANDBOX_READ_DENIED`;
//! locations in other refused files are left out and counted in the
//! result's [`Withheld`]).
//!
//! The key design choice is the closed union: `Op` has exactly five variants
//! and is deliberately **not** `#[non_exhaustive]`, so a sixth variant does
//! not compile until the seam, every provider and the tool layer handle it.
//!
//! This crate deliberately is not a language-server client: it knows no
//! JSON-RPC, spawns nothing, and depends on no async runtime (futures are
//! plain boxed `std::future::Future`s). Its types are not serializable; the
//! tool layer owns serialization. Positions here are the model's: 1-based
//! lines and 1-based Unicode-scalar columns, never UTF-16 units or bytes.

#![forbid(unsafe_code)]

mod access;
mod error;
mod hook;
mod op;
mod provider;
mod router;
mod types;

pub use access::{ReadAccess, ReadDenied, Withheld};
pub use error::{LspError, RegisterError, UnavailableReason};
pub use op::Op;
pub use provider::{LspFuture, LspProvider, dispatch};
pub use router::{Router, final_extension};
pub use types::{
    Address, Answer, DefinitionItem, DefinitionResult, DiagnosticItem, DiagnosticsProof,
    DiagnosticsQuery, DiagnosticsResult, FileReferences, HoverContent, HoverResult, NumberedLine,
    PositionQuery, ProgressSink, Reference, ReferencesDetail, ReferencesResult, Request, Resolved,
    SandboxTag, Severity, SymbolItem, SymbolScope, SymbolsQuery, SymbolsResult, Workspace,
};
