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
//! * [`server`] — `dsh daemon`: start-up, the accept loop, idle exit and
//!   shutdown; its lock, `daemon.json` and socket (`files`); one function
//!   per request kind (`dispatch`); the peer check ([`server::peer`]: a
//!   client the daemon started itself, or one more confined than the
//!   daemon — `no_new_privs`, seccomp filters, user namespace — is refused
//!   with `SANDBOXED_CLIENT`; the pidfd and socket-option system calls are
//!   `process-tree`'s); the daemon's half of `dsh attach` (`attach`: the
//!   terminal's screen drawn from the emulator's copy, never what the
//!   program printed); the one live snapshot of the connections that `dsh
//!   ps` and the page both read (`live`: a connection's row is one type,
//!   `daemon_wire::snapshot`'s `ConnectionRow`, the same in `dsh ps
//!   --json`, `/api/live` and the page); and what the page reads
//!   ([`server::page`]: `DaemonUiSource`, the held store and the host's
//!   live state behind the `ui` crate's `UiSource`, the page's changes run
//!   as the CLI's registry operations, its directory picker `picker-fs`
//!   from `$HOME`; the daemon starts the page on the first `dsh ui`
//!   request).
//! * [`registry`] — the registry operations run on the held store
//!   ([`registry::execute_held`], the one path of the CLI's commands and
//!   the page's changes), and
//!   where a registry command runs ([`registry::RegistryAccess`]: the
//!   daemon, or the store itself with `--standalone`).
//! * [`standalone`] — `dsh mcp --standalone`: one host serving stdio,
//!   without a daemon.
//! * [`codes`] — the wire's code of each error the daemon passes on — a
//!   terminal's, the registry's, the page's — by an exhaustive match over
//!   that error's enum.
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
