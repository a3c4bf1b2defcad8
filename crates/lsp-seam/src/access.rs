//! Which files a query may read: the caller's read policy, checked by the
//! provider before it reads a file (to send it to a server, or to render
//! an answer's lines), and what an answer left out because of it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::hook::Hook;

/// A file the caller may not read, and the rule that says so.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} ({rule})", path.display())]
pub struct ReadDenied {
    /// The file, with symlinks resolved.
    pub path: PathBuf,
    /// The rule that refuses it, for a person (e.g. "`deny_read` entry
    /// `~/.ssh`").
    pub rule: String,
}

impl ReadDenied {
    /// What a caller is told when the queried file is refused: the file,
    /// the rule, that nothing was read, and what to do. `requested` is the
    /// path as the caller gave it, when that is not `path` (it is said to
    /// lead there).
    pub fn message(&self, requested: Option<&str>) -> String {
        let via = requested
            .map(|r| format!(" (where `{r}` leads)"))
            .unwrap_or_default();
        format!(
            "the sandbox does not let this session read {}{via} ({}); nothing of it was read or \
             sent to a language server. Query a file the sandbox lets this session read",
            self.path.display(),
            self.rule
        )
    }
}

/// What a [`ReadAccess`] calls with a path (absolute).
type CheckFn = dyn Fn(&Path) -> Result<(), ReadDenied> + Send + Sync;

/// The caller's read policy. A provider asks it before it reads any file
/// for a query — the queried file, the files an answer points into, the
/// documents it re-sends to a server — and reads nothing it refuses.
/// The check is given the path the provider is about to read; it must
/// follow symlinks itself (as the kernel would) before deciding. Every
/// policy compares equal, so queries stay comparable as plain data.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadAccess(Hook<CheckFn>);

impl ReadAccess {
    /// A policy that asks `check` about every path.
    pub fn new(check: impl Fn(&Path) -> Result<(), ReadDenied> + Send + Sync + 'static) -> Self {
        Self(Hook::new(Arc::new(check)))
    }

    /// A policy that lets every file be read (no sandbox).
    pub fn all() -> Self {
        Self(Hook::none())
    }

    /// Whether `path` may be read.
    pub fn check(&self, path: &Path) -> Result<(), ReadDenied> {
        match self.0.get() {
            Some(check) => check(path),
            None => Ok(()),
        }
    }
}

/// What an answer left out because the caller may not read it: locations
/// in files the [`ReadAccess`] refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Withheld {
    /// How many locations were dropped.
    pub count: usize,
    /// The distinct rules that refused them, in order of first refusal.
    pub rules: Vec<String>,
}

impl Withheld {
    /// Counts one location dropped because of `denied`.
    pub fn add(&mut self, denied: &ReadDenied) {
        self.count += 1;
        if !self.rules.contains(&denied.rule) {
            self.rules.push(denied.rule.clone());
        }
    }

    /// Whether nothing was withheld.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
}
