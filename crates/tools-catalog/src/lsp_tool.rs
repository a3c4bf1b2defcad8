//! `lsp`: five semantic queries, routed by file extension.

use std::fmt::Write as _;
use std::path::Path;

use lsp_seam::{
    Address, Answer, DefinitionResult, DiagnosticsProof, DiagnosticsQuery, DiagnosticsResult,
    HoverContent, HoverResult, LspError, Op, PositionQuery, ReferencesDetail, ReferencesResult,
    Request, Resolved, Severity, SymbolScope, SymbolsQuery, SymbolsResult, Withheld,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::error::Code;
use crate::{
    CallContext, Effect, Preset, SANDBOX_UNAVAILABLE, Settings, Tool, ToolError, ToolFuture,
    ToolReply, ToolSpec, parse_args,
};

const DESCRIPTION: &str = "Ask the language server for `path` one semantic question: \
`definition` (where a symbol is defined, with its numbered source), `references` (every use, by file), \
`hover` (type and docs), `symbols` (the outline of `path`, or with `query` a workspace search), \
or `diagnostics` (errors and warnings of `path` as on disk now). \
Address a symbol by `line` plus `symbol` or `column`. \
A server still indexing or checking answers `LSP_NOT_READY` (retry shortly), never an empty result. \
Files the sandbox does not let a command read are not read: querying one is `SANDBOX_READ_DENIED`, \
and answers leave out locations in them (`withheld` says how many).";

/// The query.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OpArg {
    /// Where the symbol is defined.
    Definition,
    /// Every use of the symbol.
    References,
    /// The symbol's type and documentation.
    Hover,
    /// The outline of `path`, or a workspace search with `query`.
    Symbols,
    /// The errors and warnings of `path` as it is on disk now.
    Diagnostics,
}

impl From<OpArg> for Op {
    fn from(op: OpArg) -> Self {
        match op {
            OpArg::Definition => Op::Definition,
            OpArg::References => Op::References,
            OpArg::Hover => Op::Hover,
            OpArg::Symbols => Op::Symbols,
            OpArg::Diagnostics => Op::Diagnostics,
        }
    }
}

/// Arguments of `lsp`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LspArgs {
    /// The query.
    pub op: OpArg,
    /// The file, absolute or relative to the session's directory; its extension picks the server.
    pub path: String,
    /// 1-based line of the symbol (definition, references, hover).
    pub line: Option<u32>,
    /// The identifier as written on `line`.
    pub symbol: Option<String>,
    /// Which occurrence of `symbol` on the line, from 1. Default 1.
    pub occurrence: Option<u32>,
    /// 1-based column in characters, instead of `symbol`.
    pub column: Option<u32>,
    /// For `symbols`: a name to search the workspace for, instead of outlining `path`.
    pub query: Option<String>,
    /// Most references, symbols or diagnostics to list. Default 200.
    pub max_results: Option<usize>,
    /// For `diagnostics`: also list info and hints.
    pub all: Option<bool>,
}

pub(crate) struct LspTool {
    spec: ToolSpec,
    max_result_bytes: usize,
}

impl LspTool {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            spec: ToolSpec::new::<LspArgs>(
                "lsp",
                DESCRIPTION,
                &[Preset::Full],
                &[
                    Code::LspUnavailable,
                    Code::LspNotReady,
                    Code::LspInvalidPosition,
                    Code::LspFileNotFound,
                    Code::LspTimeout,
                    Code::LspServerError,
                    Code::LspUnsupportedOperation,
                    Code::SandboxReadDenied,
                    SANDBOX_UNAVAILABLE,
                    Code::InvalidArgument,
                ],
                Effect::ReadOnly,
            ),
            max_result_bytes: settings.max_result_bytes,
        }
    }
}

/// Converts a seam error to the envelope, keeping `reason` and
/// `line_text`; `requested` is the `path` argument, `absolute` the path it
/// names.
fn lsp_error(e: LspError, requested: &str, absolute: &Path) -> ToolError {
    let mut err = ToolError {
        code: crate::error::lsp_code(&e),
        message: e.to_string(),
        retryable: e.retryable(),
        details: Default::default(),
    };
    if let Some(reason) = e.reason() {
        err = err.with_detail("reason", reason.as_str());
    }
    match &e {
        LspError::InvalidPosition {
            line_text: Some(text),
            ..
        } => err = err.with_detail("line_text", text.as_str()),
        LspError::NotReady { progress, .. } => {
            err = err.with_detail("progress", progress.clone());
        }
        LspError::InvalidArgument { field, message } => {
            err = ToolError::invalid_argument(field, message);
        }
        LspError::ReadDenied(denied) => {
            err.message = denied.message((denied.path != absolute).then_some(requested));
            err = err.with_detail("path", denied.path.display().to_string());
        }
        LspError::InvalidPosition { .. }
        | LspError::Unavailable { .. }
        | LspError::FileNotFound { .. }
        | LspError::Timeout { .. }
        | LspError::ServerError { .. }
        | LspError::UnsupportedOperation { .. } => {}
    }
    err
}

/// The line and address of a position query, checked.
fn position(args: &LspArgs, op: Op) -> Result<(u32, Address), ToolError> {
    let line = args
        .line
        .ok_or_else(|| ToolError::invalid_argument("line", format!("is required for `{op}`")))?;
    if line == 0 {
        return Err(ToolError::invalid_argument("line", "lines start at 1"));
    }
    let address = match (&args.symbol, args.column) {
        (Some(name), None) => Address::Symbol {
            name: name.clone(),
            occurrence: match args.occurrence {
                Some(0) => {
                    return Err(ToolError::invalid_argument("occurrence", "starts at 1"));
                }
                Some(n) => n,
                None => 1,
            },
        },
        (None, Some(0)) => return Err(ToolError::invalid_argument("column", "columns start at 1")),
        (None, Some(column)) => Address::Column(column),
        (Some(_), Some(_)) => {
            return Err(ToolError::invalid_argument(
                "column",
                "give either `symbol` or `column`, not both",
            ));
        }
        (None, None) => {
            return Err(ToolError::invalid_argument(
                "symbol",
                format!(
                    "`{op}` needs `symbol` (the identifier as written on the line) or `column`"
                ),
            ));
        }
    };
    Ok((line, address))
}

/// `path` relative to the session's directory when it is inside it.
fn shown(path: &Path, base: &Path) -> String {
    path.strip_prefix(base)
        .unwrap_or(path)
        .display()
        .to_string()
}

fn resolved_json(r: &Resolved, base: &Path) -> Value {
    json!({ "path": shown(&r.path, base), "line": r.line, "column": r.column, "symbol": r.symbol })
}

impl Tool for LspTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: LspArgs = parse_args(args)?;
            let path = cx.cwd.join(&args.path);
            let progress = match &cx.progress {
                Some(sink) => {
                    let sink = sink.clone();
                    lsp_seam::ProgressSink::new(move |message, percentage| {
                        sink.report(message, percentage);
                    })
                }
                None => lsp_seam::ProgressSink::none(),
            };
            // The arguments are checked before the sandbox is prepared.
            let op = Op::from(args.op);
            type Make = fn(PositionQuery) -> Request;
            let at = match op {
                Op::Definition => Some((Request::Definition as Make, position(&args, op)?)),
                Op::References => Some((Request::References as Make, position(&args, op)?)),
                Op::Hover => Some((Request::Hover as Make, position(&args, op)?)),
                Op::Symbols | Op::Diagnostics => None,
            };
            // What a command of this session may read is all the server
            // is given and all the answer shows.
            let access = cx
                .confinement
                .read_rules(&cx.cwd, cx.env.clone())
                .await?
                .into_access();
            // The server runs in this session's sandbox, writing no more
            // than its workspace.
            let workspace = lsp_seam::Workspace::Session {
                dir: cx.cwd.clone(),
                sandbox: cx.confinement.tag(),
            };
            let request = match at {
                Some((make, (line, address))) => make(PositionQuery {
                    workspace: workspace.clone(),
                    progress,
                    access,
                    path,
                    line,
                    address,
                }),
                None if op == Op::Diagnostics => Request::Diagnostics(DiagnosticsQuery {
                    workspace: workspace.clone(),
                    progress,
                    access,
                    path,
                    all_severities: args.all.unwrap_or(false),
                }),
                None => Request::Symbols(SymbolsQuery {
                    workspace: workspace.clone(),
                    progress,
                    access,
                    path,
                    query: args.query.clone(),
                }),
            };
            let max_results = args.max_results.unwrap_or(200).max(1);
            let answer = cx
                .runtime
                .lsp
                .dispatch(&request)
                .await
                .map_err(|e| lsp_error(e, &args.path, request.path()))?;
            let base = cx.cwd.as_path();
            Ok(match answer {
                Answer::Definition(d) => definition_reply(&d, base),
                Answer::References(r) => {
                    references_reply(r, base, max_results, self.max_result_bytes)
                }
                Answer::Hover(h) => hover_reply(&h, base, self.max_result_bytes),
                Answer::Symbols(s) => symbols_reply(&s, base, max_results),
                Answer::Diagnostics(d) => {
                    diagnostics_reply(&d, base, max_results, self.max_result_bytes)
                }
            })
        })
    }
}

fn definition_reply(d: &DefinitionResult, base: &Path) -> ToolReply {
    let mut text = String::new();
    if d.items.is_empty() && d.withheld.is_empty() {
        text.push_str("no definition found");
    }
    let items: Vec<Value> = d
        .items
        .iter()
        .map(|item| {
            let mut body = String::new();
            for l in &item.body {
                let _ = writeln!(body, "{:>5} | {}", l.line, l.text);
            }
            if item.body_omitted_lines > 0 {
                let _ = writeln!(body, "      … {} more lines", item.body_omitted_lines);
            }
            let _ = writeln!(
                text,
                "{}:{}:{}{}\n{}",
                shown(&item.path, base),
                item.line,
                item.column,
                if item.external {
                    " (external: outside the project)"
                } else {
                    ""
                },
                body
            );
            json!({
                "path": shown(&item.path, base),
                "line": item.line,
                "column": item.column,
                "external": item.external,
                "body": body,
            })
        })
        .collect();
    let mut structured = json!({ "resolved": resolved_json(&d.resolved, base), "items": items });
    add_withheld(
        &mut text,
        &mut structured,
        &d.withheld,
        "definition site(s)",
    );
    ToolReply {
        text: text.trim_end().to_owned(),
        structured,
    }
}

/// Says in `text` and `structured` how many locations the answer left out
/// because the session's sandbox does not let them be read, and by which
/// rules (nothing when none was).
fn add_withheld(text: &mut String, structured: &mut Value, withheld: &Withheld, what: &str) {
    if withheld.is_empty() {
        return;
    }
    let reason = format!(
        "in files this session's sandbox does not let a command read ({})",
        withheld.rules.join("; ")
    );
    text.truncate(text.trim_end().len());
    let _ = write!(text, "\n[withheld: {} {what}, {reason}]", withheld.count);
    if let Value::Object(map) = structured {
        map.insert(
            "withheld".to_owned(),
            json!({ "count": withheld.count, "reason": reason }),
        );
    }
}

fn references_reply(
    mut r: ReferencesResult,
    base: &Path,
    max_results: usize,
    budget: usize,
) -> ToolReply {
    // Keep at most `max_results` positions, then shrink to the byte budget:
    // snippets first, then positions (counts per file stay), never `total`.
    let mut listed = 0;
    let mut capped = false;
    for f in &mut r.files {
        let room = max_results.saturating_sub(listed);
        if f.refs.len() > room {
            f.refs.truncate(room);
            capped = true;
        }
        listed += f.refs.len();
    }
    let detail = r.shrink_to(budget.saturating_sub(512));
    let detail_word = match detail {
        ReferencesDetail::Full => "full",
        ReferencesDetail::NoSnippets => "no_snippets",
        ReferencesDetail::CountsPerFile => "counts_per_file",
        ReferencesDetail::TotalOnly => "total_only",
    };
    let mut text = format!("{} references in {} files", r.total, r.files.len());
    if capped {
        let _ = write!(
            text,
            " (positions listed up to max_results = {max_results})"
        );
    }
    if detail != ReferencesDetail::Full {
        let _ = write!(text, " (shortened to fit: {detail_word})");
    }
    text.push('\n');
    let files: Vec<Value> = r
        .files
        .iter()
        .map(|f| {
            let _ = writeln!(text, "{} ({})", shown(&f.path, base), f.count);
            for reference in &f.refs {
                let _ = writeln!(
                    text,
                    "  {}:{}  {}",
                    reference.line,
                    reference.column,
                    reference.snippet.as_deref().unwrap_or_default().trim()
                );
            }
            json!({
                "path": shown(&f.path, base),
                "count": f.count,
                "refs": f.refs.iter().map(|x| json!({
                    "line": x.line, "column": x.column, "snippet": x.snippet
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut structured = json!({
        "resolved": resolved_json(&r.resolved, base),
        "total": r.total,
        "files": files,
        "detail": detail_word,
        "truncated": capped || detail != ReferencesDetail::Full,
    });
    add_withheld(&mut text, &mut structured, &r.withheld, "reference(s)");
    ToolReply {
        text: text.trim_end().to_owned(),
        structured,
    }
}

/// Markdown with its backslash escapes of punctuation undone outside
/// fenced code (`ghp\_abc` → `ghp_abc`): a model reads the text, not its
/// rendering, and a secret a server escaped is then found by redaction
/// as printed. Code blocks are left as they are.
fn unescape_markdown(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut in_code = false;
    for line in markdown.split_inclusive('\n') {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            out.push_str(line);
            continue;
        }
        if in_code {
            out.push_str(line);
            continue;
        }
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('\\', Some(&next)) if next.is_ascii_punctuation() => {
                    out.push(next);
                    chars.next();
                }
                _ => out.push(c),
            }
        }
    }
    out
}

fn hover_reply(h: &HoverResult, base: &Path, budget: usize) -> ToolReply {
    let (markdown, source_line) = match &h.content {
        HoverContent::Markdown(m) => (Some(unescape_markdown(m.trim())), None),
        HoverContent::SourceLine(l) => (None, Some(l.clone())),
    };
    let text = match (&markdown, &source_line) {
        (Some(m), _) => output_text::truncate_middle(m, budget).text,
        (None, Some(l)) => format!("no hover information; the source line is:\n{l}"),
        (None, None) => String::new(),
    };
    ToolReply {
        text,
        structured: json!({
            "resolved": resolved_json(&h.resolved, base),
            "markdown": markdown,
            "source_line": source_line,
        }),
    }
}

fn symbols_reply(s: &SymbolsResult, base: &Path, max_results: usize) -> ToolReply {
    let scope = match &s.scope {
        SymbolScope::Outline { path } => json!({ "outline": shown(path, base) }),
        SymbolScope::Workspace { query } => json!({ "workspace": query }),
    };
    let shown_symbols = &s.symbols[..s.symbols.len().min(max_results)];
    let mut text = String::new();
    for sym in shown_symbols {
        let _ = writeln!(
            text,
            "{} {}{}  {}:{}-{}",
            sym.kind,
            sym.container
                .as_ref()
                .map(|c| format!("{c}::"))
                .unwrap_or_default(),
            sym.name,
            shown(&sym.path, base),
            sym.line,
            sym.end_line
        );
    }
    if shown_symbols.len() < s.symbols.len() {
        let _ = writeln!(
            text,
            "… {} more (raise max_results to see them)",
            s.symbols.len() - shown_symbols.len()
        );
    }
    if s.symbols.is_empty() && s.withheld.is_empty() {
        text.push_str("no symbols");
    }
    let mut structured = json!({
            "scope": scope,
            "total": s.symbols.len(),
            "truncated": shown_symbols.len() < s.symbols.len(),
            "symbols": shown_symbols.iter().map(|x| json!({
                "name": x.name,
                "kind": x.kind,
                "path": shown(&x.path, base),
                "line": x.line,
                "end_line": x.end_line,
                "container": x.container,
            })).collect::<Vec<_>>(),
    });
    add_withheld(&mut text, &mut structured, &s.withheld, "symbol(s)");
    ToolReply {
        text: text.trim_end().to_owned(),
        structured,
    }
}

/// "3 errors", "1 warning", "2 infos".
fn count_of(n: usize, severity: Severity) -> String {
    let word = severity.as_str();
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Errors first, then warnings (then info and hints when asked), each
/// with `line:col`, severity, code, source, message and the source line;
/// a count header; cut at `max_results` items or the byte budget with
/// the cut stated per severity.
fn diagnostics_reply(
    d: &DiagnosticsResult,
    base: &Path,
    max_results: usize,
    budget: usize,
) -> ToolReply {
    let path = shown(&d.path, base);
    let order = [
        Severity::Error,
        Severity::Warning,
        Severity::Information,
        Severity::Hint,
    ];
    let counts: Vec<(Severity, usize)> = order
        .iter()
        .map(|&s| (s, d.items.iter().filter(|i| i.severity == s).count()))
        .filter(|(_, n)| *n > 0)
        .collect();
    let mut text = if counts.is_empty() && d.unlisted == 0 {
        format!("no problems in {path}")
    } else if counts.is_empty() {
        format!("no errors or warnings in {path}")
    } else {
        let parts: Vec<String> = counts.iter().map(|&(s, n)| count_of(n, s)).collect();
        format!("{} in {path}", parts.join(", "))
    };
    if d.unlisted > 0 {
        let _ = write!(
            text,
            " ({} info/hints not listed: all=true lists them)",
            d.unlisted
        );
    }
    let proof = match &d.proof {
        DiagnosticsProof::Pulled => "asked of the server for this content".to_owned(),
        DiagnosticsProof::Published { version } => {
            format!("published by the server for this content (version {version})")
        }
        DiagnosticsProof::CheckFinished { check } => {
            format!("`{check}` finished on this content")
        }
    };
    let _ = write!(text, " [{proof}]");
    text.push('\n');
    let room = budget.saturating_sub(512);
    let mut listed = Vec::new();
    for item in &d.items {
        let mut entry = format!("{}:{} {}", item.line, item.column, item.severity.as_str());
        if let Some(code) = &item.code {
            let _ = write!(entry, " {code}");
        }
        if let Some(source) = &item.source {
            let _ = write!(entry, " ({source})");
        }
        let _ = write!(
            entry,
            ": {}\n  {:>5} | {}\n",
            item.message.trim_end(),
            item.line,
            item.line_text
        );
        if listed.len() >= max_results || text.len() + entry.len() > room {
            break;
        }
        text.push_str(&entry);
        listed.push(item);
    }
    let cut: Vec<String> = order
        .iter()
        .map(|&s| {
            let all = d.items.iter().filter(|i| i.severity == s).count();
            let shown_n = listed.iter().filter(|i| i.severity == s).count();
            (s, all - shown_n)
        })
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| {
            format!(
                "{n} more {}",
                count_of(n, s).split_once(' ').map_or("", |x| x.1)
            )
        })
        .collect();
    if !cut.is_empty() {
        let _ = write!(text, "… {} (raise max_results to see them)", cut.join(", "));
    }
    let structured = json!({
        "path": path,
        "counts": counts.iter().map(|(s, n)| (s.as_str().to_owned(), json!(n))).collect::<serde_json::Map<_, _>>(),
        "unlisted": d.unlisted,
        "truncated": listed.len() < d.items.len(),
        "diagnostics": listed.iter().map(|i| json!({
            "line": i.line,
            "column": i.column,
            "severity": i.severity.as_str(),
            "code": i.code,
            "source": i.source,
            "message": i.message,
            "line_text": i.line_text,
        })).collect::<Vec<_>>(),
    });
    ToolReply {
        text: text.trim_end().to_owned(),
        structured,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn an_outline_whose_symbols_were_all_withheld_does_not_say_there_are_none() {
        let base = Path::new("/w");
        let outline = |withheld: Withheld| SymbolsResult {
            scope: SymbolScope::Outline {
                path: base.join("main.py"),
            },
            symbols: Vec::new(),
            withheld,
        };
        assert_eq!(
            symbols_reply(&outline(Withheld::default()), base, 10).text,
            "no symbols"
        );
        let withheld = Withheld {
            count: 2,
            rules: vec!["`deny_read` entry `~/.ssh`".to_owned()],
        };
        assert_eq!(
            symbols_reply(&outline(withheld), base, 10)
                .text
                .trim_start(),
            "[withheld: 2 symbol(s), in files this session's sandbox does not let a command \
             read (`deny_read` entry `~/.ssh`)]"
        );
    }

    fn item(line: u32, severity: Severity, message: &str) -> lsp_seam::DiagnosticItem {
        lsp_seam::DiagnosticItem {
            line,
            column: 5,
            severity,
            code: Some("TS2322".into()),
            source: Some("ts".into()),
            message: message.into(),
            line_text: format!("line {line}"),
        }
    }

    #[test]
    fn diagnostics_have_a_count_header_errors_first_and_a_stated_cut() {
        let base = Path::new("/w");
        let mut items = vec![item(3, Severity::Error, "bad type")];
        items.extend((10..14).map(|l| item(l, Severity::Warning, "unused")));
        let d = DiagnosticsResult {
            path: base.join("src/app.ts"),
            items,
            unlisted: 2,
            proof: DiagnosticsProof::Published { version: 4 },
        };
        let text = diagnostics_reply(&d, base, 3, 100_000).text;
        assert_eq!(
            text,
            "1 error, 4 warnings in src/app.ts (2 info/hints not listed: all=true lists them) \
             [published by the server for this content (version 4)]\n\
             3:5 error TS2322 (ts): bad type\n      3 | line 3\n\
             10:5 warning TS2322 (ts): unused\n     10 | line 10\n\
             11:5 warning TS2322 (ts): unused\n     11 | line 11\n\
             … 2 more warnings (raise max_results to see them)"
        );
        let clean = DiagnosticsResult {
            path: base.join("src/app.ts"),
            items: vec![],
            unlisted: 0,
            proof: DiagnosticsProof::Pulled,
        };
        assert_eq!(
            diagnostics_reply(&clean, base, 3, 100_000).text,
            "no problems in src/app.ts [asked of the server for this content]"
        );
    }

    #[test]
    fn markdown_escapes_are_undone_outside_code() {
        assert_eq!(
            unescape_markdown(
                "uses ghp\\_abc \\*not bold\\*\n```python\nx = \"\\\\\\_\"\n```\na\\nb"
            ),
            "uses ghp_abc *not bold*\n```python\nx = \"\\\\\\_\"\n```\na\\nb"
        );
    }
}
