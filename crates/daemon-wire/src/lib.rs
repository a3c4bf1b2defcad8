//! The small protocol on the daemon's socket.
//!
//! Every connection starts with one JSON line from the client, the
//! [`Hello`], and one JSON line back, the [`Reply`]. What follows depends
//! on the hello's kind: an MCP session (`mcp`: newline-delimited JSON-RPC,
//! exactly as on stdio), frames of a terminal view (`attach`), or nothing
//! (every other kind is one request and one reply).
//!
//! A hello carries the client's dsh version. The daemon refuses every kind
//! that depends on its code — `mcp`, `registry`, `ps`, `attach`, `reload` —
//! from a client of another version, before any byte of that kind is
//! exchanged (`VERSION_MISMATCH`); `status`, `stop`, `handover` and
//! `record` keep their shape across versions ([`PROTOCOL`]), so an upgrade
//! can hand the store over.
//!
//! This crate is the daemon's wire format and nothing else: every
//! request ([`Request`]) and the data of every reply ([`replies`], [`ps`],
//! [`registry`]), the error codes ([`Code`], from the `error-code` crate), the `daemon.json` record
//! ([`info`]), the framing ([`framing`], [`exchange`]) and what a model is
//! shown of a result per client ([`model_view`]). It names none of the
//! daemon's other crates: the client (`daemon-client`) and the side that
//! serves (`mcp-host`, `daemon`) both use it, and the client and the MCP
//! host never each other (the crate graph, checked by a tidy test in the
//! xtask). It does not find a daemon (`daemon-client` does) and serves
//! nothing (`daemon` does).
//!
//! Also here: the rows of the live snapshot ([`snapshot`]), shared by
//! `dsh ps --json` ([`ps`]), the page's `/api/live` and the page itself,
//! which the `ui` crate reads from here; and the session records a daemon
//! forwards to the daemon it handed its store over to ([`records`]).

#![forbid(unsafe_code)]

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use error_code::Code;
pub mod exchange;
pub mod framing;
pub mod info;
pub mod model_view;
pub mod ps;
pub mod records;
pub mod registry;
pub mod replies;
pub mod snapshot;

pub use framing::{
    LineError, frame, read_line, read_line_blocking, write_line, write_line_blocking,
};

/// The shape of the hello, the reply and the cross-version kinds.
pub const PROTOCOL: u32 = 1;

/// Why a process the daemon started may not use it (`SANDBOXED_CLIENT`):
/// said by the daemon, and by a client that finds the daemon's files
/// closed to it.
pub const SANDBOXED_CLIENT_WHY: &str = "it was started by the dsh daemon it is calling (a \
     command, terminal, subagent or language server of a session), and such processes may not \
     use the daemon: ask the person to run this dsh command outside dsh";

/// The environment variable that makes this process report another dsh
/// version. Only the tests of upgrades set it.
pub const VERSION_OVERRIDE_ENV: &str = "DSH_TEST_VERSION";

/// The longest hello or request line a daemon reads (an environment can be
/// large, but not this large).
pub const MAX_REQUEST_LINE: u64 = 4 * 1024 * 1024;
/// The longest reply line a client reads.
pub const MAX_REPLY_LINE: u64 = 256 * 1024 * 1024;

/// The dsh version this process speaks for.
pub fn version() -> String {
    std::env::var(VERSION_OVERRIDE_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| env!("CARGO_PKG_VERSION").to_owned())
}

/// The first line a client sends.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    /// [`PROTOCOL`] of the client.
    pub protocol: u32,
    /// The client's dsh version.
    pub version: String,
    /// What the client wants.
    #[serde(flatten)]
    pub request: Request,
}

impl Hello {
    /// A hello of this process's version.
    pub fn new(request: Request) -> Self {
        Self {
            protocol: PROTOCOL,
            version: version(),
            request,
        }
    }
}

/// What a connection is for.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Request {
    /// An MCP session follows (the bridge).
    Mcp(McpHello),
    /// One registry operation (`dsh workspace …`, `dsh session …`).
    Registry {
        /// The operation.
        op: registry::RegistryOp,
    },
    /// The daemon's facts (`dsh daemon status`).
    Status,
    /// Stop the daemon as SIGTERM does (`dsh daemon stop`).
    Stop,
    /// Re-read the config of every connection (SIGHUP to a bridge).
    Reload,
    /// Every connection with its terminals and jobs (`dsh ps`).
    Ps,
    /// A person answers a program's secret prompt in terminal `id` (`dsh
    /// answer`).
    Answer {
        /// The terminal, `pty-N`.
        id: String,
        /// The answer.
        secret: Secret,
    },
    /// What a person is asked before answering terminal `id`'s secret
    /// prompt (`dsh answer` shows it first): the prompt and who reads it.
    Asking {
        /// The terminal, `pty-N`.
        id: String,
    },
    /// The commands agents ask to run outside the sandbox that wait for a
    /// person (`dsh approve`).
    Approvals,
    /// A person runs or refuses a waiting command (`dsh approve ap-N`).
    Approve {
        /// The request, `ap-N`.
        id: String,
        /// Run it outside the sandbox once; `false`: refuse it.
        run: bool,
    },
    /// A person decides about detached work (`dsh ps --end N`, `dsh ps
    /// --give N --to M`).
    Detached {
        /// The detached connection.
        connection: u64,
        /// Give its work to this connected agent; `None`: end it.
        give_to: Option<u64>,
    },
    /// Serve the web page (started on the first request) and say where
    /// (`dsh ui`).
    Ui,
    /// A live view of a terminal (`dsh attach`); frames follow.
    Attach {
        /// The terminal, `pty-N`.
        id: String,
        /// Let the person type.
        write: bool,
    },
    /// A daemon of another version asks this one to release the store.
    Handover {
        /// The socket the new daemon will listen on (records of this
        /// daemon's live connections are forwarded there).
        socket: PathBuf,
    },
    /// Session records of a daemon that handed its store over.
    Record {
        /// The records, in order.
        records: Vec<records::SessionRecordOp>,
    },
}

impl Request {
    /// The kind's name, as on the wire.
    pub fn kind(&self) -> &'static str {
        match self {
            Request::Mcp(_) => "mcp",
            Request::Registry { .. } => "registry",
            Request::Status => "status",
            Request::Stop => "stop",
            Request::Reload => "reload",
            Request::Ps => "ps",
            Request::Detached { .. } => "detached",
            Request::Answer { .. } => "answer",
            Request::Asking { .. } => "asking",
            Request::Approvals => "approvals",
            Request::Approve { .. } => "approve",
            Request::Ui => "ui",
            Request::Attach { .. } => "attach",
            Request::Handover { .. } => "handover",
            Request::Record { .. } => "record",
        }
    }

    /// Whether the kind needs a daemon of exactly the client's version.
    pub fn needs_same_version(&self) -> bool {
        match self {
            Request::Mcp(_)
            | Request::Registry { .. }
            | Request::Reload
            | Request::Ps
            | Request::Detached { .. }
            | Request::Answer { .. }
            | Request::Asking { .. }
            | Request::Approvals
            | Request::Approve { .. }
            | Request::Ui
            | Request::Attach { .. } => true,
            Request::Status | Request::Stop | Request::Handover { .. } | Request::Record { .. } => {
                false
            }
        }
    }
}

/// A secret on its way from a person to a terminal: never printed
/// (`Debug` shows its length), wiped from memory when dropped.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub zeroize::Zeroizing<String>);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret(<{} bytes>)", self.0.len())
    }
}

/// What a bridge tells the daemon about its MCP connection.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct McpHello {
    /// `--preset`, which wins over the config's.
    pub preset: Option<String>,
    /// The config file of this connection's tools (`--config`, else the
    /// default file when it exists; `None`: defaults).
    pub config: Option<PathBuf>,
    /// The bridge's working directory: the session's directory when the
    /// client names no root.
    pub cwd: PathBuf,
    /// The bridge's environment: every process this connection starts
    /// gets it, exactly as a standalone server's children would.
    pub env: Vec<(String, String)>,
}

/// The daemon's answer to a hello.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reply {
    /// The daemon's pid.
    pub pid: u32,
    /// The daemon's dsh version.
    pub version: String,
    /// Set when the request was refused or failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Failure>,
    /// The request's result.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

impl Reply {
    /// A successful reply of this process carrying `data`.
    pub fn ok(data: serde_json::Value) -> Self {
        Self {
            pid: std::process::id(),
            version: version(),
            error: None,
            data,
        }
    }

    /// A successful reply of this process carrying `data`, typed: one of
    /// [`replies`] or a registry result.
    pub fn of<T: Serialize>(data: &T) -> Self {
        match serde_json::to_value(data) {
            Ok(data) => Self::ok(data),
            Err(e) => Self::failed(Code::Internal, format!("cannot encode the reply: {e}")),
        }
    }

    /// The reply's data as `T`.
    pub fn decode<T: for<'de> Deserialize<'de>>(&self) -> Result<T, serde_json::Error> {
        T::deserialize(&self.data)
    }

    /// A failed reply of this process.
    pub fn failed(code: Code, message: impl Into<String>) -> Self {
        Self {
            pid: std::process::id(),
            version: version(),
            error: Some(Failure {
                code,
                message: message.into(),
            }),
            data: serde_json::Value::Null,
        }
    }
}

/// A refused or failed request: a stable code and a message that says
/// what to do. The code is one of [`Code`]'s: a new code is a change of
/// the wire, which a client of an earlier build reads as a reply it does
/// not understand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// The stable code, written as its SCREAMING_SNAKE name.
    pub code: Code,
    /// One line for a person.
    pub message: String,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// The codes a client of an earlier build reads keep their names.
    #[test]
    fn the_daemon_s_codes_keep_their_names_on_the_wire() {
        let reply = Reply::failed(Code::VersionMismatch, "upgrade");
        assert_eq!(
            serde_json::to_value(&reply).unwrap()["error"],
            serde_json::json!({"code": "VERSION_MISMATCH", "message": "upgrade"})
        );
    }

    #[tokio::test]
    async fn lines_round_trip_and_limits_hold() {
        let hello = Hello::new(Request::Attach {
            id: "pty-3".into(),
            write: true,
        });
        let mut wire = Vec::new();
        write_line(&mut wire, &hello).await.unwrap();
        let mut reader = tokio::io::BufReader::new(&wire[..]);
        let back: Hello = read_line(&mut reader, 1024).await.unwrap();
        assert_eq!(back.request.kind(), "attach");
        assert_eq!(back.version, version());

        let mut reader = tokio::io::BufReader::new(&wire[..]);
        let err = read_line::<Hello, _>(&mut reader, 10).await.unwrap_err();
        assert!(matches!(err, LineError::TooLong(10)), "{err}");

        let mut reader = tokio::io::BufReader::new(&b"{\"protocol\": 1}\n"[..]);
        let err = read_line::<Hello, _>(&mut reader, 1024).await.unwrap_err();
        assert!(matches!(err, LineError::Malformed(_)), "{err}");

        let mut reader = tokio::io::BufReader::new(&b"{\"proto"[..]);
        let err = read_line::<Hello, _>(&mut reader, 1024).await.unwrap_err();
        assert!(matches!(err, LineError::Closed), "{err}");
    }

    #[tokio::test]
    async fn frames_round_trip() {
        let mut wire = frame::encode(frame::OUTPUT, b"hello");
        wire.extend(frame::encode(frame::END, b"bye"));
        let mut reader = &wire[..];
        assert_eq!(
            frame::read(&mut reader).await.unwrap(),
            Some((frame::OUTPUT, b"hello".to_vec()))
        );
        assert_eq!(
            frame::read(&mut reader).await.unwrap(),
            Some((frame::END, b"bye".to_vec()))
        );
        assert_eq!(frame::read(&mut reader).await.unwrap(), None);
    }
}
