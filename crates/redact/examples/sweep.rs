//! Redact every file under some directories and print each redaction with
//! its kind and the text before it (the secret itself cut to six
//! characters): a wider false-positive sweep than the test's corpus, for
//! judging a rule update by reading what it finds.
//!
//! ```text
//! cargo run --release -p redact --example sweep -- /usr/share/doc /usr/lib/node_modules
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

fn files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.is_symlink() {
            continue;
        }
        if path.is_dir() {
            files(&path, found);
        } else if path.extension().is_none_or(|e| e != "gz") {
            found.push(path);
        }
    }
}

fn main() {
    let redactor = redact::Redactor::builtin().unwrap();
    for dir in std::env::args().skip(1) {
        let mut found = Vec::new();
        files(Path::new(&dir), &mut found);
        let (mut total, mut hits) = (0usize, 0usize);
        for path in found {
            let Ok(bytes) = std::fs::read(&path) else {
                continue;
            };
            total += bytes.len();
            let mut stream = redactor.stream();
            let mut pieces = stream.push(&bytes).pieces;
            pieces.extend(stream.finish().pieces);
            for piece in pieces.iter().filter(|p| p.redacted.is_some()) {
                hits += 1;
                let (s, e) = (piece.raw.start as usize, piece.raw.end as usize);
                println!(
                    "  {} {}: …{:?}[{:?}…]",
                    path.display(),
                    piece.redacted.as_deref().unwrap_or(""),
                    String::from_utf8_lossy(&bytes[s.saturating_sub(30)..s]),
                    String::from_utf8_lossy(&bytes[s..(s + 6).min(e)]),
                );
            }
        }
        println!("{dir}: {hits} redactions in {:.1} MB", total as f64 / 1e6);
    }
}
