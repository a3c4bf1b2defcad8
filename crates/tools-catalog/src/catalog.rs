//! Tools, presets and the catalog.

use std::fmt::Write as _;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use schemars::JsonSchema;
use serde_json::{Map, Value, json};

use crate::error::Code;
use crate::{CallContext, Settings, ToolError, ToolReply};

/// A named set of tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Preset {
    /// `bash` only: a complete agent needs nothing more.
    Minimal,
    /// Every tool (the default).
    Full,
}

impl Preset {
    /// Every preset, smallest first.
    pub const ALL: [Preset; 2] = [Preset::Minimal, Preset::Full];

    /// The preset's name as written in configs and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Preset::Minimal => "minimal",
            Preset::Full => "full",
        }
    }

    /// Parses a preset name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }
}

impl std::fmt::Display for Preset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the model sees of a tool, independent of any runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: &'static str,
    /// The description the model reads.
    pub description: &'static str,
    /// The presets that include the tool.
    pub presets: &'static [Preset],
    /// The error codes the tool can return.
    pub error_codes: &'static [Code],
    /// The JSON Schema of the arguments.
    pub input_schema: Map<String, Value>,
    /// What a call does to the world, as clients are told.
    pub effect: Effect,
}

impl ToolSpec {
    /// A spec whose input schema is generated from `T`.
    pub fn new<T: JsonSchema>(
        name: &'static str,
        description: &'static str,
        presets: &'static [Preset],
        error_codes: &'static [Code],
        effect: Effect,
    ) -> Self {
        Self {
            name,
            description,
            presets,
            error_codes,
            input_schema: input_schema::<T>(),
            effect,
        }
    }
}

/// What a tool's call does to the world: the MCP tool annotations
/// (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`)
/// clients decide by whether a tool runs without asking, in a read-only
/// (plan) mode, or in parallel with others. Every tool declares one; the
/// hints are stated in full, never left to a client's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effect {
    /// Reads what dsh holds (output, lists, a language server's answers)
    /// and changes nothing.
    ReadOnly,
    /// Ends or signals work the caller started (its own terminals and
    /// jobs), and nothing else; `idempotent` when a repeat changes nothing
    /// more.
    EndsOwnWork {
        /// A second identical call has no further effect.
        idempotent: bool,
    },
    /// Runs what the caller asks (commands, programs, an agent): anything
    /// the sandbox allows, on the machine and the network.
    RunsCommands,
}

/// The four hints of an [`Effect`], in the order MCP names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hints {
    /// `readOnlyHint`.
    pub read_only: bool,
    /// `destructiveHint`.
    pub destructive: bool,
    /// `idempotentHint`.
    pub idempotent: bool,
    /// `openWorldHint`.
    pub open_world: bool,
}

impl Hints {
    /// As the `annotations` object of an MCP tool.
    pub fn to_json(self) -> Value {
        json!({
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        })
    }

    /// As the rendered catalog states them.
    fn describe(self) -> String {
        format!(
            "`readOnlyHint` {}, `destructiveHint` {}, `idempotentHint` {}, `openWorldHint` {}",
            self.read_only, self.destructive, self.idempotent, self.open_world
        )
    }
}

impl Effect {
    /// The hints clients read.
    pub const fn hints(self) -> Hints {
        match self {
            Effect::ReadOnly => Hints {
                read_only: true,
                destructive: false,
                idempotent: true,
                open_world: false,
            },
            Effect::EndsOwnWork { idempotent } => Hints {
                read_only: false,
                destructive: true,
                idempotent,
                open_world: false,
            },
            Effect::RunsCommands => Hints {
                read_only: false,
                destructive: true,
                idempotent: false,
                open_world: true,
            },
        }
    }
}

/// The JSON Schema of an argument type, as a tool's `inputSchema`.
///
/// The schema is paid for on every request a client makes, so it is made
/// lean; the arguments a tool accepts do not change. No `$schema`, `title`
/// or type-level description; subschemas inlined; an optional argument
/// typed as its value (a `null` is still accepted, as if the argument were
/// left out); an enum as a plain `enum` of its values (its variants' doc
/// comments do not reach the model: the argument's description says what
/// matters); no integer `format` nor the bounds of the Rust type (the
/// argument's description gives the range, and a value outside the type is
/// `INVALID_ARGUMENT`).
pub fn input_schema<T: JsonSchema>() -> Map<String, Value> {
    let schema = schemars::SchemaGenerator::default().into_root_schema_for::<T>();
    let mut map = match serde_json::to_value(schema) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    map.remove("$schema");
    map.remove("title");
    // The type's own doc comment says nothing the tool description does not.
    map.remove("description");
    let defs = match map.remove("$defs") {
        Some(Value::Object(defs)) => defs,
        _ => Map::new(),
    };
    let mut lean = Value::Object(map);
    lean_schema(&mut lean, &defs, 0);
    let Value::Object(mut map) = lean else {
        return Map::new();
    };
    // A reference that could not be inlined (a recursive type) still
    // needs its definition.
    if !defs.is_empty() && serde_json::to_string(&map).is_ok_and(|j| j.contains("\"$ref\"")) {
        map.insert("$defs".to_owned(), Value::Object(defs));
    }
    map
}

/// How deep references are inlined before they are left as references.
const MAX_INLINE_DEPTH: usize = 8;

/// Makes one (sub)schema lean; see [`input_schema`].
fn lean_schema(schema: &mut Value, defs: &Map<String, Value>, depth: usize) {
    let Value::Object(obj) = schema else {
        return;
    };
    // `{"$ref": "#/$defs/X", ...}`: the definition, the siblings winning.
    if depth < MAX_INLINE_DEPTH
        && let Some(def) = obj
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .and_then(|name| defs.get(name))
            .and_then(Value::as_object)
    {
        let mut inlined = def.clone();
        obj.remove("$ref");
        inlined.append(obj);
        *obj = inlined;
        return lean_schema(schema, defs, depth + 1);
    }
    // `{"anyOf": [S, {"type": "null"}], ...}` (an optional argument): S.
    let null = json!({ "type": "null" });
    if let Some(Value::Array(any)) = obj.get("anyOf")
        && any.len() == 2
        && any.contains(&null)
        && let Some(Value::Object(other)) = any.iter().find(|s| **s != null).cloned()
    {
        obj.remove("anyOf");
        let mut inner = other;
        inner.append(obj);
        *obj = inner;
        return lean_schema(schema, defs, depth);
    }
    // `"type": ["string", "null"]`: `"type": "string"`.
    if let Some(Value::Array(types)) = obj.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            obj.insert("type".to_owned(), only);
        }
    }
    // `{"oneOf": [{"const": "a", "type": "string", ...}, ...]}`: an `enum`.
    if let Some(Value::Array(variants)) = obj.get("oneOf")
        && let Some(values) = variants
            .iter()
            .map(|v| {
                v.get("const")
                    .filter(|c| c.is_string() && v.get("type").is_some_and(|t| t == "string"))
                    .cloned()
            })
            .collect::<Option<Vec<Value>>>()
    {
        obj.remove("oneOf");
        obj.insert("type".to_owned(), json!("string"));
        obj.insert("enum".to_owned(), Value::Array(values));
    }
    // An integer `format` and the bounds of its Rust type.
    if let Some(format) = obj.get("format").and_then(Value::as_str)
        && let Some((min, max)) = integer_format_bounds(format)
    {
        obj.remove("format");
        for (key, bound) in [("minimum", min), ("maximum", max)] {
            if bound.is_some() && obj.get(key).and_then(Value::as_f64) == bound {
                obj.remove(key);
            }
        }
    }
    if let Some(Value::Object(properties)) = obj.get_mut("properties") {
        for child in properties.values_mut() {
            lean_schema(child, defs, depth);
        }
    }
    for key in ["items", "additionalProperties", "not"] {
        if let Some(child) = obj.get_mut(key) {
            lean_schema(child, defs, depth);
        }
    }
    for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
        if let Some(Value::Array(children)) = obj.get_mut(key) {
            for child in children {
                lean_schema(child, defs, depth);
            }
        }
    }
}

/// The bounds schemars writes next to an integer `format`, as JSON numbers
/// (`None`: no bound is written); `None` for a format that is not an
/// integer's.
fn integer_format_bounds(format: &str) -> Option<(Option<f64>, Option<f64>)> {
    let bounds = match format {
        "uint8" => (Some(0.0), Some(f64::from(u8::MAX))),
        "uint16" => (Some(0.0), Some(f64::from(u16::MAX))),
        "uint32" | "uint64" | "uint" | "uint128" => (Some(0.0), None),
        "int8" => (Some(f64::from(i8::MIN)), Some(f64::from(i8::MAX))),
        "int16" => (Some(f64::from(i16::MIN)), Some(f64::from(i16::MAX))),
        "int32" | "int64" | "int" | "int128" => (None, None),
        _ => return None,
    };
    Some(bounds)
}

/// The future a tool call returns.
pub type ToolFuture<'a> = Pin<Box<dyn Future<Output = Result<ToolReply, ToolError>> + Send + 'a>>;

/// A model-facing tool.
pub trait Tool: Send + Sync {
    /// What the model sees.
    fn spec(&self) -> &ToolSpec;

    /// Runs one call with the raw JSON arguments.
    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a>;
}

/// The tools of one preset, in catalog order.
pub struct Catalog {
    preset: Preset,
    tools: Vec<Arc<dyn Tool>>,
}

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("preset", &self.preset)
            .field("tools", &self.names())
            .finish()
    }
}

/// Every tool, in catalog order.
fn all_tools(settings: &Settings) -> Vec<Arc<dyn Tool>> {
    vec![
        Arc::new(crate::bash::BashTool::new(settings)),
        Arc::new(crate::terminal_tools::TerminalOpenTool::new()),
        Arc::new(crate::terminal_tools::TerminalSendTool::new()),
        Arc::new(crate::terminal_tools::TerminalReadTool::new(settings)),
        Arc::new(crate::terminal_tools::TerminalSignalTool::new()),
        Arc::new(crate::terminal_tools::TerminalCloseTool::new()),
        Arc::new(crate::terminal_tools::TerminalListTool::new()),
        Arc::new(crate::job_tools::JobListTool::new()),
        Arc::new(crate::job_tools::JobOutputTool::new(settings)),
        Arc::new(crate::job_tools::JobKillTool::new()),
        Arc::new(crate::job_tools::SubagentTool::new(settings)),
        Arc::new(crate::lsp_tool::LspTool::new(settings)),
    ]
}

impl Catalog {
    /// The tools of `preset`, configured by `settings`.
    pub fn new(preset: Preset, settings: &Settings) -> Self {
        let tools = all_tools(settings)
            .into_iter()
            .filter(|t| t.spec().presets.contains(&preset))
            .collect();
        Self { preset, tools }
    }

    /// The preset this catalog serves.
    pub fn preset(&self) -> Preset {
        self.preset
    }

    /// The tools, in order.
    pub fn tools(&self) -> &[Arc<dyn Tool>] {
        &self.tools
    }

    /// The tool names, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.tools.iter().map(|t| t.spec().name).collect()
    }

    /// Looks a tool up by name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.iter().find(|t| t.spec().name == name)
    }
}

/// The catalog of `preset` as JSON: `{preset, tools: [{name, description,
/// presets, error_codes, input_schema}]}`.
pub fn catalog_json(preset: Preset) -> Value {
    let catalog = Catalog::new(preset, &Settings::default());
    let tools: Vec<Value> = catalog
        .tools()
        .iter()
        .map(|t| {
            let s = t.spec();
            json!({
                "name": s.name,
                "description": s.description,
                "presets": s.presets.iter().map(|p| p.name()).collect::<Vec<_>>(),
                "error_codes": s.error_codes,
                "input_schema": s.input_schema,
                "annotations": s.effect.hints().to_json(),
            })
        })
        .collect();
    json!({ "preset": preset.name(), "tools": tools })
}

/// The whole catalog (every tool of every preset) as Markdown: the text of
/// `docs/tool-catalog.md`.
pub fn catalog_markdown() -> String {
    render_markdown(None)
}

/// The tools of one preset as Markdown.
pub fn catalog_markdown_for(preset: Preset) -> String {
    render_markdown(Some(preset))
}

/// What every process a tool starts sees, for the rendered catalog.
const CHILD_ENVIRONMENT: &str = "
Every process a tool starts (a `bash` command, a terminal and what is typed into it, a \
subagent, a language server) runs in the sandbox of `[sandbox]` (default: writes only in the \
session's workspace, with `.git` read-only, the temp dir and package caches; credential stores \
such as `~/.ssh` unreadable) and starts from the environment the MCP client gave `dsh mcp`, \
filtered by `[env]` (default: every variable but those whose names contain `KEY`, `SECRET`, \
`TOKEN` or `PASSWORD`), then the tool's own variables on top.
";

/// What each client shows its model of a result, and what dsh sends it,
/// for the rendered catalog (measured with each client run headless
/// against a scripted model: `tests/e2e/test_real_clients.py`).
const MODEL_READS: &str = "
## What the model reads

Every result is one text block rendered for the model and, for programs, `structuredContent` \
with the fields each tool names. Which of the two a model reads is its client's choice:

| client | protocol | its model is shown | dsh sends |
|---|---|---|---|
| Claude Code | 2026-07-28 (`server/discover`, `_meta` on every request) | `structuredContent` as JSON when a result has it, else the text | the text alone |
| Codex | 2025-06-18 | the same, after `Wall time: … Output:`, cut in the middle to about 12 KB | the text alone, cut by dsh to 10,000 bytes so its own `[… N bytes omitted …]` marker is read |
| Gemini CLI | 2025-06-18 | the text, inside `<untrusted_context>`; on an error the whole raw result, escaped | the text alone |
| any other client (the MCP SDKs) | any | its own choice | the text and `structuredContent` |

So in each of the three the model reads every sentence dsh writes for it (the exit and timing \
line, the sandbox line, how to read a job, the resume sentence, the omission marker), at the \
size of dsh's own text. Each tool states its annotations below: Codex runs only the read-only \
ones without asking in its default mode, and Claude Code runs those in plan mode and in \
parallel. Claude Code lists `bash` from the first turn (`_meta[\"anthropic/alwaysLoad\"]`) and \
the others behind its tool search. Gemini CLI adds a `wait_for_previous` argument to every \
tool; dsh accepts it and ignores it.
";

fn render_markdown(only: Option<Preset>) -> String {
    let shown = Catalog::new(only.unwrap_or(Preset::Full), &Settings::default());
    let mut out = String::new();
    match only {
        None => out.push_str(
            "# Tool catalog\n\n<!-- Generated by `cargo xtask codegen` from the code; do not edit. -->\n\n",
        ),
        Some(p) => {
            let _ = writeln!(out, "# Tool catalog: preset `{}`\n", p.name());
        }
    }
    for preset in Preset::ALL {
        if only.is_some_and(|p| p != preset) {
            continue;
        }
        let c = Catalog::new(preset, &Settings::default());
        let bytes: usize = c
            .tools()
            .iter()
            .map(|t| {
                let s = t.spec();
                s.name.len()
                    + s.description.len()
                    + serde_json::to_string(&s.input_schema).map_or(0, |j| j.len())
            })
            .sum();
        let _ = writeln!(
            out,
            "* `{}`: {} ({} bytes of names, descriptions and schemas)",
            preset.name(),
            c.names()
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", "),
            bytes
        );
    }
    out.push_str(CHILD_ENVIRONMENT);
    if only.is_none() {
        out.push_str(MODEL_READS);
    }
    for tool in shown.tools() {
        let s = tool.spec();
        let schema = serde_json::to_string_pretty(&s.input_schema).unwrap_or_default();
        let list = |items: Vec<String>| items.join(", ");
        let _ = write!(
            out,
            "\n## `{}`\n\nPresets: {}. Annotations: {}.\n\n{}\n\nErrors: {}.\n\n```json\n{}\n```\n",
            s.name,
            list(
                s.presets
                    .iter()
                    .map(|p| format!("`{}`", p.name()))
                    .collect()
            ),
            s.effect.hints().describe(),
            s.description,
            list(s.error_codes.iter().map(|c| format!("`{c}`")).collect()),
            schema
        );
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// An enum argument.
    #[derive(serde::Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Mode {
        /// The first.
        Fast,
        /// The second.
        Slow,
    }

    /// The arguments.
    #[derive(serde::Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Args {
        /// Required.
        name: String,
        /// A mode.
        mode: Option<Mode>,
        /// Which one.
        pick: Mode,
        /// Rows.
        rows: Option<u16>,
        /// Milliseconds.
        wait_ms: Option<u64>,
        /// A list.
        argv: Option<Vec<String>>,
        /// A map.
        env: Option<std::collections::BTreeMap<String, String>>,
    }

    #[test]
    fn schemas_are_lean_and_describe_the_same_arguments() {
        let schema = Value::Object(input_schema::<Args>());
        let want = json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["name", "pick"],
            "properties": {
                "name": { "description": "Required.", "type": "string" },
                "mode": { "description": "A mode.", "type": "string", "enum": ["fast", "slow"] },
                "pick": { "description": "Which one.", "type": "string", "enum": ["fast", "slow"] },
                "rows": { "description": "Rows.", "type": "integer" },
                "wait_ms": { "description": "Milliseconds.", "type": "integer" },
                "argv": { "description": "A list.", "type": "array", "items": { "type": "string" } },
                "env": {
                    "description": "A map.",
                    "type": "object",
                    "additionalProperties": { "type": "string" },
                },
            },
        });
        assert_eq!(schema, want);
    }

    #[test]
    fn every_tool_schema_is_lean() {
        let catalog = Catalog::new(Preset::Full, &Settings::default());
        for tool in catalog.tools() {
            let s = tool.spec();
            let json = serde_json::to_string(&s.input_schema).unwrap();
            for noise in [
                "$schema",
                "$defs",
                "$ref",
                "\"title\"",
                "\"format\"",
                "\"null\"",
                "oneOf",
                "anyOf",
            ] {
                assert!(!json.contains(noise), "{}: {noise} in {json}", s.name);
            }
            assert_eq!(s.input_schema["type"], "object", "{}", s.name);
        }
    }
}
