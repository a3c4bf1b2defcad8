//! The dsh daemon: one per user and data directory, it owns the runtime
//! (terminals, jobs, shared language servers) and holds the workspace store
//! open for every agent; `dsh mcp` is a bridge to it.
//!
//! * [`daemon`] — the listener on a Unix socket in a private runtime
//!   directory, the single-daemon lock, idle exit, signals and the
//!   hand-over of the store to a newer version.
//! * [`host`] — the MCP server: one [`host::Host`] and one connection per
//!   client, each with its own `Owner` (shared by the daemon and by
//!   `dsh mcp --standalone`, see [`standalone`]).
//! * [`bridge`] — `dsh mcp`: connect (starting the daemon if needed), say
//!   hello, copy bytes.
//! * [`protocol`] — the hello, the reply, the frames of `attach`.
//! * [`peer`] — which clients are refused as possibly sandboxed: those a
//!   daemon started and those more confined than it (`/proc` marks).
//! * [`client`], [`registry_ops`], [`ps`], [`attach`] — what the CLI's
//!   registry commands, `dsh daemon status|stop`, `dsh ps` and
//!   `dsh attach` do over the socket.
//! * [`store`] — the store held open for the daemon's life.
//! * [`ui_source`] — what the `dsh ui` page (the `ui` crate, started by
//!   the daemon on the first `dsh ui`) reads of the daemon.
//! * [`processes`] — the subreaper, the orphan reaper and the guardian
//!   that ends the host's sessions if the host dies.
//!
//! This crate does not parse the command line or the config file (the
//! `dsh` binary does and passes a [`host::HostConfig`] and a loader), and
//! holds no tool logic (that is `tools-catalog`'s).

pub mod attach;
pub mod bridge;
pub mod client;
pub mod daemon;
pub mod host;
pub mod paths;
pub mod peer;
pub mod processes;
pub mod protocol;
pub mod ps;
pub mod registry_ops;
pub mod session_log;
pub mod standalone;
pub mod store;
pub mod ui_source;
