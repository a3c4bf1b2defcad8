//! Where `dsh mcp --remote TARGET` goes, and the local command that opens
//! a stdio stream there.
//!
//! dsh has no network protocol of its own: the stream is the user's own
//! OpenSSH client (its config, keys, agent, jump hosts and known_hosts;
//! dsh never sees a password or a key) or any command that gives a stdio
//! stream into the target (`docker exec -i NAME`, `kubectl exec -i POD
//! --`). Either way the far side runs `sh -s`, and the bridge writes its
//! bootstrap script to that shell's stdin (see `client::remote::bootstrap`): no
//! word of it passes through the remote login shell's quoting rules, which
//! differ between sh, csh and fish.

use std::path::Path;
use std::process::Command;

/// The environment variable that replaces `ssh` as the command that opens
/// the stream, as `GIT_SSH_COMMAND` does for git (run by `sh -c`, so it may
/// carry options: `ssh -F ~/work/ssh_config`).
pub const SSH_COMMAND_VAR: &str = "DSH_SSH_COMMAND";

/// The options dsh adds to every `ssh`: no terminal, no escape character
/// (the stream is binary-clean JSON-RPC), never a password prompt on a
/// stream an MCP client owns, a host that does not answer given up after
/// 15 s, and a dead peer noticed within ~15 s.
const SSH_OPTIONS: &[&str] = &[
    "-T",
    "-e",
    "none",
    "-o",
    "BatchMode=yes",
    "-o",
    "ServerAliveInterval=5",
    "-o",
    "ServerAliveCountMax=3",
    "-o",
    "ConnectTimeout=15",
];

/// What a path in an `ssh://` URL escapes.
const PATH_ESCAPES: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b'#')
    .add(b'?')
    .add(b'"');

/// The forms of a target, said when one is not.
const FORMS: &str = "expected ssh://[user@]host[:port][/path] or exec:COMMAND (for example exec:docker exec -i NAME)";

/// Why a `--remote` target did not parse; each says what form is
/// expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// `exec:` with no command.
    #[error("`{text}` names no command; {FORMS}", FORMS = FORMS)]
    NoCommand {
        /// The target as given.
        text: String,
    },
    /// Neither `ssh://` nor `exec:`.
    #[error("`{text}` is not a remote target; {FORMS}", FORMS = FORMS)]
    NotATarget {
        /// The target as given.
        text: String,
    },
    /// The host and port do not parse.
    #[error("`{text}`: {port}; {FORMS}", FORMS = FORMS)]
    Port {
        /// The target as given.
        text: String,
        /// What is wrong with them.
        port: PortError,
    },
    /// No host, or one (or a user) that ssh would take for an option.
    #[error("`{text}` names no usable host; {FORMS}", FORMS = FORMS)]
    NoHost {
        /// The target as given.
        text: String,
    },
    /// The path is not UTF-8 once its escapes are decoded.
    #[error("`{text}`: `{path}` is not UTF-8 once decoded")]
    PathNotUtf8 {
        /// The target as given.
        text: String,
        /// The path, escaped.
        path: String,
    },
}

/// What is wrong with the `host[:port]` of a target.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// `[v6]` followed by something other than `:port`.
    #[error("a bracketed address must be followed by :port")]
    AfterBracket,
    /// `[` with no `]`.
    #[error("an unclosed [")]
    Unclosed,
    /// The port is not a number from 1 to 65535.
    #[error("`{0}` is not a port")]
    NotAPort(String),
}

/// A parsed `--remote` target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `ssh://[user@]host[:port][/path]`.
    Ssh {
        /// `[user@]host`, as ssh takes it (a `Host` of the user's ssh
        /// config works too).
        destination: String,
        /// `:port`, when given.
        port: Option<u16>,
        /// The workspace on the target (`/path`), when given.
        path: Option<String>,
    },
    /// `exec:COMMAND`: a local command (run by `sh -c`) whose stdio is a
    /// stream into the target; `sh -s` is appended to it.
    Exec {
        /// The command, as given.
        command: String,
    },
}

impl Target {
    /// Parses TARGET; the error says what form is expected.
    pub fn parse(text: &str) -> Result<Self, TargetError> {
        if let Some(command) = text.strip_prefix("exec:") {
            let command = command.trim();
            if command.is_empty() {
                return Err(TargetError::NoCommand { text: text.into() });
            }
            return Ok(Self::Exec {
                command: command.to_owned(),
            });
        }
        let Some(rest) = text.strip_prefix("ssh://") else {
            return Err(TargetError::NotATarget { text: text.into() });
        };
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], Some(&rest[at..])),
            None => (rest, None),
        };
        let (user, host_port) = match authority.rsplit_once('@') {
            Some((user, host_port)) => (Some(user), host_port),
            None => (None, authority),
        };
        let (host, port) = split_port(host_port).map_err(|port| TargetError::Port {
            text: text.into(),
            port,
        })?;
        if host.is_empty()
            || host.starts_with('-')
            || user.is_some_and(|u| u.is_empty() || u.starts_with('-'))
        {
            return Err(TargetError::NoHost { text: text.into() });
        }
        let destination = match user {
            Some(user) => format!("{user}@{host}"),
            None => host.to_owned(),
        };
        let path = path
            .filter(|p| *p != "/")
            .map(|p| {
                percent_decode(p).map_err(|_| TargetError::PathNotUtf8 {
                    text: text.into(),
                    path: p.into(),
                })
            })
            .transpose()?;
        Ok(Self::Ssh {
            destination,
            port,
            path,
        })
    }

    /// The target as rows and messages name it: the host, or the exec
    /// command.
    pub fn host(&self) -> String {
        match self {
            Self::Ssh { destination, .. } => destination
                .rsplit_once('@')
                .map_or(destination.as_str(), |(_, host)| host)
                .to_owned(),
            Self::Exec { command } => format!("exec:{command}"),
        }
    }

    /// The target as `--remote` takes it (parsing it again gives it back).
    pub fn text(&self) -> String {
        match self {
            Self::Ssh {
                destination,
                port,
                path,
            } => {
                let host = match destination.rsplit_once('@') {
                    Some((user, host)) if host.contains(':') => format!("{user}@[{host}]"),
                    None if destination.contains(':') => format!("[{destination}]"),
                    _ => destination.clone(),
                };
                let port = port.map(|p| format!(":{p}")).unwrap_or_default();
                let path = path
                    .as_deref()
                    .map(|p| percent_encoding::utf8_percent_encode(p, PATH_ESCAPES).to_string())
                    .unwrap_or_default();
                format!("ssh://{host}{port}{path}")
            }
            Self::Exec { command } => format!("exec:{command}"),
        }
    }

    /// The workspace directory on the target, when the target names one.
    pub fn path(&self) -> Option<&str> {
        match self {
            Self::Ssh { path, .. } => path.as_deref(),
            Self::Exec { .. } => None,
        }
    }

    /// The local command whose stdin and stdout are a stream to `sh -s` on
    /// the target; over ssh, the connection is a multiplexing master on
    /// `control` (see [`super`]) when given.
    pub fn command(&self, control: Option<&Path>) -> Command {
        let mut command = self.base(control.map(|c| (c, true)), false);
        match self {
            Self::Ssh { .. } => command.arg("sh -s"),
            Self::Exec { .. } => command.args(["sh", "-s"]),
        };
        command
    }

    /// The local command that runs a command (the caller adds it: one
    /// argument over ssh, words for exec) on the target, through the
    /// bridge's ssh connection on `control` when there is one, with a
    /// terminal when `tty`.
    pub fn command_via(&self, control: Option<&Path>, tty: bool) -> Command {
        self.base(control.map(|c| (c, false)), tty)
    }

    fn base(&self, control: Option<(&Path, bool)>, tty: bool) -> Command {
        let mut command = Command::new("/bin/sh");
        match self {
            Self::Ssh {
                destination, port, ..
            } => {
                let ssh = std::env::var(SSH_COMMAND_VAR)
                    .ok()
                    .filter(|s| !s.trim().is_empty())
                    .unwrap_or_else(|| "ssh".to_owned());
                command
                    .arg("-c")
                    .arg(format!("exec {ssh} \"$@\""))
                    .arg("ssh");
                command.args(SSH_OPTIONS);
                if tty {
                    command.arg("-tt");
                }
                if let Some((path, master)) = control {
                    let mode = if master { "auto" } else { "no" };
                    command
                        .arg("-o")
                        .arg(format!("ControlMaster={mode}"))
                        .arg("-o")
                        .arg(format!("ControlPath={}", path.display()))
                        .args(["-o", "ControlPersist=no"]);
                }
                if let Some(port) = port {
                    command.arg("-p").arg(port.to_string());
                }
                command.arg("--").arg(destination);
            }
            Self::Exec { command: exec } => {
                command.arg("-c").arg(format!("{exec} \"$@\"")).arg("exec");
            }
        }
        command
    }
}

/// `host[:port]`, with `[v6]:port` for an IPv6 literal.
fn split_port(text: &str) -> Result<(&str, Option<u16>), PortError> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        match rest.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, port)) => match port.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(PortError::AfterBracket),
            },
            None => return Err(PortError::Unclosed),
        }
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = port
        .map(|p| {
            p.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| PortError::NotAPort(p.into()))
        })
        .transpose()?;
    Ok((host, port))
}

/// `%20` and friends in the path of an `ssh://` URL.
fn percent_decode(path: &str) -> Result<String, std::str::Utf8Error> {
    percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map(|p| p.into_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn ssh_targets_parse_into_their_parts() {
        assert_eq!(
            Target::parse("ssh://alice@dev.example:2222/home/alice/src%20x").unwrap(),
            Target::Ssh {
                destination: "alice@dev.example".into(),
                port: Some(2222),
                path: Some("/home/alice/src x".into()),
            }
        );
        assert_eq!(
            Target::parse("ssh://devbox").unwrap(),
            Target::Ssh {
                destination: "devbox".into(),
                port: None,
                path: None,
            }
        );
        assert_eq!(
            Target::parse("ssh://[::1]:22/w").unwrap(),
            Target::Ssh {
                destination: "::1".into(),
                port: Some(22),
                path: Some("/w".into()),
            }
        );
        assert_eq!(Target::parse("ssh://devbox").unwrap().host(), "devbox");
        for text in [
            "ssh://alice@dev:2222/a%20b",
            "ssh://[::1]:22/w",
            "ssh://devbox",
            "exec:docker exec -i b",
        ] {
            assert_eq!(Target::parse(text).unwrap().text(), text);
        }
    }

    #[test]
    fn exec_targets_keep_their_command() {
        let t = Target::parse("exec:docker exec -i box").unwrap();
        assert_eq!(t.host(), "exec:docker exec -i box");
        assert_eq!(t.path(), None);
    }

    #[test]
    fn bad_targets_say_what_is_expected() {
        for bad in [
            "devbox",
            "ssh://",
            "ssh://-oProxyCommand=x",
            "ssh://h:0",
            "ssh://h:x",
            "exec:",
            "ssh://[::1",
        ] {
            let e = Target::parse(bad).unwrap_err().to_string();
            assert!(e.contains("ssh://[user@]host"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_bad_target_says_its_own_words() {
        let forms = "expected ssh://[user@]host[:port][/path] or exec:COMMAND (for example exec:docker exec -i NAME)";
        for (bad, said) in [
            ("exec: ", format!("`exec: ` names no command; {forms}")),
            (
                "devbox",
                format!("`devbox` is not a remote target; {forms}"),
            ),
            (
                "ssh://h:0",
                format!("`ssh://h:0`: `0` is not a port; {forms}"),
            ),
            (
                "ssh://[::1]x",
                format!("`ssh://[::1]x`: a bracketed address must be followed by :port; {forms}"),
            ),
            (
                "ssh://[::1",
                format!("`ssh://[::1`: an unclosed [; {forms}"),
            ),
            (
                "ssh://u@",
                format!("`ssh://u@` names no usable host; {forms}"),
            ),
            (
                "ssh://h/%ff",
                "`ssh://h/%ff`: `/%ff` is not UTF-8 once decoded".to_owned(),
            ),
        ] {
            assert_eq!(Target::parse(bad).unwrap_err().to_string(), said);
        }
    }
}
