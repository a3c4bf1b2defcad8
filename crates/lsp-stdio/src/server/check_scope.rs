//! Which cargo target a Rust file is compiled in, by the name `cargo
//! check` gives it in its artifacts (rust-analyzer reports each target it
//! compiled, not one it found fresh, as its check's progress, `NAME
//! (KINDS)`), so that a check that listed nothing for a file but errors
//! elsewhere is trusted only when it reached the file's target.
//!
//! A check can end without compiling a target: a build racing it removed
//! its output directory (`cargo clean`), or a crate the target depends on
//! failed. rust-analyzer then clears the file's earlier diagnostics and
//! lists none, which is no proof that the file has no problems. And a
//! check whose output directory was removed while it ran can end having
//! listed only the errors rustc reported before it failed to write (its
//! error for that has no place in a file, so rust-analyzer drops it):
//! the directory's identity before and after the check tells.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The directory rust-analyzer's check writes to, from its
/// `cargo.targetDir` option: `true` is `target/rust-analyzer` of the root,
/// a path is that directory, anything else the root's own `target`.
pub(crate) fn check_target_dir(initialization_options: Option<&Value>, root: &Path) -> PathBuf {
    match initialization_options.and_then(|o| o.pointer("/cargo/targetDir")) {
        Some(Value::Bool(true)) => crate::config::build_dir_within(root),
        Some(Value::String(dir)) => root.join(dir),
        _ => root.join("target"),
    }
}

/// Which directory `dir` is: its inode and birth time, so that one
/// removed and made again (by `cargo clean` and the next build) is told
/// from the same one.
pub(crate) fn dir_identity(dir: &Path) -> Option<(u64, Option<std::time::SystemTime>)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(dir).ok()?;
    Some((m.ino(), m.created().ok()))
}

/// A target name as compared: cargo writes a library's name with `_` for
/// the package name's `-`.
fn normalized(name: &str) -> String {
    name.replace('-', "_")
}

/// The values of `name = "…"` in the `[package]` and `[lib]` tables of a
/// manifest (a line-wise reading, enough for the name keys).
fn manifest_names(manifest: &str) -> (Option<String>, Option<String>) {
    let mut table = String::new();
    let (mut package, mut lib) = (None, None);
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            table = line
                .trim_matches(|c| c == '[' || c == ']')
                .trim()
                .to_owned();
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if key.trim() != "name" {
            continue;
        }
        let value = value.trim().trim_matches('"').to_owned();
        match table.as_str() {
            "package" => package = Some(value),
            "lib" => lib = Some(value),
            _ => {}
        }
    }
    (package, lib)
}

/// The directory of the package `file` belongs to (the nearest ancestor,
/// not above `root`, whose `Cargo.toml` has a `[package]` table) and the
/// names its target can have in a check's artifacts: `src/bin/X…`,
/// `tests/X…`, `examples/X…`, `benches/X…` are target `X`; anything else
/// in the package is its library or main binary (the package's name, or
/// the library's own).
pub(crate) fn file_targets(file: &Path, root: &Path) -> Option<(PathBuf, Vec<String>)> {
    let dir = file
        .ancestors()
        .skip(1)
        .take_while(|d| d.starts_with(root))
        .find(|d| {
            std::fs::read_to_string(d.join("Cargo.toml"))
                .is_ok_and(|m| m.lines().any(|l| l.trim() == "[package]"))
        })?;
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).ok()?;
    let (package, lib) = manifest_names(&manifest);
    let relative = file.strip_prefix(dir).ok()?;
    let parts: Vec<&str> = relative
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .collect();
    let stem = |part: &str| part.strip_suffix(".rs").unwrap_or(part).to_owned();
    let names = match parts.as_slice() {
        ["src", "bin", name, ..] | ["tests" | "examples" | "benches", name, ..] => {
            vec![normalized(&stem(name))]
        }
        ["build.rs"] => vec!["build_script_build".to_owned()],
        _ => package
            .iter()
            .chain(lib.iter())
            .map(|n| normalized(n))
            .collect(),
    };
    Some((dir.to_owned(), names))
}

/// Whether a check's progress reports (`NAME (KINDS)`, one per artifact)
/// name one of `targets`.
pub(crate) fn reported(reports: &[String], targets: &[String]) -> bool {
    reports.iter().any(|r| {
        let name = r.split_once(" (").map_or(r.as_str(), |(n, _)| n);
        targets.contains(&normalized(name.trim()))
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_in_its_library_or_the_target_its_directory_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let pkg = root.join("my-crate");
        std::fs::create_dir_all(pkg.join("src/bin")).unwrap();
        std::fs::write(
            pkg.join("Cargo.toml"),
            "[package]\nname = \"my-crate\"\nversion = \"0.1.0\"\n\n[dependencies]\nserde = { version = \"1\" }\n",
        )
        .unwrap();
        let targets = |f: &str| file_targets(&pkg.join(f), root);
        assert_eq!(
            targets("src/parse/mod.rs"),
            Some((pkg.clone(), vec!["my_crate".to_owned()]))
        );
        assert_eq!(
            targets("src/bin/tool.rs"),
            Some((pkg.clone(), vec!["tool".to_owned()]))
        );
        assert_eq!(
            targets("tests/it/main.rs"),
            Some((pkg.clone(), vec!["it".to_owned()]))
        );
        assert_eq!(file_targets(&root.join("loose.rs"), root), None);
    }

    #[test]
    fn a_report_names_its_target_before_the_kinds() {
        let reports = vec!["serde (lib)".to_owned(), "my-crate (lib, test)".to_owned()];
        assert!(reported(&reports, &["my_crate".to_owned()]));
        assert!(!reported(&reports, &["other".to_owned()]));
        assert!(!reported(&[], &["my_crate".to_owned()]));
    }
}
