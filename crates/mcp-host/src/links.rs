//! How a call asks its client to open a link for the person (MCP URL-mode
//! elicitation): the page where a secret prompt is answered, or where an
//! unconfined command is approved.
//!
//! Over the `initialize` revisions the server sends `elicitation/create`
//! itself. MCP 2026-07-28 forbids requests from the server: the call's own
//! request is answered with an `InputRequiredResult` carrying the
//! elicitation and an opaque `requestState`, the client shows the link and
//! sends the call again with the person's response and that state, and the
//! call — which kept running, parked in its connection — goes on. Either
//! way the call learns only whether the client opened the link: what the
//! person decides comes from the page, never from the client's answer.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{ElicitRequestParams, ElicitationAction};
use rmcp::{Peer, RoleServer};
use tokio::sync::{mpsc, oneshot};
use tools_catalog::{ToolError, ToolReply};

/// What became of a link the call asked the client to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkOutcome {
    /// The client accepted: it opened the link, or showed it to the person.
    Opened,
    /// The client did not open it (declined, cancelled, failed): no person
    /// is known to have seen it; the text says what the client answered.
    NotOpened(String),
}

/// One link a running call asks its client to open.
#[derive(Debug)]
pub(crate) struct LinkAsk {
    /// The elicitation (URL mode).
    pub params: ElicitRequestParams,
    /// Where the client's answer goes.
    pub answer: oneshot::Sender<LinkOutcome>,
}

/// How one call reaches its client with a link.
#[derive(Clone)]
pub enum LinkSender {
    /// The client cannot be sent a link: why, in words for the model.
    None(String),
    /// An `initialize` revision: the server sends `elicitation/create`.
    Request(Peer<RoleServer>),
    /// MCP 2026-07-28: the call's request is answered with the
    /// elicitation, and the client's retry brings the answer.
    InputRequired(mpsc::Sender<LinkAskFrom>),
}

/// A [`LinkAsk`], as the call's side sends it.
pub struct LinkAskFrom(pub(crate) LinkAsk);

impl std::fmt::Debug for LinkSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None(_) => "LinkSender::None",
            Self::Request(_) => "LinkSender::Request",
            Self::InputRequired(_) => "LinkSender::InputRequired",
        })
    }
}

impl LinkSender {
    /// Whether the client can be sent a link at all.
    pub fn can_open(&self) -> bool {
        !matches!(self, Self::None(_))
    }

    /// Asks the client to open `url` for the person, with `message`
    /// (`id`: the elicitation's id), and waits up to `timeout` for the
    /// client's answer.
    pub async fn open(
        &self,
        message: String,
        url: String,
        id: String,
        timeout: Duration,
    ) -> LinkOutcome {
        let params = ElicitRequestParams::UrlElicitationParams {
            meta: None,
            message,
            url,
            elicitation_id: id,
        };
        match self {
            Self::None(why) => LinkOutcome::NotOpened(why.clone()),
            Self::Request(peer) => {
                match peer
                    .create_elicitation_with_timeout(params, Some(timeout))
                    .await
                {
                    Ok(result) => outcome_of(&result.action),
                    Err(e) => LinkOutcome::NotOpened(format!("the client failed to open it: {e}")),
                }
            }
            Self::InputRequired(asks) => {
                let (answer, answered) = oneshot::channel();
                if asks
                    .send(LinkAskFrom(LinkAsk { params, answer }))
                    .await
                    .is_err()
                {
                    return LinkOutcome::NotOpened("the call ended".to_owned());
                }
                match tokio::time::timeout(timeout, answered).await {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(_)) => {
                        LinkOutcome::NotOpened("the client did not send the call again".to_owned())
                    }
                    Err(_) => LinkOutcome::NotOpened(format!(
                        "the client did not answer within {} s",
                        timeout.as_secs()
                    )),
                }
            }
        }
    }
}

/// The outcome of the client's elicitation answer.
pub(crate) fn outcome_of(action: &ElicitationAction) -> LinkOutcome {
    match action {
        ElicitationAction::Accept => LinkOutcome::Opened,
        ElicitationAction::Decline => {
            LinkOutcome::NotOpened("the client declined to open it".to_owned())
        }
        ElicitationAction::Cancel => LinkOutcome::NotOpened("the client cancelled it".to_owned()),
        // Any answer a later revision adds: not an opening.
        #[allow(clippy::wildcard_enum_match_arm)]
        _ => LinkOutcome::NotOpened("the client did not open it".to_owned()),
    }
}

/// The outcome carried by an `inputResponses` value (an `ElicitResult`).
pub(crate) fn outcome_of_response(response: Option<&serde_json::Value>) -> LinkOutcome {
    match response.and_then(|r| serde_json::from_value::<rmcp::model::ElicitResult>(r.clone()).ok())
    {
        Some(result) => outcome_of(&result.action),
        None => LinkOutcome::NotOpened("the client sent no answer for it".to_owned()),
    }
}

/// What a call that runs on while its client shows a link ends with.
pub(crate) type CallOutcome = Result<ToolReply, ToolError>;

/// A call running detached from its request (2026-07-28): its task, the
/// links it may still ask for, and the answer it waits for now.
pub(crate) struct Parked {
    /// The call.
    pub call: tokio::task::JoinHandle<CallOutcome>,
    /// The links it asks for.
    pub asks: mpsc::Receiver<LinkAskFrom>,
    /// The answer the client's retry brings, under this `inputRequests` key.
    pub waiting: Option<(String, oneshot::Sender<LinkOutcome>)>,
    /// What the reply needs of the call once it ends.
    pub record: super::CallRecord,
}

/// The parked calls of one connection, by their `requestState`.
pub(crate) type ParkedCalls = Arc<Mutex<HashMap<String, Parked>>>;
