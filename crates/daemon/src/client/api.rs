//! The typed client of the daemon's one-shot requests: one method per
//! request kind, each returning the kind's reply type from the protocol.
//! The binary talks to the daemon through it and never builds a
//! [`Request`] itself.

use serde::de::DeserializeOwned;

use super::{ClientError, StartSpec, request};
use crate::paths::DaemonPaths;
use crate::protocol::ps::Snapshot;
use crate::protocol::registry::RegistryOp;
use crate::protocol::replies::{Reloaded, Status, UiPage};
use crate::protocol::{Reply, Request};

/// A daemon's client: where it is, and how to start one when none
/// answers (only the requests that may start one use it).
#[derive(Debug, Clone)]
pub struct Client {
    paths: DaemonPaths,
    start: Option<StartSpec>,
}

impl Client {
    /// A client of the daemon at `paths` that never starts one.
    pub fn new(paths: DaemonPaths) -> Self {
        Self { paths, start: None }
    }

    /// A client of the daemon at `paths` that starts one (as `start`
    /// says) when none answers.
    pub fn starting(paths: DaemonPaths, start: StartSpec) -> Self {
        Self {
            paths,
            start: Some(start),
        }
    }

    /// The daemon's files.
    pub fn paths(&self) -> &DaemonPaths {
        &self.paths
    }

    fn call(&self, request: Request) -> Result<Reply, ClientError> {
        self::request(&self.paths, request, self.start.as_ref())
    }

    /// `dsh daemon status`: the daemon's facts.
    pub fn status(&self) -> Result<Status, ClientError> {
        decode(&self.call(Request::Status)?, "the daemon's")
    }

    /// `dsh daemon stop`: the daemon ends every connection, terminal and
    /// job, then exits. Its pid, to wait for.
    pub fn stop(&self) -> Result<u32, ClientError> {
        // Answered across versions: only the reply's own pid is read.
        Ok(self.call(Request::Stop)?.pid)
    }

    /// Every connection re-reads its config (a bridge's SIGHUP).
    pub fn reload(&self) -> Result<Reloaded, ClientError> {
        decode(&self.call(Request::Reload)?, "the daemon's")
    }

    /// `dsh ps`: every connection with its terminals and jobs.
    pub fn ps(&self) -> Result<Snapshot, ClientError> {
        decode(&self.call(Request::Ps)?, "the daemon's")
    }

    /// `dsh ui`: the page (started on the first request) and a fresh
    /// sign-in link.
    pub fn ui(&self) -> Result<UiPage, ClientError> {
        decode(&self.call(Request::Ui)?, "the daemon's")
    }

    /// One registry operation (`dsh workspace …`, `dsh session …`); `T`
    /// is the operation's result type (see [`RegistryOp`]).
    pub fn registry<T: DeserializeOwned>(&self, op: RegistryOp) -> Result<T, ClientError> {
        decode(&self.call(Request::Registry { op })?, "the registry's")
    }

    /// `dsh attach`: a live view of terminal `id` until the person
    /// leaves; the line to print then.
    pub fn attach(&self, id: &str, writable: bool) -> Result<String, ClientError> {
        super::attach::run(&self.paths, id, writable)
    }
}

/// The reply's data as `T`; `whose` answer it was, for the message.
fn decode<T: DeserializeOwned>(reply: &Reply, whose: &str) -> Result<T, ClientError> {
    reply
        .decode()
        .map_err(|e| ClientError::Unreachable(format!("{whose} answer was not understood: {e}")))
}
