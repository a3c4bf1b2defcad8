//! The environment policy (`[env]`): a pure function from the host's
//! environment to the environment a child starts with.
//!
//! The steps, in order:
//! 1. **inherit** — `all` of the host's variables, the `core` set
//!    ([`CORE_VARS`]), or `none`;
//! 2. **default excludes** — names matching `*KEY*`, `*SECRET*`, `*TOKEN*`
//!    or `*PASSWORD*` (case-insensitive) are dropped, unless
//!    `ignore_default_excludes`;
//! 3. **exclude** — names matching any of these patterns are dropped;
//! 4. **include_only** — when not empty, only names matching one of these
//!    patterns are kept;
//! 5. **set** — these variables are set last, whatever the steps above
//!    dropped.
//!
//! Patterns are matched against the whole name, case-insensitively; `*`
//! matches any run of characters and `?` exactly one. What a spawn site
//! adds itself (such as `TERM=dumb` for `bash`, or `terminal_open`'s own
//! `env` argument) is applied after this policy.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::str::FromStr;

use wildmatch::WildMatch;

/// Which of the host's variables a child starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Inherit {
    /// Every variable of the host.
    #[default]
    All,
    /// Only the [`CORE_VARS`].
    Core,
    /// Nothing: only what `set` adds.
    None,
}

impl Inherit {
    /// The config name: `all`, `core`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Inherit::All => "all",
            Inherit::Core => "core",
            Inherit::None => "none",
        }
    }
}

impl fmt::Display for Inherit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An `inherit` value that is not one of the three.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown env inherit {0:?}: use \"all\", \"core\" or \"none\"")]
pub struct UnknownInherit(pub String);

impl FromStr for Inherit {
    type Err = UnknownInherit;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(Inherit::All),
            "core" => Ok(Inherit::Core),
            "none" => Ok(Inherit::None),
            other => Err(UnknownInherit(other.to_owned())),
        }
    }
}

/// The `core` set: what a shell session needs to find programs, know who
/// and where it is, and speak the right language — and nothing that
/// reaches another service (no `SSH_AUTH_SOCK`, no `DISPLAY`, no
/// `DBUS_SESSION_BUS_ADDRESS`).
pub const CORE_VARS: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "LC_*", "TERM", "TMPDIR", "TZ",
];

/// Names dropped unless `ignore_default_excludes` is set.
pub const DEFAULT_EXCLUDES: &[&str] = &["*KEY*", "*SECRET*", "*TOKEN*", "*PASSWORD*"];

/// The whole `[env]` policy.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EnvPolicy {
    /// Where the environment starts from.
    pub inherit: Inherit,
    /// Keep names that match [`DEFAULT_EXCLUDES`].
    pub ignore_default_excludes: bool,
    /// More name patterns to drop.
    pub exclude: Vec<String>,
    /// When not empty, keep only names matching one of these patterns.
    pub include_only: Vec<String>,
    /// Variables set last.
    pub set: BTreeMap<String, String>,
}

/// A policy value that cannot be used; names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct EnvPolicyError {
    /// The key, such as `set`.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

impl EnvPolicy {
    /// Checks patterns and `set` names: not empty, no `=` or NUL in names,
    /// no NUL in values.
    pub fn validate(&self) -> Result<(), EnvPolicyError> {
        for (field, list) in [
            ("exclude", &self.exclude),
            ("include_only", &self.include_only),
        ] {
            for p in list {
                if p.is_empty() || p.contains(['=', '\0']) {
                    return Err(EnvPolicyError {
                        field,
                        message: format!("{p:?} is not a variable name pattern"),
                    });
                }
            }
        }
        for (name, value) in &self.set {
            if name.is_empty() || name.contains(['=', '\0']) {
                return Err(EnvPolicyError {
                    field: "set",
                    message: format!("{name:?} is not a variable name"),
                });
            }
            if value.contains('\0') {
                return Err(EnvPolicyError {
                    field: "set",
                    message: format!("the value of {name} contains a NUL byte"),
                });
            }
        }
        Ok(())
    }

    /// The child's environment, from the host's `base` environment.
    pub fn apply<I, K, V>(&self, base: I) -> BTreeMap<OsString, OsString>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let core = patterns(CORE_VARS.iter().copied());
        let default_excludes = patterns(DEFAULT_EXCLUDES.iter().copied());
        let exclude = patterns(self.exclude.iter().map(String::as_str));
        let include_only = patterns(self.include_only.iter().map(String::as_str));
        let mut env: BTreeMap<OsString, OsString> = base
            .into_iter()
            .filter(|(name, _)| {
                let name = name.as_ref().to_string_lossy();
                let inherited = match self.inherit {
                    Inherit::All => true,
                    Inherit::Core => matches_any(&core, &name),
                    Inherit::None => false,
                };
                inherited
                    && (self.ignore_default_excludes || !matches_any(&default_excludes, &name))
                    && !matches_any(&exclude, &name)
                    && (include_only.is_empty() || matches_any(&include_only, &name))
            })
            .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
            .collect();
        for (name, value) in &self.set {
            env.insert(name.into(), value.into());
        }
        env
    }
}

fn patterns<'a>(list: impl Iterator<Item = &'a str>) -> Vec<WildMatch> {
    list.map(WildMatch::new_case_insensitive).collect()
}

fn matches_any(patterns: &[WildMatch], name: &str) -> bool {
    patterns.iter().any(|p| p.matches(name))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn base() -> Vec<(&'static str, &'static str)> {
        vec![
            ("PATH", "/usr/bin"),
            ("HOME", "/h"),
            ("LC_ALL", "C.UTF-8"),
            ("HARMLESS", "1"),
            ("SOME_API_TOKEN", "t0k"),
            ("aws_secret_access_key", "s"),
            ("MyPassword", "p"),
            ("OPENAI_API_KEY", "k"),
            ("SSH_AUTH_SOCK", "/run/agent"),
        ]
    }

    fn names(env: &BTreeMap<OsString, OsString>) -> Vec<String> {
        env.keys()
            .map(|k| k.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn all_drops_secrets_by_default_case_insensitively() {
        let env = EnvPolicy::default().apply(base());
        assert_eq!(
            names(&env),
            ["HARMLESS", "HOME", "LC_ALL", "PATH", "SSH_AUTH_SOCK"]
        );
    }

    #[test]
    fn ignore_default_excludes_keeps_them() {
        let policy = EnvPolicy {
            ignore_default_excludes: true,
            ..EnvPolicy::default()
        };
        assert_eq!(policy.apply(base()).len(), base().len());
    }

    #[test]
    fn core_keeps_the_session_basics_only() {
        let policy = EnvPolicy {
            inherit: Inherit::Core,
            ..EnvPolicy::default()
        };
        assert_eq!(names(&policy.apply(base())), ["HOME", "LC_ALL", "PATH"]);
    }

    #[test]
    fn none_keeps_only_what_is_set() {
        let policy = EnvPolicy {
            inherit: Inherit::None,
            set: BTreeMap::from([("A".to_owned(), "1".to_owned())]),
            ..EnvPolicy::default()
        };
        let env = policy.apply(base());
        assert_eq!(
            env,
            BTreeMap::from([(OsString::from("A"), OsString::from("1"))])
        );
    }

    #[test]
    fn exclude_include_only_and_set_apply_in_order() {
        let policy = EnvPolicy {
            exclude: vec!["ssh_*".into()],
            include_only: vec!["PATH".into(), "H*".into()],
            set: BTreeMap::from([
                ("PATH".to_owned(), "/bin".to_owned()),
                ("GITHUB_TOKEN".to_owned(), "explicit".to_owned()),
            ]),
            ..EnvPolicy::default()
        };
        let env = policy.apply(base());
        let pairs: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.to_string_lossy().into_owned(),
                )
            })
            .collect();
        assert_eq!(
            pairs,
            [
                ("GITHUB_TOKEN".to_owned(), "explicit".to_owned()),
                ("HARMLESS".to_owned(), "1".to_owned()),
                ("HOME".to_owned(), "/h".to_owned()),
                ("PATH".to_owned(), "/bin".to_owned()),
            ]
        );
    }

    #[test]
    fn bad_names_are_refused_with_the_field() {
        let policy = EnvPolicy {
            set: BTreeMap::from([("A=B".to_owned(), "1".to_owned())]),
            ..EnvPolicy::default()
        };
        assert_eq!(
            policy.validate().unwrap_err().to_string(),
            "set: \"A=B\" is not a variable name"
        );
        let policy = EnvPolicy {
            exclude: vec![String::new()],
            ..EnvPolicy::default()
        };
        assert_eq!(policy.validate().unwrap_err().field, "exclude");
    }

    #[test]
    fn inherit_names_round_trip() {
        for i in [Inherit::All, Inherit::Core, Inherit::None] {
            assert_eq!(i.as_str().parse::<Inherit>().unwrap(), i);
        }
        assert!("some".parse::<Inherit>().is_err());
    }
}
