//! The dsh daemon: one per user and data directory, it owns the runtime
//! (terminals, jobs, shared language servers) through the MCP host and
//! holds the workspace store open for every agent; `dsh mcp` is a bridge
//! to it.
//!
//! This crate is the server and the wiring; the layers it puts together
//! are crates of their own, so Cargo keeps them apart:
//!
//! * `daemon-wire` — the wire: every request and the data of every reply,
//!   the error codes, the `daemon.json` record, the framing.
//! * `daemon-client` — reaching a daemon, local or remote: where a data
//!   directory's daemon keeps its files, finding it through its lock, the
//!   typed client, the bridge, `dsh attach`, `dsh mcp --remote`.
//! * `mcp-host` — the MCP server: the `Host` that owns the runtime, one
//!   connection per client, the session log, the config, the store it
//!   records in, and the duties of a process that runs a host.
//!
//! Here:
//!
//! * [`server`] — `dsh daemon`: its files, the listener, the peer check
//!   ([`server::peer`]), one function per request kind, the live snapshot
//!   that `dsh ps` and the page both read, and the page's source.
//! * [`registry`] — the registry operations run on the held store, and
//!   where a registry command runs ([`registry::RegistryAccess`]: the
//!   daemon, or the store itself with `--standalone`).
//! * [`standalone`] — `dsh mcp --standalone`: one host serving stdio,
//!   without a daemon.
//! * [`codes`] — the wire's code of each error the daemon passes on.
//! * [`memory`] — the allocator policy of a long-running host;
//!   [`logging`] — the host's log (stderr and a private file, each
//!   statement rate-limited).
//!
//! This crate does not parse the command line (the `dsh` binary does), and
//! holds no tool logic (that is `tools-catalog`'s).

pub mod codes;
pub mod logging;
pub mod memory;
pub mod registry;
pub mod server;
pub mod standalone;
