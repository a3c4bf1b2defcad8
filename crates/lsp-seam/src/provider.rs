//! The provider trait and the one exhaustive dispatch.

use std::future::Future;
use std::pin::Pin;

use crate::{
    Answer, DefinitionResult, DiagnosticsQuery, DiagnosticsResult, HoverResult, LspError,
    PositionQuery, ReferencesResult, Request, SymbolsQuery, SymbolsResult,
};

/// A boxed, sendable future of a query's outcome.
pub type LspFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LspError>> + Send + 'a>>;

/// A backend that answers the five queries for the files it handles.
///
/// Every op is a required method, so adding an [`crate::Op`] breaks every
/// provider until it answers the new op (or returns
/// [`LspError::UnsupportedOperation`]).
pub trait LspProvider: Send + Sync {
    /// A short name for messages and route conflicts (e.g. `rust-analyzer`).
    fn name(&self) -> &str;

    /// The extensions this provider handles: lowercase, one leading dot.
    fn extensions(&self) -> Vec<String>;

    /// Answers [`crate::Op::Definition`].
    fn definition<'a>(&'a self, query: &'a PositionQuery) -> LspFuture<'a, DefinitionResult>;

    /// Answers [`crate::Op::References`].
    fn references<'a>(&'a self, query: &'a PositionQuery) -> LspFuture<'a, ReferencesResult>;

    /// Answers [`crate::Op::Hover`].
    fn hover<'a>(&'a self, query: &'a PositionQuery) -> LspFuture<'a, HoverResult>;

    /// Answers [`crate::Op::Symbols`].
    fn symbols<'a>(&'a self, query: &'a SymbolsQuery) -> LspFuture<'a, SymbolsResult>;

    /// Answers [`crate::Op::Diagnostics`].
    fn diagnostics<'a>(&'a self, query: &'a DiagnosticsQuery) -> LspFuture<'a, DiagnosticsResult>;
}

/// Sends `request` to the provider method of its op. The one place that
/// maps a [`Request`] to a provider method.
pub fn dispatch<'a>(provider: &'a dyn LspProvider, request: &'a Request) -> LspFuture<'a, Answer> {
    match request {
        Request::Definition(q) => {
            let fut = provider.definition(q);
            Box::pin(async move { fut.await.map(Answer::Definition) })
        }
        Request::References(q) => {
            let fut = provider.references(q);
            Box::pin(async move { fut.await.map(Answer::References) })
        }
        Request::Hover(q) => {
            let fut = provider.hover(q);
            Box::pin(async move { fut.await.map(Answer::Hover) })
        }
        Request::Symbols(q) => {
            let fut = provider.symbols(q);
            Box::pin(async move { fut.await.map(Answer::Symbols) })
        }
        Request::Diagnostics(q) => {
            let fut = provider.diagnostics(q);
            Box::pin(async move { fut.await.map(Answer::Diagnostics) })
        }
    }
}
