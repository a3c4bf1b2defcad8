//! Servers as data: [`ServerSpec`], the schema of one server's table, read
//! from a user's `[lsp.servers.NAME]` and from the built-in presets
//! (`presets.toml`, compiled in), which use the same schema.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::Value;

use crate::config::{
    DiagnosisProgress, LanguagePreset, PerRoot, ReadinessSignal, RootStrategy, ServerConfig,
};

/// The built-in languages, as data.
const PRESETS: &str = include_str!("../presets.toml");

/// One server's table: a user's `[lsp.servers.NAME]`, or a built-in
/// preset's `[server.NAME]`. Only `command` and `extensions` are required;
/// every other key has the default of a plain server (root by the nearest
/// marker, ready once no progress is active).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSpec {
    /// The server's executable (a name looked up on `PATH`, or a path).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// File extension (`.py`) → LSP language id (`python`).
    pub extensions: BTreeMap<String, String>,
    /// Files whose presence marks a project root (nearest wins).
    #[serde(default)]
    pub root_markers: Vec<String>,
    /// `initializationOptions` sent at start.
    #[serde(default)]
    pub initialization_options: Option<Value>,
    /// Settings served to `workspace/configuration`.
    #[serde(default)]
    pub settings: Option<Value>,
    /// How the root is found from a file: `"nearest-marker"` (the
    /// default) or `"cargo-workspace"`.
    #[serde(default)]
    pub root_strategy: RootStrategy,
    /// A file with no root marker above it has no project (`no_project`),
    /// rather than its own directory as the root.
    #[serde(default)]
    pub require_root: bool,
    /// What proves the server has loaded the project: `"progress"` (the
    /// default), `"server-status"`, `{ progress-ended = "TITLE" }`, or
    /// `{ log-message = ["TEXT", ...] }` (see [`ReadinessSignal`]).
    #[serde(default)]
    pub readiness: ReadinessSignal,
    /// After re-sending a changed file, wait for its diagnostics before
    /// answering.
    #[serde(default)]
    pub wait_for_diagnostics: bool,
    /// The server outlines only open documents (see
    /// [`ServerConfig::outline_open_only`]).
    #[serde(default)]
    pub outline_open_only: bool,
    /// The server follows `workspace/didChangeWatchedFiles` for files it
    /// has not opened (see [`ServerConfig::follows_watched_files`]).
    #[serde(default)]
    pub follows_watched_files: bool,
    /// Added to `binary_not_found`: how to install the server.
    #[serde(default)]
    pub install_hint: Option<String>,
    /// Added to `no_project`: how to make a project the server knows.
    #[serde(default)]
    pub no_project_hint: Option<String>,
    /// Error messages that mean "nothing at this position".
    #[serde(default)]
    pub nothing_here_errors: Vec<String>,
    /// The `$/progress` titles of the server's per-document diagnosis
    /// (`{ prefix = "...", opened = "...", changed = "..." }`).
    #[serde(default)]
    pub diagnosis_progress: Option<DiagnosisProgress>,
    /// A choice of the server per project root made in code, by name:
    /// `"typescript-version"`.
    #[serde(default)]
    pub per_root: Option<PerRootRule>,
}

/// The per-root choices implemented in code, named in data
/// (`per_root = "..."`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PerRootRule {
    /// TypeScript 7's own server (`tsc --lsp --stdio`) for a project whose
    /// TypeScript (else the global `tsc`) is 7 or later, this
    /// configuration (typescript-language-server) otherwise.
    TypescriptVersion,
}

impl PerRootRule {
    /// The hook implementing the rule.
    fn hook(self) -> PerRoot {
        match self {
            PerRootRule::TypescriptVersion => crate::typescript::per_root(),
        }
    }
}

impl ServerSpec {
    /// The client's configuration of the server named `name` (extensions
    /// lowercased).
    pub fn to_config(&self, name: &str) -> ServerConfig {
        ServerConfig {
            name: name.to_owned(),
            command: self.command.clone(),
            args: self.args.clone(),
            env: self.env.clone(),
            extensions: self
                .extensions
                .iter()
                .map(|(ext, lang)| (ext.to_lowercase(), lang.clone()))
                .collect(),
            initialization_options: self.initialization_options.clone(),
            settings: self.settings.clone(),
            root_markers: self.root_markers.clone(),
            root_strategy: self.root_strategy,
            require_root: self.require_root,
            readiness: self.readiness.clone(),
            wait_for_diagnostics: self.wait_for_diagnostics,
            outline_open_only: self.outline_open_only,
            follows_watched_files: self.follows_watched_files,
            install_hint: self.install_hint.clone(),
            no_project_hint: self.no_project_hint.clone(),
            nothing_here_errors: self.nothing_here_errors.clone(),
            diagnosis_progress: self.diagnosis_progress.clone(),
            per_root: self.per_root.map(PerRootRule::hook),
        }
    }
}

/// A presets file: the languages, and their servers by name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetsFile {
    /// The languages, in order.
    language: Vec<LanguageSpec>,
    /// `[server.NAME]`: every server a language names.
    server: BTreeMap<String, ServerSpec>,
}

/// One `[[language]]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LanguageSpec {
    /// The language, for messages.
    name: String,
    /// Its servers' names, preferred first.
    servers: Vec<String>,
}

/// What is wrong with a presets file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PresetsError {
    /// Not TOML, or not the schema.
    #[error("presets: {0}")]
    Parse(String),
    /// A language names a server with no `[server.NAME]` table.
    #[error(
        "presets: language {language} names server `{server}`, which has no [server.{server}] table"
    )]
    UnknownServer {
        /// The language.
        language: String,
        /// The missing server.
        server: String,
    },
    /// A language lists no server.
    #[error("presets: language {0} lists no server")]
    NoServer(String),
    /// A language's servers claim different extensions.
    #[error("presets: the servers of language {0} claim different extensions")]
    MixedExtensions(String),
}

/// The languages of a presets file (the schema of `presets.toml`).
pub fn parse_presets(text: &str) -> Result<Vec<LanguagePreset>, PresetsError> {
    let file: PresetsFile = toml::from_str(text).map_err(|e| PresetsError::Parse(e.to_string()))?;
    file.language
        .into_iter()
        .map(|language| {
            let servers = language
                .servers
                .iter()
                .map(|name| {
                    file.server
                        .get(name)
                        .map(|spec| spec.to_config(name))
                        .ok_or_else(|| PresetsError::UnknownServer {
                            language: language.name.clone(),
                            server: name.clone(),
                        })
                })
                .collect::<Result<Vec<_>, _>>()?;
            let Some(first) = servers.first() else {
                return Err(PresetsError::NoServer(language.name));
            };
            if servers.iter().any(|s| s.extensions != first.extensions) {
                return Err(PresetsError::MixedExtensions(language.name));
            }
            Ok(LanguagePreset {
                language: language.name,
                servers,
            })
        })
        .collect()
}

/// The built-in presets, parsed once.
static BUILT_IN: LazyLock<Result<Vec<LanguagePreset>, PresetsError>> =
    LazyLock::new(|| parse_presets(PRESETS));

/// The built-in languages, each used for the extensions no configured
/// server claims: Rust, Python, TypeScript/JavaScript, C/C++, Go (from the
/// crate's `presets.toml`). A presets file that does not parse is a bug
/// its unit test catches; at run time it is logged and leaves no built-in
/// language.
pub fn language_presets() -> Vec<LanguagePreset> {
    match &*BUILT_IN {
        Ok(presets) => presets.clone(),
        Err(e) => {
            tracing::error!("{e}");
            Vec::new()
        }
    }
}

impl ServerConfig {
    /// The built-in server named `name` (`rust-analyzer`, `pyright`,
    /// `basedpyright`, `pylsp`, `typescript`, `clangd`, `gopls`).
    pub fn preset(name: &str) -> Option<ServerConfig> {
        language_presets()
            .into_iter()
            .flat_map(|language| language.servers)
            .find(|server| server.name == name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The presets as they were written in code before they became data:
    /// the data must give exactly these.
    mod was_code {
        use super::super::*;
        use serde_json::json;

        fn hint(install: &str, language: &str, ext: &str) -> String {
            format!(
                "Install: {install}; or set another server for {ext} in the config: [lsp.servers.NAME] command = \"...\", extensions = {{ \"{ext}\" = \"{language}\" }}"
            )
        }

        fn extensions(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(e, l)| ((*e).to_owned(), (*l).to_owned()))
                .collect()
        }

        fn rust_analyzer() -> ServerConfig {
            let options = json!({
                "workspace": { "symbol": { "search": { "kind": "all_symbols" } } },
                "checkOnSave": false,
                "cargo": { "targetDir": true },
            });
            ServerConfig {
                name: "rust-analyzer".into(),
                command: "rust-analyzer".into(),
                extensions: extensions(&[(".rs", "rust")]),
                settings: Some(json!({ "rust-analyzer": options.clone() })),
                initialization_options: Some(options),
                root_markers: vec!["Cargo.toml".into()],
                root_strategy: RootStrategy::CargoWorkspace,
                require_root: true,
                readiness: ReadinessSignal::ServerStatus,
                install_hint: Some(hint("`rustup component add rust-analyzer`", "rust", ".rs")),
                ..ServerConfig::default()
            }
        }

        fn python() -> Vec<ServerConfig> {
            let ext = extensions(&[(".py", "python"), (".pyi", "python")]);
            let markers: Vec<String> = [
                "pyproject.toml",
                "pyrightconfig.json",
                "setup.py",
                "setup.cfg",
                "requirements.txt",
                ".git",
            ]
            .map(String::from)
            .to_vec();
            let install = hint(
                "`npm install -g pyright` (or `pip install pyright`, `pip install basedpyright`, `pip install python-lsp-server`)",
                "python",
                ".py",
            );
            let pyright = |name: &str, command: &str| ServerConfig {
                name: name.into(),
                command: command.into(),
                args: vec!["--stdio".into()],
                extensions: ext.clone(),
                root_markers: markers.clone(),
                readiness: ReadinessSignal::LogMessage(vec![
                    "source file".into(),
                    "No source files found".into(),
                ]),
                install_hint: Some(install.clone()),
                ..ServerConfig::default()
            };
            vec![
                pyright("pyright", "pyright-langserver"),
                pyright("basedpyright", "basedpyright-langserver"),
                ServerConfig {
                    name: "pylsp".into(),
                    command: "pylsp".into(),
                    extensions: ext.clone(),
                    root_markers: markers.clone(),
                    install_hint: Some(install.clone()),
                    ..ServerConfig::default()
                },
            ]
        }

        fn typescript() -> ServerConfig {
            ServerConfig {
                name: "typescript".into(),
                command: "typescript-language-server".into(),
                args: vec!["--stdio".into()],
                extensions: extensions(&[
                    (".ts", "typescript"),
                    (".tsx", "typescriptreact"),
                    (".js", "javascript"),
                    (".jsx", "javascriptreact"),
                    (".mjs", "javascript"),
                    (".cjs", "javascript"),
                ]),
                root_markers: ["tsconfig.json", "jsconfig.json", "package.json", ".git"]
                    .map(String::from)
                    .to_vec(),
                readiness: ReadinessSignal::ProgressEnded("Initializing JS/TS".into()),
                install_hint: Some(hint(
                    "`npm install -g typescript` (TypeScript 7 and later have their own server, `tsc --lsp`), or for TypeScript 5/6 `npm install -g typescript-language-server typescript@5` (a project's own `typescript` is used first)",
                    "typescript",
                    ".ts",
                )),
                per_root: Some(crate::typescript::per_root()),
                ..ServerConfig::default()
            }
        }

        fn clangd() -> ServerConfig {
            ServerConfig {
                name: "clangd".into(),
                command: "clangd".into(),
                args: vec![
                    "--background-index".into(),
                    "--header-insertion=never".into(),
                ],
                extensions: extensions(&[
                    (".c", "c"),
                    (".h", "c"),
                    (".cc", "cpp"),
                    (".cpp", "cpp"),
                    (".cxx", "cpp"),
                    (".hpp", "cpp"),
                    (".hh", "cpp"),
                ]),
                root_markers: ["compile_commands.json", "build/compile_commands.json"]
                    .map(String::from)
                    .to_vec(),
                require_root: true,
                readiness: ReadinessSignal::ProgressEnded("indexing".into()),
                wait_for_diagnostics: true,
                outline_open_only: true,
                install_hint: Some(hint("`apt-get install clangd`", "cpp", ".cpp")),
                no_project_hint: Some(
                    "clangd answers across files only with a compile_commands.json in the project root (or its build/ directory): generate one with `cmake -DCMAKE_EXPORT_COMPILE_COMMANDS=ON` or `bear -- make`".into(),
                ),
                ..ServerConfig::default()
            }
        }

        fn gopls() -> ServerConfig {
            ServerConfig {
                name: "gopls".into(),
                command: "gopls".into(),
                extensions: extensions(&[(".go", "go")]),
                root_markers: ["go.work", "go.mod"].map(String::from).to_vec(),
                require_root: true,
                readiness: ReadinessSignal::ProgressEnded("Setting up workspace".into()),
                install_hint: Some(hint(
                    "`go install golang.org/x/tools/gopls@latest` (Debian: `apt-get install gopls golang-go`)",
                    "go",
                    ".go",
                )),
                no_project_hint: Some("gopls needs a go.mod (run `go mod init NAME`)".into()),
                nothing_here_errors: vec!["no identifier found".into(), "no object found".into()],
                initialization_options: Some(json!({ "verboseWorkDoneProgress": true })),
                diagnosis_progress: Some(DiagnosisProgress {
                    prefix: "diagnosing ".into(),
                    opened: "diagnosing opened files".into(),
                    changed: "diagnosing changed files".into(),
                }),
                ..ServerConfig::default()
            }
        }

        pub(super) fn language_presets() -> Vec<LanguagePreset> {
            let language = |name: &str, servers| LanguagePreset {
                language: name.into(),
                servers,
            };
            vec![
                language("Rust", vec![rust_analyzer()]),
                language("Python", python()),
                language("TypeScript/JavaScript", vec![typescript()]),
                language("C/C++", vec![clangd()]),
                language("Go", vec![gopls()]),
            ]
        }
    }

    #[test]
    fn the_embedded_presets_parse_into_what_the_code_presets_were() {
        let parsed = parse_presets(PRESETS).unwrap();
        pretty_assertions::assert_eq!(parsed, was_code::language_presets());
        assert_eq!(language_presets(), parsed);
        assert_eq!(
            ServerConfig::preset("gopls").map(|s| s.name),
            Some("gopls".into())
        );
        assert_eq!(ServerConfig::preset("nothing"), None);
    }

    #[test]
    fn a_user_table_is_read_with_the_same_schema() {
        let spec: ServerSpec = toml::from_str(
            r#"
command = "my-ls"
extensions = { ".FOO" = "foo" }
root_markers = ["foo.toml"]
root_strategy = "cargo-workspace"
require_root = true
readiness = { progress-ended = "Loading" }
settings = { foo = { level = 2 } }
install_hint = "get it"
"#,
        )
        .unwrap();
        let config = spec.to_config("mine");
        assert_eq!(config.name, "mine");
        assert_eq!(config.extensions[".foo"], "foo");
        assert_eq!(config.root_strategy, RootStrategy::CargoWorkspace);
        assert!(config.require_root);
        assert_eq!(
            config.readiness,
            ReadinessSignal::ProgressEnded("Loading".into())
        );
        assert_eq!(config.settings, Some(json!({ "foo": { "level": 2 } })));
        assert_eq!(config.per_root, None);

        let minimal: ServerSpec =
            toml::from_str("command = \"x\"\nextensions = { \".x\" = \"x\" }\n").unwrap();
        assert_eq!(
            minimal.to_config("x"),
            ServerConfig {
                name: "x".into(),
                command: "x".into(),
                extensions: [(".x".to_owned(), "x".to_owned())].into(),
                ..ServerConfig::default()
            }
        );
    }

    #[test]
    fn bad_tables_are_errors_that_say_what_is_wrong() {
        let err = |text: &str| toml::from_str::<ServerSpec>(text).unwrap_err().to_string();
        let base = "command = \"x\"\nextensions = { \".x\" = \"x\" }\n";
        assert!(err(&format!("{base}colour = 1\n")).contains("unknown field `colour`"));
        assert!(err(&format!("{base}readiness = \"soon\"\n")).contains("unknown variant `soon`"));
        assert!(
            err(&format!("{base}per_root = \"by-moon\"\n")).contains("unknown variant `by-moon`")
        );
        assert!(
            err(&format!("{base}root_strategy = \"nearest\"\n"))
                .contains("unknown variant `nearest`")
        );
        assert!(err("extensions = { \".x\" = \"x\" }\n").contains("missing field `command`"));

        let language = "[[language]]\nname = \"X\"\nservers = [\"x\"]\n";
        assert_eq!(
            parse_presets(language),
            Err(PresetsError::Parse(
                toml::from_str::<PresetsFile>(language)
                    .unwrap_err()
                    .to_string()
            ))
        );
        assert_eq!(
            parse_presets(&format!("{language}[server.y]\n{base}")),
            Err(PresetsError::UnknownServer {
                language: "X".into(),
                server: "x".into()
            })
        );
        assert_eq!(
            parse_presets(&format!(
                "[[language]]\nname = \"X\"\nservers = []\n[server.x]\n{base}"
            )),
            Err(PresetsError::NoServer("X".into()))
        );
        assert_eq!(
            parse_presets(&format!(
                "[[language]]\nname = \"X\"\nservers = [\"x\", \"y\"]\n[server.x]\n{base}[server.y]\ncommand = \"y\"\nextensions = {{ \".y\" = \"y\" }}\n"
            )),
            Err(PresetsError::MixedExtensions("X".into()))
        );
    }
}
