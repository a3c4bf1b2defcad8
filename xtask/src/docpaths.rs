//! ARCHITECTURE.md names only paths that exist: every file or directory
//! it writes in backticks (`crates/mcp-host/src/lib.rs`, `settle.rs`,
//! `server/`) is found in the repository, whole or as the end of a path,
//! so a moved or renamed file cannot leave the map pointing at nothing.

use std::path::Path;

/// The backticked words of `text` that name a file or a directory: with an
/// extension of a source or document file, a trailing `/`, or starting at
/// a top-level directory of the repository.
pub fn named_paths(text: &str) -> Vec<&str> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find('`') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('`') else {
            break;
        };
        let word = &after[..end];
        rest = &after[end + 1..];
        let pathlike = !word.is_empty()
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
            && !word.starts_with('/');
        let is_file = [".rs", ".py", ".mjs", ".md", ".toml"]
            .iter()
            .any(|ext| word.ends_with(ext));
        let rooted = ["crates/", "tests/", "docs/", "xtask/", ".ci/"]
            .iter()
            .any(|top| word.starts_with(top));
        if pathlike && (is_file || word.ends_with('/') || rooted) {
            found.push(word);
        }
    }
    found
}

/// Every file and directory below `root`, relative and `/`-separated,
/// leaving out build output, installed packages and hidden directories.
pub fn repository_paths(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if matches!(name.as_str(), "target" | "node_modules" | "__pycache__")
                || (name.starts_with('.') && name != ".ci")
            {
                continue;
            }
            let path = entry.path();
            if let Ok(relative) = path.strip_prefix(root) {
                out.push(relative.to_string_lossy().into_owned());
            }
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path);
            }
        }
    }
    out
}

/// The words of `named` that no path of `paths` is or ends with.
pub fn missing<'a>(named: &[&'a str], paths: &[String]) -> Vec<&'a str> {
    named
        .iter()
        .copied()
        .filter(|word| {
            let word = word.trim_end_matches('/');
            !paths
                .iter()
                .any(|p| p == word || p.ends_with(&format!("/{word}")))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architecture_names_only_paths_that_exist() {
        let root = crate::root();
        let text = std::fs::read_to_string(root.join("ARCHITECTURE.md"))
            .unwrap_or_else(|e| panic!("cannot read ARCHITECTURE.md: {e}"));
        let named = named_paths(&text);
        assert!(named.len() > 20, "too few paths found: {named:?}");
        let gone = missing(&named, &repository_paths(&root));
        assert!(
            gone.is_empty(),
            "ARCHITECTURE.md names paths that do not exist: {gone:?}"
        );
    }

    #[test]
    fn a_path_that_is_gone_is_named() {
        let text =
            "see `crates/a/src/host.rs`, `mod.rs`, `server/`, `notifications/progress` and `Foo`";
        let named = named_paths(text);
        assert_eq!(named, ["crates/a/src/host.rs", "mod.rs", "server/"]);
        let paths = vec![
            "crates/a/src/host/mod.rs".to_owned(),
            "crates/b/src/server".to_owned(),
        ];
        assert_eq!(missing(&named, &paths), ["crates/a/src/host.rs"]);
    }
}
