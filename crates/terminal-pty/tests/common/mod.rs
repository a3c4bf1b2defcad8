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
