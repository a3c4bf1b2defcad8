//! A corpus of ordinary output, built from what is on the machine when the
//! test (or the benchmark, which includes this file) runs: nothing large
//! is committed. A source that is missing is skipped with the reason
//! printed.
//!
//! * `git log -p` of this repository (less `crates/redact`, whose rule file
//!   and generators quote the formats on purpose): commit hashes, diffs;
//! * minified and plain JavaScript shipped with npm;
//! * Debian's plain-text docs (`/usr/share/doc`): changelogs, licences;
//! * base64 of binaries from `/usr/bin`, as test fixtures embed them;
//! * JSON log lines full of UUIDs, hex ids and timestamps (generated);
//! * the build scripts' output of this workspace's `target/` (a cargo
//!   build log's most varied part).

use std::path::{Path, PathBuf};
use std::process::Command;

/// One source's text.
pub struct Source {
    /// What it is.
    pub name: &'static str,
    /// Its bytes.
    pub text: Vec<u8>,
}

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Files under `dir` (sorted, recursively) whose name `keep` accepts.
fn files(dir: &Path, keep: &dyn Fn(&Path) -> bool, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    entries.sort();
    for path in entries {
        if path.is_symlink() {
            continue;
        }
        if path.is_dir() {
            files(&path, keep, found);
        } else if keep(&path) {
            found.push(path);
        }
    }
}

/// Up to `budget` bytes of the files `keep` accepts under `dirs`.
fn read_files(dirs: &[&str], keep: &dyn Fn(&Path) -> bool, budget: usize) -> Vec<u8> {
    let mut found = Vec::new();
    for dir in dirs {
        files(Path::new(dir), keep, &mut found);
    }
    let mut text = Vec::new();
    for path in found {
        if text.len() >= budget {
            break;
        }
        if let Ok(bytes) = std::fs::read(&path) {
            text.extend_from_slice(&bytes[..bytes.len().min(budget - text.len())]);
            text.push(b'\n');
        }
    }
    text
}

fn git_log(budget: usize) -> Result<Vec<u8>, String> {
    let out = Command::new("git")
        .args(["log", "-p", "--stat", "--", ".", ":(exclude)crates/redact"])
        .current_dir(root())
        .output()
        .map_err(|e| format!("git: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "git log failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut text = out.stdout;
    text.truncate(budget);
    Ok(text)
}

/// SplitMix64, for the generated sources.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

fn uuid(rng: &mut Rng) -> String {
    let (a, b) = (rng.next(), rng.next());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

fn json_logs(budget: usize) -> Vec<u8> {
    let mut rng = Rng(42);
    let mut text = String::new();
    let levels = ["INFO", "DEBUG", "WARN", "ERROR"];
    while text.len() < budget {
        let n = rng.next();
        text.push_str(&format!(
            "{{\"ts\":\"2024-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z\",\"level\":\"{}\",\"request_id\":\"{}\",\"trace\":\"{:032x}\",\"span\":\"{:016x}\",\"user\":\"{}\",\"sha\":\"{:040x}\",\"msg\":\"handled GET /api/v1/items/{} in {} ms\"}}\n",
            1 + n % 12,
            1 + (n >> 8) % 28,
            (n >> 16) % 24,
            (n >> 24) % 60,
            (n >> 32) % 60,
            (n >> 40) % 1_000_000,
            levels[(n % 4) as usize],
            uuid(&mut rng),
            u128::from(rng.next()) << 64 | u128::from(rng.next()),
            rng.next(),
            uuid(&mut rng),
            u128::from(rng.next()) << 32 | u128::from(rng.next() >> 32),
            uuid(&mut rng),
            n % 900,
        ));
    }
    text.into_bytes()
}

/// Standard base64 in 76-column lines.
fn base64(bytes: &[u8]) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(bytes.len() * 4 / 3 + bytes.len() / 57 + 4);
    for (i, chunk) in bytes.chunks(3).enumerate() {
        if i > 0 && i % 19 == 0 {
            out.push(b'\n');
        }
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for j in 0..4 {
            if j <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * j)) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out.push(b'\n');
    out
}

fn base64_fixtures(budget: usize) -> Vec<u8> {
    let raw = read_files(&["/usr/bin"], &|p| p.is_file(), budget * 3 / 4);
    base64(&raw)
}

/// Every source, each cut to its budget; missing ones skipped with the
/// reason printed.
pub fn build() -> Vec<Source> {
    const MB: usize = 1 << 20;
    let mut sources = Vec::new();
    let mut add = |name: &'static str, text: Result<Vec<u8>, String>| match text {
        Ok(text) if !text.is_empty() => sources.push(Source { name, text }),
        Ok(_) => println!("skipped {name}: nothing found on this machine"),
        Err(why) => println!("skipped {name}: {why}"),
    };
    add("git log -p of this repository", git_log(6 * MB));
    add(
        "JavaScript shipped with npm (minified first)",
        Ok({
            let is_min = |p: &Path| p.to_string_lossy().ends_with(".min.js");
            let mut js = read_files(&["/usr/lib/node_modules", "/usr/share"], &is_min, 2 * MB);
            let plain = |p: &Path| p.extension().is_some_and(|e| e == "js");
            js.extend(read_files(
                &["/usr/lib/node_modules"],
                &plain,
                2 * MB - js.len().min(2 * MB),
            ));
            js
        }),
    );
    add(
        "/usr/share/doc plain text",
        Ok(read_files(
            &["/usr/share/doc"],
            &|p| p.extension().is_none_or(|e| e != "gz" && e != "html"),
            3 * MB,
        )),
    );
    add("base64 of /usr/bin binaries", Ok(base64_fixtures(2 * MB)));
    add("JSON logs with UUIDs and hex ids", Ok(json_logs(MB)));
    add(
        "build script output under target/",
        Ok(read_files(
            &[
                &root().join("target/debug/build").to_string_lossy(),
                &root().join("target/release/build").to_string_lossy(),
            ],
            &|p| {
                p.file_name()
                    .is_some_and(|n| n == "output" || n == "stderr")
            },
            MB,
        )),
    );
    sources
}
