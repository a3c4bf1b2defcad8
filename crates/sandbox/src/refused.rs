//! Naming what the sandbox refused, from a command's output.
//!
//! A confined command that hits the sandbox fails with `EACCES` ("Permission
//! denied"), `EROFS` ("Read-only file system") or `EPERM` ("Operation not
//! permitted"), and most programs print the path with the error:
//! `touch: cannot touch '/home/u/x': Permission denied`,
//! `PermissionError: [Errno 13] Permission denied: '/home/u/x'`,
//! `error: could not lock config file .git/config: Read-only file system`.
//! Such lines (and the two before them, where tools such as cargo print the
//! path on a line of its own) are searched for path-like words; a path is
//! reported only when the sandbox's own rules refuse it, so a file that is
//! simply not the user's is not blamed on the sandbox.

use std::fmt;
use std::path::{Component, Path, PathBuf};

use crate::prepare::AccessMap;

/// What was refused on a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedAccess {
    /// Reading: the path is in `deny_read`.
    Read,
    /// Writing: the path is outside the writable paths (or in `.git`).
    Write,
}

/// One path the sandbox refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedPath {
    /// The path, absolute and normalized.
    pub path: PathBuf,
    /// What was refused.
    pub access: RefusedAccess,
}

/// What a command's output shows the sandbox refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals {
    /// Refused paths, in order of appearance, without repeats (at most
    /// [`MAX_REFUSED_PATHS`]).
    pub paths: Vec<RefusedPath>,
    /// Whether a network operation was refused (only with the network off).
    pub network: bool,
}

/// How far back a path-less error line looks for the path.
const LOOKBACK_LINES: usize = 4;

/// The most paths one result names.
pub const MAX_REFUSED_PATHS: usize = 8;

impl Refusals {
    /// Whether nothing was found.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && !self.network
    }
}

/// `the sandbox refused: writing /h/x, reading /h/.ssh/id_rsa, network
/// access (the network is off)`.
impl fmt::Display for Refusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = self
            .paths
            .iter()
            .map(|p| {
                let verb = match p.access {
                    RefusedAccess::Read => "reading",
                    RefusedAccess::Write => "writing",
                };
                format!("{verb} {}", p.path.display())
            })
            .collect();
        if self.network {
            parts.push("network access (the network is off)".into());
        }
        write!(f, "the sandbox refused: {}", parts.join(", "))?;
        let repository = self.paths.iter().any(|p| {
            p.access == RefusedAccess::Write
                && p.path
                    .file_name()
                    .is_some_and(|n| crate::git_guard::names_a_repository(n.as_encoded_bytes()))
        });
        if repository {
            write!(
                f,
                " (a confined command may not make a git repository in the workspace: ask \
                 the person to run `git init` or `git clone` there, or to set \
                 `[sandbox] git_writable = true`)"
            )?;
        }
        Ok(())
    }
}

const DENIAL_MARKERS: &[&str] = &[
    "permission denied",
    "read-only file system",
    "operation not permitted",
    "eacces",
    "erofs",
    "eperm",
    "errno 13",
    "errno 30",
    "errno 1]",
];

const NETWORK_MARKERS: &[&str] = &[
    "connect",
    "socket",
    "network",
    "tcp",
    "udp",
    "http",
    "port",
    "resolve",
    "resolution",
    "host",
];

/// Failures that, with the network off, mean the network was refused.
const NETWORK_FAILURES: &[&str] = &[
    "network is unreachable",
    "connection refused",
    "no route to host",
    "name resolution",
    "could not resolve host",
    "name or service not known",
];

/// Whether a (lowercased) line reports a denial.
fn is_denial(lower: &str) -> bool {
    DENIAL_MARKERS.iter().any(|m| lower.contains(m))
}

/// Programs that only read the files they name.
const READERS: &[&str] = &[
    "cat",
    "head",
    "tail",
    "less",
    "more",
    "grep",
    "egrep",
    "fgrep",
    "rg",
    "wc",
    "od",
    "hexdump",
    "strings",
    "md5sum",
    "sha1sum",
    "sha256sum",
    "sha512sum",
    "cmp",
    "diff",
    "source",
];

/// Words that say a line is about reading.
const READ_WORDS: &[&str] = &[
    "for reading",
    "cannot open directory",
    "cannot access",
    "cannot read",
    "could not read",
    "failed to read",
    "unable to read",
    "error reading",
    "cannot stat",
];

/// Words that say a line is about writing (they win over the above).
const WRITE_WORDS: &[&str] = &[
    "read-only file system",
    "erofs",
    "errno 30",
    "writing",
    "write",
    "cannot touch",
    "cannot create",
    "cannot remove",
    "cannot move",
    "cannot overwrite",
    "cannot make",
    "cannot lock",
    "could not lock",
    "unable to create",
    "cannot set",
    "mkdir",
];

/// The words of a (lowercased) line that describe what failed: the line
/// without the paths it names, so that `/h/rewrite.md` says nothing of
/// writing.
fn prose(lower: &str) -> String {
    let mut rest = lower.to_owned();
    for path in path_words(lower, |_| false) {
        rest = rest.replace(&path, " ");
    }
    rest
}

/// Whether a (lowercased) line says the denied operation was a write.
fn says_write(lower: &str) -> bool {
    let prose = prose(lower);
    WRITE_WORDS.iter().any(|w| prose.contains(w))
}

/// Whether a (lowercased) line says the denied operation was a read (and
/// not a write): a path the sandbox lets be read was then refused by
/// something else (its owner's permissions), not by the sandbox.
fn says_read(lower: &str) -> bool {
    let prose = prose(lower);
    if WRITE_WORDS.iter().any(|w| prose.contains(w)) {
        return false;
    }
    let program = lower
        .split(':')
        .next()
        .and_then(|p| p.split_whitespace().next())
        .map(|p| p.rsplit('/').next().unwrap_or(p));
    program.is_some_and(|p| READERS.contains(&p)) || READ_WORDS.iter().any(|w| prose.contains(w))
}

/// Searches `output` for refusals by `access`.
pub(crate) fn find(
    output: &str,
    cwd: &Path,
    home: &Path,
    access: &AccessMap,
    network_off: bool,
) -> Refusals {
    let lines: Vec<&str> = output.lines().collect();
    let mut found = Refusals::default();
    for (i, line) in lines.iter().enumerate() {
        let lower = line.to_lowercase();
        let denial = is_denial(&lower);
        // What a network namespace of its own answers instead of a denial.
        let unreachable = NETWORK_FAILURES.iter().any(|m| lower.contains(m));
        if !(denial || network_off && unreachable) {
            continue;
        }
        let context = &lines[i.saturating_sub(2)..=i];
        if network_off
            && (unreachable
                || context.iter().any(|l| {
                    let l = l.to_lowercase();
                    NETWORK_MARKERS.iter().any(|m| l.contains(m))
                }))
        {
            found.network = true;
        }
        if !denial {
            continue;
        }
        // The paths on the line itself; if it names none (cargo's
        // "Caused by: Permission denied"), those of the nearest line before
        // it that names some, across blank and "Caused by:" lines.
        let (source, words) = std::iter::once(*line)
            .chain(
                lines[i.saturating_sub(LOOKBACK_LINES)..i]
                    .iter()
                    .rev()
                    .copied(),
            )
            .map(|l| {
                (
                    l,
                    path_words(l, |field| names_a_dir_entry(field, cwd, home)),
                )
            })
            .find(|(_, words)| !words.is_empty())
            .unwrap_or_default();
        // The error line decides; the line it took its path from speaks
        // only when the error line says neither.
        let read = !says_write(&lower) && (says_read(&lower) || says_read(&source.to_lowercase()));
        for word in words {
            let Some(path) = resolve(&word, cwd, home) else {
                continue;
            };
            let refused = if !access.can_read(&path) {
                RefusedAccess::Read
            } else if !read && !access.can_write(&path) {
                RefusedAccess::Write
            } else {
                continue;
            };
            if found.paths.len() < MAX_REFUSED_PATHS && !found.paths.iter().any(|p| p.path == path)
            {
                found.paths.push(RefusedPath {
                    path,
                    access: refused,
                });
            }
        }
    }
    found
}

/// The words of `line` that may be paths: quoted strings, unquoted
/// `: `-separated fields that look like paths with spaces and that
/// `whole` accepts (`bash: line 1: /a b/c: Permission denied`), and bare
/// words that start with `/`, `~/`, `./` or `../` or contain a `/`.
fn path_words(line: &str, whole: impl Fn(&str) -> bool) -> Vec<String> {
    let mut words = Vec::new();
    let quotes = [('\'', '\''), ('"', '"'), ('`', '`'), ('‘', '’'), ('“', '”')];
    let mut rest = line;
    let mut unquoted = String::new();
    while let Some((start, open)) = rest
        .char_indices()
        .find(|(_, c)| quotes.iter().any(|(o, _)| o == c))
    {
        unquoted.push_str(&rest[..start]);
        unquoted.push(' ');
        let close = quotes
            .iter()
            .find(|(o, _)| *o == open)
            .map_or(open, |(_, c)| *c);
        let after = &rest[start + open.len_utf8()..];
        match after.find(close) {
            Some(end) => {
                words.push(after[..end].to_owned());
                rest = &after[end + close.len_utf8()..];
            }
            None => {
                rest = after;
            }
        }
    }
    unquoted.push_str(rest);
    let mut bare = String::new();
    for field in unquoted.split(": ") {
        let candidate = field.trim().trim_end_matches([':', ',', ';', '.', '!']);
        if candidate.contains(char::is_whitespace) && looks_like_path(candidate) && whole(candidate)
        {
            words.push(candidate.to_owned());
        } else {
            bare.push_str(field);
        }
        bare.push(' ');
    }
    for word in bare.split_whitespace() {
        let word = word
            .trim_start_matches(['(', '[', '<'])
            .trim_end_matches([':', ',', ';', ')', ']', '>', '.', '!']);
        if looks_like_path(word) || (word.contains('/') && !word.contains("://")) {
            words.push(word.to_owned());
        }
    }
    words
}

/// Whether `word` starts as a path does: `/`, `~/`, `./` or `../`.
fn looks_like_path(word: &str) -> bool {
    word.starts_with('/')
        || word.starts_with("~/")
        || word.starts_with("./")
        || word.starts_with("../")
}

/// Whether `field`, read as a path, names an entry of a directory that
/// exists: an unquoted field with spaces is taken as one path only then
/// (a path in a directory whose name has spaces), never when it is prose
/// after a path.
fn names_a_dir_entry(field: &str, cwd: &Path, home: &Path) -> bool {
    resolve(field, cwd, home).is_some_and(|path| path.parent().is_some_and(Path::is_dir))
}

/// An absolute, normalized path for a word, or `None` if it does not look
/// like a path.
fn resolve(word: &str, cwd: &Path, home: &Path) -> Option<PathBuf> {
    let word = word.trim();
    if word.is_empty() || word.contains("://") || word.contains('\n') || word.len() > 4096 {
        return None;
    }
    let path = if word == "~" {
        home.to_path_buf()
    } else if let Some(rest) = word.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(word)
    };
    let has_slash = word.contains('/');
    // A bare name inside quotes ('x') is a file in cwd only if it has no
    // spaces: messages quote plenty of words that are not paths.
    if !has_slash && (word.contains(char::is_whitespace) || word.starts_with('-')) {
        return None;
    }
    Some(normalize(&path, cwd))
}

/// `path` made absolute against `cwd`, with `.` and `..` resolved
/// lexically, and symlinks in its existing part resolved.
pub(crate) fn normalize(path: &Path, cwd: &Path) -> PathBuf {
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else if cwd.is_absolute() {
        cwd.join(path)
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(cwd)
            .join(path)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(c) => out.push(c),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    // Follow symlinks where the path exists, as the kernel did.
    for ancestor in out.ancestors() {
        if let Ok(real) = ancestor.canonicalize() {
            let rest = out.strip_prefix(ancestor).unwrap_or(Path::new(""));
            return if rest.as_os_str().is_empty() {
                real
            } else {
                real.join(rest)
            };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn map() -> AccessMap {
        AccessMap {
            write_roots: vec!["/w".into(), "/tmp".into()],
            write_holes: vec![],
            read_only: vec!["/w/.git".into()],
            read_holes: vec!["/h/.ssh".into()],
            devices: vec!["/dev/null".into()],
            no_repositories: vec![],
        }
    }

    fn refused(output: &str, network_off: bool) -> Refusals {
        find(
            output,
            Path::new("/w"),
            Path::new("/h"),
            &map(),
            network_off,
        )
    }

    fn paths(r: &Refusals) -> Vec<(String, RefusedAccess)> {
        r.paths
            .iter()
            .map(|p| (p.path.display().to_string(), p.access))
            .collect()
    }

    #[test]
    fn names_paths_in_common_error_formats() {
        let out = "\
touch: cannot touch '/h/x': Permission denied
bash: line 1: /h/y: Permission denied
mkdir: cannot create directory ‘/h/z’: Permission denied
PermissionError: [Errno 13] Permission denied: '/h/py'
error: could not lock config file .git/config: Read-only file system
cat: /h/.ssh/id_rsa: Permission denied
Error: EACCES: permission denied, open '/h/node'
";
        let r = refused(out, false);
        assert_eq!(
            paths(&r),
            [
                ("/h/x".to_owned(), RefusedAccess::Write),
                ("/h/y".to_owned(), RefusedAccess::Write),
                ("/h/z".to_owned(), RefusedAccess::Write),
                ("/h/py".to_owned(), RefusedAccess::Write),
                ("/w/.git/config".to_owned(), RefusedAccess::Write),
                ("/h/.ssh/id_rsa".to_owned(), RefusedAccess::Read),
                ("/h/node".to_owned(), RefusedAccess::Write),
            ]
        );
        assert!(!r.network);
    }

    #[test]
    fn allowed_paths_and_plain_words_are_not_blamed() {
        let out = "\
touch: cannot touch '/w/file': Permission denied
sh: 1: cannot create /dev/null: Permission denied
warning: 'some words': Operation not permitted
the build succeeded
";
        assert_eq!(refused(out, false), Refusals::default());
    }

    #[test]
    fn a_refused_read_of_a_readable_path_is_not_the_sandboxs() {
        // The sandbox lets /etc and /h be read: these were refused by the
        // files' owners, and nothing was written.
        let out = "\
cat: /etc/shadow: Permission denied
head: cannot open '/h/private' for reading: Permission denied
ls: cannot open directory '/h/locked': Permission denied
/usr/bin/grep: /h/g: Permission denied
";
        assert_eq!(refused(out, false), Refusals::default());
        // A reader that writes, and a write named by its error: still named.
        let out = "\
sort: cannot create temporary file in '/h/t': Permission denied
cat: write error: Permission denied
tee: /h/out: Permission denied
bash: /h/both: cannot open for reading and writing: Permission denied
";
        assert_eq!(
            paths(&refused(out, false)),
            [
                ("/h/t".to_owned(), RefusedAccess::Write),
                ("/h/out".to_owned(), RefusedAccess::Write),
                ("/h/both".to_owned(), RefusedAccess::Write),
            ]
        );
        // What a path is called says nothing of the operation.
        assert_eq!(
            refused("cat: /h/rewrite.md: Permission denied", false),
            Refusals::default()
        );
    }

    #[test]
    fn the_path_may_sit_on_a_line_before_the_error() {
        let out = "\
error: failed to write /h/Cargo.lock

Caused by:
  failed to open: /h/Cargo.lock

Caused by:
  Permission denied (os error 13)
";
        assert_eq!(
            paths(&refused(out, false)),
            [("/h/Cargo.lock".to_owned(), RefusedAccess::Write)]
        );
    }

    #[test]
    fn a_line_that_names_its_path_does_not_look_back() {
        let out = "\
?? /h/unrelated/
fatal: Unable to create '/w/.git/index.lock': Read-only file system
";
        assert_eq!(
            paths(&refused(out, false)),
            [("/w/.git/index.lock".to_owned(), RefusedAccess::Write)]
        );
    }

    #[test]
    fn network_refusals_count_only_with_the_network_off() {
        let out = "\
  File \"<string>\", line 1, in <module>
    s.connect(('127.0.0.1', 8080))
PermissionError: [Errno 13] Permission denied
";
        assert!(refused(out, true).network);
        assert!(!refused(out, false).network);
        assert!(refused("curl: (6) Could not resolve host: example.com", true).network);
        assert!(refused("bash: connect: Network is unreachable", true).network);
        assert!(!refused("bash: connect: Connection refused", false).network);
        assert_eq!(
            refused(out, true).to_string(),
            "the sandbox refused: network access (the network is off)"
        );
    }

    #[test]
    fn an_unquoted_path_with_spaces_is_named_whole_when_its_directory_exists() {
        let dir = tempfile::Builder::new()
            .prefix("a dir with spaces ")
            .tempdir()
            .unwrap();
        let real = dir.path().canonicalize().unwrap();
        let access = AccessMap {
            write_roots: vec!["/w".into()],
            ..map()
        };
        let out = format!("bash: line 1: {}/x: Permission denied\n", real.display());
        let r = find(&out, Path::new("/w"), Path::new("/h"), &access, false);
        assert_eq!(
            paths(&r),
            [(format!("{}/x", real.display()), RefusedAccess::Write)]
        );
        // Prose after a path is not glued to it.
        let r = refused(
            "bash: /h/x is not writable by you: Permission denied",
            false,
        );
        assert_eq!(paths(&r), [("/h/x".to_owned(), RefusedAccess::Write)]);
    }

    #[test]
    fn paths_are_normalized() {
        assert_eq!(
            normalize(Path::new("a/../b/./c"), Path::new("/nonexistent-root-x")),
            PathBuf::from("/nonexistent-root-x/b/c")
        );
        let r = refused(
            "rm: cannot remove '~/.ssh/known_hosts': Permission denied",
            false,
        );
        assert_eq!(
            paths(&r),
            [("/h/.ssh/known_hosts".to_owned(), RefusedAccess::Read)]
        );
    }
}
