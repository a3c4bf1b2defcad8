//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use terminal_pty::{PtyTerminals, TerminalConfig};
use terminal_seam::{
    OpenRequest, Owner, ReadOutcome, ReadRequest, SendOutcome, SendRequest, StreamChunk,
    TerminalId, TerminalService,
};

/// A service, its owner, and one open terminal.
pub struct Fixture {
    pub service: PtyTerminals,
    pub owner: Owner,
}

impl Fixture {
    pub fn new() -> Self {
        Self::with_config(TerminalConfig::default())
    }

    pub fn with_config(config: TerminalConfig) -> Self {
        let _ = process_tree::become_subreaper();
        Self {
            service: PtyTerminals::new(config),
            owner: Owner::new("test"),
        }
    }

    pub async fn open_shell(&self) -> TerminalId {
        let opened = self
            .service
            .open(&self.owner, OpenRequest::default())
            .await
            .expect("open shell");
        opened.id
    }

    pub async fn open_command(&self, argv: &[&str]) -> TerminalId {
        let opened = self
            .service
            .open(
                &self.owner,
                OpenRequest {
                    command: Some(argv.iter().map(|s| (*s).to_owned()).collect()),
                    ..OpenRequest::default()
                },
            )
            .await
            .expect("open command");
        opened.id
    }

    /// The pid of the terminal's first process (its session leader, so
    /// also its session id).
    pub async fn pid(&self, id: TerminalId) -> i32 {
        let listed = self.service.list(&self.owner).await;
        let entry = listed
            .iter()
            .find(|t| t.id == id)
            .expect("the terminal is listed");
        entry.pid as i32
    }

    /// Waits until a process named `name` runs in the foreground process
    /// group of terminal `id`: the command a send started is running, not
    /// still being started by the shell.
    pub async fn wait_foreground(&self, id: TerminalId, name: &str) {
        let sid = self.pid(id).await;
        test_support::wait_until_async(
            &format!("`{name}` runs in the foreground of session {sid}"),
            || in_foreground(sid, name),
        )
        .await;
    }

    pub async fn send(&self, id: TerminalId, text: &str) -> SendOutcome {
        self.service
            .send(
                &self.owner,
                id,
                SendRequest::line(text).with_timeout(Duration::from_secs(20)),
            )
            .await
            .expect("send")
    }

    pub async fn send_req(&self, id: TerminalId, request: SendRequest) -> SendOutcome {
        self.service
            .send(&self.owner, id, request)
            .await
            .expect("send")
    }

    /// Follows the terminal's output from `since` (waiting on the server,
    /// never polling) until what was read satisfies `done`; returns it and
    /// the cursor after it. Fails if nothing comes for `HANG`.
    pub async fn follow_until(
        &self,
        id: TerminalId,
        since: u64,
        done: impl Fn(&str) -> bool,
    ) -> (String, u64) {
        let mut seen = String::new();
        let mut since = since;
        while !done(&seen) {
            let chunk = self
                .service
                .read_wait(&self.owner, id, since, None, test_support::HANG)
                .await
                .expect("read_wait");
            assert!(
                !chunk.output.is_empty(),
                "nothing more came; read so far: {seen:?}"
            );
            seen.push_str(&chunk.output);
            since = chunk.next;
        }
        (seen, since)
    }

    pub async fn stream(&self, id: TerminalId, since: Option<u64>) -> StreamChunk {
        match self
            .service
            .read(
                &self.owner,
                id,
                ReadRequest::Stream {
                    since,
                    max_bytes: None,
                },
            )
            .await
            .expect("read")
        {
            ReadOutcome::Stream(chunk) => chunk,
            ReadOutcome::Screen(_) => panic!("asked for a stream"),
        }
    }
}

/// Whether a process whose command name is `name` is in the terminal's
/// foreground process group of session `sid`.
pub fn in_foreground(sid: i32, name: &str) -> bool {
    process_tree::live_session_members(sid).iter().any(|p| {
        p.pgid == p.tpgid
            && std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                .is_ok_and(|comm| comm.trim_end() == name)
    })
}
