//! The sandbox policy: what the `[sandbox]` config section says, with its
//! defaults, before any path is resolved against a spawn's context.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// How much of the file system a sandboxed process may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mode {
    /// Writes allowed under the workspace (or project) root, the temp dir and
    /// the writable caches; `.git` at the root stays read-only.
    #[default]
    WorkspaceWrite,
    /// Writes allowed only in the temp dir (and the terminal and null devices).
    ReadOnly,
    /// No confinement at all.
    Off,
}

impl Mode {
    /// The name used in config files and results: `workspace-write`,
    /// `read-only`, `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::WorkspaceWrite => "workspace-write",
            Mode::ReadOnly => "read-only",
            Mode::Off => "off",
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown sandbox mode {0:?}: use \"workspace-write\", \"read-only\" or \"off\"")]
pub struct UnknownMode(pub String);

impl FromStr for Mode {
    type Err = UnknownMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "workspace-write" => Ok(Mode::WorkspaceWrite),
            "read-only" => Ok(Mode::ReadOnly),
            "off" => Ok(Mode::Off),
            other => Err(UnknownMode(other.to_owned())),
        }
    }
}

/// The default writable caches (workspace-write only): the download and
/// build caches package managers need, never the directories they install
/// programs into (`~/.cargo/bin`, `~/go/bin`, `~/.local/bin`, rustup's
/// toolchains), because a program written there would later run outside the
/// sandbox. Entries that do not exist are skipped, not created.
pub const DEFAULT_WRITABLE: &[&str] = &[
    "~/.cache",
    "~/.cargo/registry",
    "~/.cargo/git",
    "~/.npm",
    "~/.local/share/pnpm/store",
    "~/.bun/install/cache",
    "~/go/pkg/mod",
    "~/.m2/repository",
    "~/.gradle/caches",
    "~/.gradle/wrapper",
];

/// The default credential stores no sandboxed process may read (or write),
/// in every mode but `off`.
pub const DEFAULT_DENY_READ: &[&str] = &[
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.kube",
    "~/.docker/config.json",
    "~/.config/gh",
    "~/.config/hub",
    "~/.netrc",
    "~/.git-credentials",
    "~/.config/git/credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials",
    "~/.cargo/credentials.toml",
    "~/.gradle/gradle.properties",
    "~/.m2/settings.xml",
    "~/.password-store",
    "~/.local/share/keyrings",
    "~/.mozilla",
    "~/.config/google-chrome",
    "~/.config/chromium",
];

/// The whole `[sandbox]` policy.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SandboxPolicy {
    /// How much may be written.
    pub mode: Mode,
    /// Extra writable paths in workspace-write (absolute or `~/…`).
    pub writable: Vec<String>,
    /// Whether `.git` at the top of the writable root may be written.
    pub git_writable: bool,
    /// Paths no sandboxed process may read or write (absolute or `~/…`).
    pub deny_read: Vec<String>,
    /// Whether TCP/UDP connections may leave the sandbox.
    pub network: bool,
    /// Unix sockets of the host's programs, or directories of them, that
    /// stay reachable although dsh hides them by default (absolute or
    /// `~/…`): the session bus, tmux and screen servers, the X display,
    /// the Docker and system D-Bus sockets, the ssh agent.
    pub unix_sockets: Vec<String>,
    /// Refuse to spawn (`SANDBOX_UNAVAILABLE`) when the kernel cannot
    /// enforce all of the above, instead of running with less.
    pub required: bool,
}

impl Default for SandboxPolicy {
    fn default() -> Self {
        Self {
            mode: Mode::WorkspaceWrite,
            writable: DEFAULT_WRITABLE.iter().map(|s| (*s).to_owned()).collect(),
            git_writable: false,
            deny_read: DEFAULT_DENY_READ.iter().map(|s| (*s).to_owned()).collect(),
            network: true,
            unix_sockets: Vec::new(),
            required: false,
        }
    }
}

/// A policy value that cannot be used; names the field and the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PolicyError {
    /// The key, such as `writable`.
    pub field: &'static str,
    /// What is wrong and how to fix it.
    pub message: String,
}

impl SandboxPolicy {
    /// Checks every path entry: absolute, or `~` / `~/…`; no NUL byte.
    pub fn validate(&self) -> Result<(), PolicyError> {
        for (field, list) in [
            ("writable", &self.writable),
            ("deny_read", &self.deny_read),
            ("unix_sockets", &self.unix_sockets),
        ] {
            for entry in list {
                check_path_entry(entry).map_err(|message| PolicyError { field, message })?;
            }
        }
        Ok(())
    }
}

fn check_path_entry(entry: &str) -> Result<(), String> {
    if entry.contains('\0') {
        return Err(format!("{entry:?} contains a NUL byte"));
    }
    if entry == "~" || entry.starts_with("~/") || entry.starts_with('/') {
        Ok(())
    } else {
        Err(format!(
            "{entry:?} must be an absolute path or start with \"~/\""
        ))
    }
}

/// Expands a policy entry against `home`: `~` and `~/x` are resolved,
/// absolute paths are kept; anything else is `None` (refused by
/// [`SandboxPolicy::validate`]).
pub fn expand_entry(entry: &str, home: &Path) -> Option<PathBuf> {
    if entry == "~" {
        Some(home.to_path_buf())
    } else if let Some(rest) = entry.strip_prefix("~/") {
        Some(home.join(rest))
    } else if entry.starts_with('/') {
        Some(PathBuf::from(entry))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn modes_round_trip_through_their_names() {
        for mode in [Mode::WorkspaceWrite, Mode::ReadOnly, Mode::Off] {
            assert_eq!(mode.as_str().parse::<Mode>().unwrap(), mode);
        }
        assert_eq!(
            "danger".parse::<Mode>().unwrap_err().to_string(),
            "unknown sandbox mode \"danger\": use \"workspace-write\", \"read-only\" or \"off\""
        );
    }

    #[test]
    fn defaults_are_valid_and_strict() {
        let p = SandboxPolicy::default();
        assert_eq!(p.validate(), Ok(()));
        assert_eq!(p.mode, Mode::WorkspaceWrite);
        assert!(!p.git_writable && p.network && !p.required);
        assert!(p.deny_read.iter().any(|d| d == "~/.ssh"));
        // No install directory whose programs run later outside the sandbox.
        for bad in ["~/.cargo", "~/.cargo/bin", "~/.rustup", "~/go", "~/.local"] {
            assert!(!p.writable.iter().any(|w| w == bad), "{bad}");
        }
    }

    #[test]
    fn relative_entries_are_refused_with_the_field() {
        let p = SandboxPolicy {
            writable: vec!["build".into()],
            ..SandboxPolicy::default()
        };
        assert_eq!(
            p.validate().unwrap_err().to_string(),
            "writable: \"build\" must be an absolute path or start with \"~/\""
        );
    }

    #[test]
    fn tilde_expands_against_home() {
        let home = Path::new("/h");
        assert_eq!(expand_entry("~", home), Some(PathBuf::from("/h")));
        assert_eq!(expand_entry("~/.ssh", home), Some(PathBuf::from("/h/.ssh")));
        assert_eq!(expand_entry("/etc", home), Some(PathBuf::from("/etc")));
        assert_eq!(expand_entry("~bob/x", home), None);
    }
}
