//! The per-root choice of the TypeScript/JavaScript preset
//! (`per_root = "typescript-version"`), whose server depends on the
//! project.
//!
//! TypeScript 7 (the native compiler) has a language server of its own,
//! `tsc --lsp --stdio`, and no `tsserver.js`: typescript-language-server
//! cannot use it ("Could not find a valid TypeScript installation").
//! TypeScript 5 and 6 are served by typescript-language-server, which
//! finds the project's tsserver (or a global one) itself. So the preset
//! chooses per project root ([`crate::PerRoot`]):
//!
//! 1. the project's own TypeScript (`node_modules/typescript/package.json`
//!    in the root or a directory above it): 7 or later → its native server,
//!    earlier → typescript-language-server;
//! 2. else a global `tsc` (on `PATH`) of version 7 or later → its native
//!    server;
//! 3. else typescript-language-server (with a global TypeScript 5/6).
//!
//! The native server is the binary of the platform package the
//! `typescript` package depends on (`@typescript/typescript-linux-x64`,
//! resolved as Node resolves it from the package), else the package's
//! `bin/tsc` launcher. It answers a request only once the project of the
//! file is loaded (a request sent right after `didOpen` on a project of
//! 3000 modules waited for the load and listed every reference); while a
//! load takes longer than a moment it shows a `$/progress` "Loading". So
//! it is ready when no progress is active ([`ReadinessSignal::Progress`]).

use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use serde_json::Value;

use crate::config::{PerRoot, ReadinessSignal, ServerConfig, is_executable};

/// The first TypeScript major version with a language server of its own.
const NATIVE_MAJOR: u64 = 7;

/// The name of the native server in messages.
const NATIVE_NAME: &str = "tsc --lsp";

/// The name of the server for TypeScript 5/6.
const LANGUAGE_SERVER: &str = "typescript-language-server";

/// The choice, one hook for every copy of the preset (so copies compare
/// equal).
static PER_ROOT: LazyLock<PerRoot> = LazyLock::new(|| PerRoot::new(choose));

/// The hook of `per_root = "typescript-version"` (the preset's
/// `[server.typescript]` in `presets.toml` holds typescript-language-server's
/// settings: routing, readiness, install hint).
pub(crate) fn per_root() -> PerRoot {
    PER_ROOT.clone()
}

/// A `typescript` package found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Package {
    /// Its directory, every symlink resolved.
    dir: PathBuf,
    /// Its major version.
    major: u64,
    /// Its `package.json` name: `typescript`, or the platform package
    /// (`@typescript/typescript-linux-x64`) whose `lib/tsc` is the binary.
    name: String,
}

/// The server for the project at `root` (see the module's doc).
fn choose(config: &ServerConfig, root: &Path) -> ServerConfig {
    match project_typescript(root) {
        Some(package) if package.major >= NATIVE_MAJOR => native(config, &package, None),
        Some(_) => language_server(config),
        None => match global_typescript(config) {
            Some((package, tsc)) if package.major >= NATIVE_MAJOR => {
                native(config, &package, Some(tsc))
            }
            Some(_) | None => language_server(config),
        },
    }
}

fn language_server(config: &ServerConfig) -> ServerConfig {
    ServerConfig {
        name: LANGUAGE_SERVER.into(),
        ..config.clone()
    }
}

/// The native server of `package`; `found` is the `tsc` on `PATH` it was
/// found through, used when the package resolves to no binary.
fn native(config: &ServerConfig, package: &Package, found: Option<PathBuf>) -> ServerConfig {
    let command = native_binary(package)
        .or(found)
        .unwrap_or_else(|| package.dir.join("bin").join("tsc"));
    ServerConfig {
        name: NATIVE_NAME.into(),
        command: command.display().to_string(),
        args: vec!["--lsp".into(), "--stdio".into()],
        readiness: ReadinessSignal::Progress,
        follows_watched_files: true,
        ..config.clone()
    }
}

/// The project's own TypeScript: `node_modules/typescript` in `root` or
/// the nearest directory above it that has one.
fn project_typescript(root: &Path) -> Option<Package> {
    root.ancestors()
        .map(|dir| dir.join("node_modules").join("typescript"))
        .find(|dir| dir.join("package.json").is_file())
        .and_then(|dir| package_at(&dir))
}

/// A global `tsc` on the config's `PATH` and the TypeScript package it
/// belongs to (found from its real path).
fn global_typescript(config: &ServerConfig) -> Option<(Package, PathBuf)> {
    let tsc = config.find_on_path("tsc")?;
    let real = tsc.canonicalize().ok()?;
    let package = real
        .ancestors()
        .skip(1)
        .find(|dir| dir.join("package.json").is_file())
        .and_then(package_at)?;
    Some((package, tsc))
}

/// The largest `package.json` read to tell a TypeScript package.
const MAX_PACKAGE_JSON_BYTES: u64 = 1 << 20;

/// The TypeScript package in `dir`, if its `package.json` (read by the
/// queried file's rules: a regular file, at most a size cap, never
/// blocking) says so.
fn package_at(dir: &Path) -> Option<Package> {
    let text = crate::text::read_capped(
        &dir.join("package.json"),
        MAX_PACKAGE_JSON_BYTES,
        &lsp_seam::ReadAccess::all(),
    )
    .ok()?;
    let json: Value = serde_json::from_str(&text).ok()?;
    let name = json.get("name")?.as_str()?.to_owned();
    if name != "typescript" && !name.starts_with("@typescript/typescript-") {
        return None;
    }
    let major = json
        .get("version")?
        .as_str()?
        .split('.')
        .next()?
        .parse()
        .ok()?;
    Some(Package {
        dir: dir.canonicalize().ok()?,
        major,
        name,
    })
}

/// The native binary of `package`: its own `lib/tsc` when it is the
/// platform package, else the platform package's, looked up as Node
/// resolves a dependency (`node_modules` of the package's directory and of
/// each directory above it).
fn native_binary(package: &Package) -> Option<PathBuf> {
    if package.name != "typescript" {
        let own = package.dir.join("lib").join("tsc");
        return is_executable(&own).then_some(own);
    }
    let platform = format!("typescript-{}-{}", node_platform()?, node_arch()?);
    package
        .dir
        .ancestors()
        .map(|dir| {
            dir.join("node_modules")
                .join("@typescript")
                .join(&platform)
                .join("lib")
                .join("tsc")
        })
        .find(|exe| is_executable(exe))
}

/// Node's `process.platform` for this build.
fn node_platform() -> Option<&'static str> {
    Some(match std::env::consts::OS {
        "linux" => "linux",
        "macos" => "darwin",
        "freebsd" => "freebsd",
        "netbsd" => "netbsd",
        "openbsd" => "openbsd",
        "aix" => "aix",
        "solaris" | "illumos" => "sunos",
        _ => return None,
    })
}

/// Node's `process.arch` for this build.
fn node_arch() -> Option<&'static str> {
    Some(match std::env::consts::ARCH {
        "x86_64" => "x64",
        "aarch64" => "arm64",
        "arm" => "arm",
        "powerpc64" => "ppc64",
        "riscv64" => "riscv64",
        "s390x" => "s390x",
        "loongarch64" => "loong64",
        "mips64" => "mips64el",
        _ => return None,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn preset() -> ServerConfig {
        ServerConfig::preset("typescript").unwrap()
    }

    fn write(path: &Path, text: &str) {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap();
        }
        std::fs::write(path, text).unwrap();
    }

    fn executable(path: &Path) {
        use std::os::unix::fs::PermissionsExt;
        write(path, "#!/bin/sh\n");
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    fn typescript(dir: &Path, version: &str) {
        write(
            &dir.join("package.json"),
            &format!(r#"{{ "name": "typescript", "version": "{version}" }}"#),
        );
        executable(&dir.join("bin").join("tsc"));
    }

    /// A config whose `PATH` is `path` only (no global `tsc` unless put there).
    fn config_with_path(path: &Path) -> ServerConfig {
        let mut config = preset();
        config.env.insert("PATH".into(), path.display().to_string());
        config
    }

    #[test]
    fn the_projects_typescript_decides_by_its_major_version() {
        let tmp = tempfile::tempdir().unwrap();
        let empty = tmp.path().join("empty-path");
        std::fs::create_dir_all(&empty).unwrap();
        let config = config_with_path(&empty);
        assert_eq!(preset(), preset());

        let old = tmp.path().join("old");
        typescript(&old.join("node_modules").join("typescript"), "5.9.3");
        let chosen = config.for_root(&old);
        assert_eq!(chosen.name, LANGUAGE_SERVER);
        assert_eq!(chosen.command, LANGUAGE_SERVER);
        assert_eq!(chosen.per_root, None);

        // Found from a directory above the root (a hoisted install); the
        // platform package next to it is the binary.
        let new = tmp.path().join("new");
        let modules = new.join("node_modules");
        typescript(&modules.join("typescript"), "7.0.2");
        let platform = format!(
            "typescript-{}-{}",
            node_platform().unwrap(),
            node_arch().unwrap()
        );
        let exe = modules
            .join("@typescript")
            .join(platform)
            .join("lib")
            .join("tsc");
        executable(&exe);
        let root = new.join("packages").join("app");
        std::fs::create_dir_all(&root).unwrap();
        let chosen = config.for_root(&root);
        assert_eq!(chosen.name, NATIVE_NAME);
        assert_eq!(PathBuf::from(&chosen.command), exe.canonicalize().unwrap());
        assert_eq!(chosen.args, ["--lsp", "--stdio"]);
        assert_eq!(chosen.readiness, ReadinessSignal::Progress);
        assert_eq!(chosen.extensions, config.extensions);

        // Without the platform package: the package's launcher, which
        // says what is missing when it runs.
        std::fs::remove_file(&exe).unwrap();
        let chosen = config.for_root(&root);
        assert_eq!(
            PathBuf::from(&chosen.command),
            modules
                .join("typescript")
                .canonicalize()
                .unwrap()
                .join("bin")
                .join("tsc")
        );
    }

    #[test]
    fn without_a_project_typescript_a_global_tsc_of_7_is_used() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        std::fs::create_dir_all(&project).unwrap();
        let bin = tmp.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let config = config_with_path(&bin);

        // No tsc at all: typescript-language-server.
        assert_eq!(config.for_root(&project).name, LANGUAGE_SERVER);

        // A global TypeScript 5: typescript-language-server.
        let global = tmp.path().join("lib").join("node_modules");
        typescript(&global.join("typescript"), "5.9.3");
        std::os::unix::fs::symlink(
            global.join("typescript").join("bin").join("tsc"),
            bin.join("tsc"),
        )
        .unwrap();
        assert_eq!(config.for_root(&project).name, LANGUAGE_SERVER);

        // A global TypeScript 7: its server (through the launcher on PATH
        // when no platform package is there).
        typescript(&global.join("typescript"), "7.0.2");
        let chosen = config.for_root(&project);
        assert_eq!(chosen.name, NATIVE_NAME);
        assert_eq!(PathBuf::from(&chosen.command), bin.join("tsc"));

        // A project's own TypeScript 5 wins over the global 7.
        typescript(&project.join("node_modules").join("typescript"), "5.4.0");
        assert_eq!(config.for_root(&project).name, LANGUAGE_SERVER);
    }
}
