//! The dsh daemon: one per user and data directory, it owns the runtime
//! (terminals, jobs, shared language servers) and holds the workspace store
//! open for every agent; `dsh mcp` is a bridge to it.
//!
//! The crate is layered, and a tidy test in the xtask keeps it so (no
//! module reaches back to itself through `crate::` paths; the protocol
//! uses no other module; the client and the server never use each other):
//!
//! * [`protocol`] — the wire: every request and the data of every reply,
//!   typed; the error codes; the `daemon.json` record; the framing. It
//!   depends on nothing of the daemon.
//! * [`paths`] — where a data directory's daemon keeps its files;
//!   [`holder`] — finding that daemon through its lock.
//! * [`client`] — reaching the daemon (starting it when needed) and the
//!   typed [`client::Client`] the CLI uses; where a registry command runs
//!   ([`client::RegistryAccess`]); the client halves of `dsh attach` and
//!   `dsh mcp` (the bridge), and `dsh mcp --remote` ([`client::remote`]).
//! * [`remotes`] — the remote hosts that live `dsh mcp --remote` bridges
//!   serve: where each goes ([`remotes::target`]), the bridges'
//!   registrations, and what each host's daemon runs, read by `dsh ps`,
//!   `dsh attach` and the page alike.
//! * [`server`] — `dsh daemon`: its files, the listener, the peer check
//!   ([`server::peer`]), one function per request kind, the live snapshot
//!   that `dsh ps` and the page both read, and the page's source.
//! * [`host`] — the MCP server: one [`host::Host`] and one connection per
//!   client, each with its own `Owner` (shared by the daemon and by
//!   `dsh mcp --standalone`, see [`standalone`]); [`session_log`] records
//!   each connection's session and its calls ([`calls`] carries them to
//!   the page as they happen).
//! * [`store`] — the store held open for the daemon's life;
//!   [`registry`] — the registry operations run on it.
//! * [`processes`] — the subreaper, the orphan reaper and the guardian
//!   that ends the host's sessions if the host dies; [`memory`] — the
//!   allocator policy of a long-running host; [`logging`] — the host's
//!   log (stderr and a private file, each statement rate-limited).
//!
//! * [`config`] — the config file and what the host takes of it
//!   ([`config::HostConfig`]): the daemon reads it at start-up, reads each
//!   connection's file and reads them all again on a reload.
//! * [`demo`] — `dsh demo`: scripted scenarios played on a [`host::Host`]
//!   built in process, as a model would play them.
//!
//! This crate does not parse the command line (the `dsh` binary does), and
//! holds no tool logic (that is `tools-catalog`'s).

pub mod calls;
pub mod client;
pub mod config;
pub mod demo;
pub mod holder;
pub mod host;
pub mod logging;
pub mod memory;
pub mod paths;
pub mod processes;
pub mod protocol;
pub mod registry;
pub mod remotes;
pub mod server;
pub mod session_log;
pub mod standalone;
pub mod store;
