//! The stable codes of the daemon's own refusals and failures
//! ([`super::Failure::code`]). Errors of the runtime (a terminal's, the
//! registry's, the page's) keep their own codes.

/// The client's protocol or version is not the daemon's (for a kind
/// that needs the same version); a client that may start a daemon starts
/// one of its own version, which takes the store over.
pub const VERSION_MISMATCH: &str = "VERSION_MISMATCH";
/// The client may run in a dsh sandbox (see the daemon's peer check).
pub const SANDBOXED_CLIENT: &str = "SANDBOXED_CLIENT";
/// The hello was not a line of the expected JSON.
pub const MALFORMED_HELLO: &str = "MALFORMED_HELLO";
/// A value of the request is not valid (an unknown preset).
pub const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";
/// The connection's config file could not be read.
pub const CONFIG_ERROR: &str = "CONFIG_ERROR";
/// The daemon failed in a way that is not the request's fault.
pub const INTERNAL: &str = "INTERNAL";
/// The daemon could not hand its store over (it is stopping).
pub const HANDOVER_FAILED: &str = "HANDOVER_FAILED";
/// The connection a person named is not detached work (`dsh ps --end`).
pub const NO_DETACHED: &str = "NO_DETACHED";
