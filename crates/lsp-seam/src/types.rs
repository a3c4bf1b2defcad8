//! Requests and results. Lines are 1-based; columns are 1-based Unicode
//! scalar values.

use std::path::PathBuf;
use std::sync::Arc;

use crate::hook::Hook;
use crate::{Op, ReadAccess, Withheld};

/// Where a provider tells the caller what a query is waiting for (a
/// server starting, a project being indexed), while it waits. Reports are
/// best effort: a sink must not block. Every sink compares equal, so
/// queries stay comparable as plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProgressSink(Hook<ReportFn>);

/// What a [`ProgressSink`] calls: `(message, percentage)`.
type ReportFn = dyn Fn(&str, Option<u32>) + Send + Sync;

impl ProgressSink {
    /// A sink that calls `report(message, percentage)`.
    pub fn new(report: impl Fn(&str, Option<u32>) + Send + Sync + 'static) -> Self {
        Self(Hook::new(Arc::new(report)))
    }

    /// A sink that drops every report.
    pub fn none() -> Self {
        Self(Hook::none())
    }

    /// Reports `message`, with a percentage when the server gave one.
    pub fn report(&self, message: &str, percentage: Option<u32>) {
        if let Some(report) = self.0.get() {
            report(message, percentage);
        }
    }
}

/// How a position on a line is addressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Address {
    /// A 1-based Unicode-scalar column.
    Column(u32),
    /// An identifier as written on the line; `occurrence` (1-based) picks
    /// among repeats.
    Symbol {
        /// The identifier.
        name: String,
        /// Which occurrence on the line, 1-based.
        occurrence: u32,
    },
}

/// Where a language server started for a query may write, and in which
/// sandbox it runs: the asking session's workspace and sandbox. The
/// project root the server serves may lie above the workspace (a Cargo
/// workspace's root, found by walking up); the server's writes stay
/// inside the narrower of the two, so a build script it runs cannot write
/// where the session's own commands may not, and it runs in the session's
/// sandbox (its network, its `deny_read`), not a wider one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Workspace {
    /// No session bounds the server (an embedder with no sandbox of its
    /// own): it may write its whole project root.
    #[default]
    Unbounded,
    /// A session's.
    Session {
        /// The session's workspace directory (absolute).
        dir: PathBuf,
        /// The session's sandbox.
        sandbox: SandboxTag,
    },
}

/// The host's name for a session's sandbox: sessions whose sandboxes are
/// alike have the same one, and share servers; others get servers of
/// their own. Opaque to the seam; the host's hook that confines a server
/// knows what it names. The empty name is the host's own sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxTag(pub String);

/// A query at a position (definition, references, hover).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PositionQuery {
    /// The file; absolute, or relative to the host's working directory.
    pub path: PathBuf,
    /// 1-based line.
    pub line: u32,
    /// The column or symbol on that line.
    pub address: Address,
    /// Told what the query waits for while it waits.
    pub progress: ProgressSink,
    /// Which files the query may read (see [`ReadAccess`]).
    pub access: ReadAccess,
    /// The asking session's workspace (see [`Workspace`]).
    pub workspace: Workspace,
}

/// A symbols query: the outline of `path`, or with `query` a search of the
/// workspace of the server that handles `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolsQuery {
    /// The file that routes the query (and whose outline is wanted).
    pub path: PathBuf,
    /// A workspace search string; `None` asks for the outline.
    pub query: Option<String>,
    /// Told what the query waits for while it waits.
    pub progress: ProgressSink,
    /// Which files the query may read (see [`ReadAccess`]).
    pub access: ReadAccess,
    /// The asking session's workspace (see [`Workspace`]).
    pub workspace: Workspace,
}

/// A diagnostics query: the errors and warnings of one file, for its
/// content on disk at the time of the query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosticsQuery {
    /// The file.
    pub path: PathBuf,
    /// Also list information and hints (by default only errors and
    /// warnings are listed; the others are counted).
    pub all_severities: bool,
    /// Told what the query waits for while it waits.
    pub progress: ProgressSink,
    /// Which files the query may read (see [`ReadAccess`]).
    pub access: ReadAccess,
    /// The asking session's workspace (see [`Workspace`]).
    pub workspace: Workspace,
}

/// One query, one variant per [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// See [`Op::Definition`].
    Definition(PositionQuery),
    /// See [`Op::References`].
    References(PositionQuery),
    /// See [`Op::Hover`].
    Hover(PositionQuery),
    /// See [`Op::Symbols`].
    Symbols(SymbolsQuery),
    /// See [`Op::Diagnostics`].
    Diagnostics(DiagnosticsQuery),
}

impl Request {
    /// The op of this request.
    pub fn op(&self) -> Op {
        match self {
            Request::Definition(_) => Op::Definition,
            Request::References(_) => Op::References,
            Request::Hover(_) => Op::Hover,
            Request::Symbols(_) => Op::Symbols,
            Request::Diagnostics(_) => Op::Diagnostics,
        }
    }

    /// The progress sink of this request.
    pub fn progress(&self) -> &ProgressSink {
        match self {
            Request::Definition(q) | Request::References(q) | Request::Hover(q) => &q.progress,
            Request::Symbols(q) => &q.progress,
            Request::Diagnostics(q) => &q.progress,
        }
    }

    /// The path that routes this request.
    pub fn path(&self) -> &std::path::Path {
        match self {
            Request::Definition(q) | Request::References(q) | Request::Hover(q) => &q.path,
            Request::Symbols(q) => &q.path,
            Request::Diagnostics(q) => &q.path,
        }
    }
}

/// The position that was actually queried, echoed to the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The file, absolute.
    pub path: PathBuf,
    /// 1-based line.
    pub line: u32,
    /// 1-based Unicode-scalar column.
    pub column: u32,
    /// The identifier at that position, when one is there.
    pub symbol: Option<String>,
}

/// One numbered source line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumberedLine {
    /// 1-based line number.
    pub line: u32,
    /// The line's text, without its newline.
    pub text: String,
}

/// One definition site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionItem {
    /// The file, absolute.
    pub path: PathBuf,
    /// 1-based line of the definition's name.
    pub line: u32,
    /// 1-based Unicode-scalar column of the definition's name.
    pub column: u32,
    /// True when the definition lies outside the server's project root
    /// (a dependency or the standard library).
    pub external: bool,
    /// The definition's source, numbered, at most the provider's cap.
    pub body: Vec<NumberedLine>,
    /// How many lines of the definition were cut from `body`.
    pub body_omitted_lines: u32,
}

/// The answer to [`Op::Definition`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefinitionResult {
    /// What was queried.
    pub resolved: Resolved,
    /// The definition sites (usually one; empty when there is none).
    pub items: Vec<DefinitionItem>,
    /// Definition sites left out: in files the query may not read.
    pub withheld: Withheld,
}

/// One reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// 1-based line.
    pub line: u32,
    /// 1-based Unicode-scalar column.
    pub column: u32,
    /// The referencing line, trimmed; `None` once dropped to fit a budget.
    pub snippet: Option<String>,
}

/// The references in one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReferences {
    /// The file, absolute.
    pub path: PathBuf,
    /// How many references are in this file (also when `refs` was dropped).
    pub count: usize,
    /// The references, sorted; empty once dropped to fit a budget.
    pub refs: Vec<Reference>,
}

/// How much detail a [`ReferencesResult`] still carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReferencesDetail {
    /// Every reference with its snippet.
    Full,
    /// Positions without snippets.
    NoSnippets,
    /// Counts per file only.
    CountsPerFile,
    /// Only `total`.
    TotalOnly,
}

/// The answer to [`Op::References`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferencesResult {
    /// What was queried.
    pub resolved: Resolved,
    /// References grouped by file, files sorted by path.
    pub files: Vec<FileReferences>,
    /// The number of references, always given.
    pub total: usize,
    /// What [`ReferencesResult::shrink_to`] has dropped, if anything.
    pub detail: ReferencesDetail,
    /// References left out (and not in `total`): in files the query may
    /// not read.
    pub withheld: Withheld,
}

impl ReferencesResult {
    /// A rough size in bytes of this result as text: each file's path and
    /// count, each reference's position and snippet.
    pub fn approx_bytes(&self) -> usize {
        let mut n = 32;
        for f in &self.files {
            n += f.path.as_os_str().len() + 16;
            for r in &f.refs {
                n += 16 + r.snippet.as_ref().map_or(0, |s| s.len() + 4);
            }
        }
        n
    }

    /// Shrinks the result until [`ReferencesResult::approx_bytes`] fits
    /// `budget`: first drop snippets, then the positions (keeping counts per
    /// file), then the files (keeping `total`). Returns the detail left.
    pub fn shrink_to(&mut self, budget: usize) -> ReferencesDetail {
        if self.approx_bytes() > budget && self.detail < ReferencesDetail::NoSnippets {
            for f in &mut self.files {
                for r in &mut f.refs {
                    r.snippet = None;
                }
            }
            self.detail = ReferencesDetail::NoSnippets;
        }
        if self.approx_bytes() > budget && self.detail < ReferencesDetail::CountsPerFile {
            for f in &mut self.files {
                f.refs.clear();
            }
            self.detail = ReferencesDetail::CountsPerFile;
        }
        if self.approx_bytes() > budget && self.detail < ReferencesDetail::TotalOnly {
            self.files.clear();
            self.detail = ReferencesDetail::TotalOnly;
        }
        self.detail
    }
}

/// What hover found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoverContent {
    /// The server's hover text, as markdown.
    Markdown(String),
    /// The server had nothing: the source line at the position instead.
    SourceLine(String),
}

/// The answer to [`Op::Hover`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoverResult {
    /// What was queried.
    pub resolved: Resolved,
    /// The hover text, or the source line when the server had none.
    pub content: HoverContent,
}

/// Whether a symbols answer is an outline or a search.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SymbolScope {
    /// The outline of one file.
    Outline {
        /// The file, absolute.
        path: PathBuf,
    },
    /// A workspace search.
    Workspace {
        /// The search string.
        query: String,
    },
}

/// One symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolItem {
    /// The symbol's name.
    pub name: String,
    /// Its kind as a word (`function`, `struct`, `method`, ...).
    pub kind: &'static str,
    /// The file, absolute.
    pub path: PathBuf,
    /// 1-based line of its name.
    pub line: u32,
    /// 1-based last line of its whole definition.
    pub end_line: u32,
    /// The enclosing symbol's name, when there is one.
    pub container: Option<String>,
}

/// The answer to [`Op::Symbols`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolsResult {
    /// Outline or search.
    pub scope: SymbolScope,
    /// Symbols in source order (outline) or the server's order (search).
    pub symbols: Vec<SymbolItem>,
    /// Symbols left out: in files the query may not read.
    pub withheld: Withheld,
}

/// How serious a diagnostic is, most serious first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    /// An error.
    Error,
    /// A warning.
    Warning,
    /// Information.
    Information,
    /// A hint.
    Hint,
}

impl Severity {
    /// The severity as a word (`error`, `warning`, `info`, `hint`).
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Information => "info",
            Severity::Hint => "hint",
        }
    }
}

/// One diagnostic of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosticItem {
    /// 1-based line where it starts.
    pub line: u32,
    /// 1-based Unicode-scalar column where it starts.
    pub column: u32,
    /// How serious it is (a server that gives none: error).
    pub severity: Severity,
    /// The server's code for it (`E0308`, `reportAttributeAccessIssue`, ...).
    pub code: Option<String>,
    /// Who reported it (`rustc`, `Pyright`, `ts`, `clang`, `compiler`, ...).
    pub source: Option<String>,
    /// The message.
    pub message: String,
    /// The source line where it starts, without its newline.
    pub line_text: String,
}

/// How an answer to [`Op::Diagnostics`] is known to be for the file's
/// current content and complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiagnosticsProof {
    /// The server answered a `textDocument/diagnostic` request sent after
    /// the content.
    Pulled,
    /// The server published diagnostics for the version sent.
    Published {
        /// The document version the server named.
        version: i32,
    },
    /// The check the server runs (e.g. `cargo check` for rust-analyzer)
    /// started after the content was on disk and finished.
    CheckFinished {
        /// The check, as the server named it.
        check: String,
    },
}

/// The answer to [`Op::Diagnostics`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiagnosticsResult {
    /// The file, absolute.
    pub path: PathBuf,
    /// The diagnostics: errors first, then warnings (then information and
    /// hints when asked), each group by position.
    pub items: Vec<DiagnosticItem>,
    /// Information and hints not listed (not asked for).
    pub unlisted: usize,
    /// Why the answer is for the current content and complete.
    pub proof: DiagnosticsProof,
}

/// One answer, one variant per [`Op`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// See [`Op::Definition`].
    Definition(DefinitionResult),
    /// See [`Op::References`].
    References(ReferencesResult),
    /// See [`Op::Hover`].
    Hover(HoverResult),
    /// See [`Op::Symbols`].
    Symbols(SymbolsResult),
    /// See [`Op::Diagnostics`].
    Diagnostics(DiagnosticsResult),
}

impl Answer {
    /// The op this answers.
    pub fn op(&self) -> Op {
        match self {
            Answer::Definition(_) => Op::Definition,
            Answer::References(_) => Op::References,
            Answer::Hover(_) => Op::Hover,
            Answer::Symbols(_) => Op::Symbols,
            Answer::Diagnostics(_) => Op::Diagnostics,
        }
    }
}
