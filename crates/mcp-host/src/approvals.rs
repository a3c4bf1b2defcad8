//! Commands an agent asks to run outside the sandbox (`bash` with
//! `sandbox: "off"`) wait here for a person's decision.
//!
//! Only a person decides, and only where no MCP client reaches: the
//! page's `/approve/ap-N` (behind its sign-in and a page token) or `dsh
//! approve` on the person's own terminal (the daemon refuses clients it
//! started or that a sandbox confines). What a client answers to an
//! elicitation never approves: a client may accept or decline one on its
//! own, with no person involved. Where the client can open a link (URL-mode
//! elicitation on a protocol that lets a server ask during a call), it is
//! sent the page's link; its answer only says whether it showed it. The
//! call waits for the person until the ask timeout, or until the client
//! cancels it or goes away (the host then drops the wait, and the request
//! leaves the list).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::links::{LinkOutcome, LinkSender};
use daemon_wire::Code;
use tokio::sync::oneshot;
use tools_catalog::{Answer, Approval, Asker};

use super::super::Host;

/// How long a wait for a person lasts: `default`, or the seconds of
/// `DSH_ASK_TIMEOUT_SECS` in the daemon's environment (1 at least).
pub(super) fn person_timeout(default: Duration) -> Duration {
    std::env::var("DSH_ASK_TIMEOUT_SECS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map_or(default, |s| Duration::from_secs(s.max(1)))
}

/// A request waiting for a person.
struct Pending {
    question: String,
    command: String,
    cwd: PathBuf,
    agent: String,
    since: Instant,
    decide: oneshot::Sender<bool>,
}

/// The requests waiting for a person, by number.
#[derive(Default)]
pub(super) struct Approvals {
    pending: Mutex<BTreeMap<u64, Pending>>,
    next: AtomicU64,
}

/// What a person is shown of a waiting request: the page's own view.
pub use ui::ApprovalView;

/// Why a decision went nowhere.
#[derive(Debug, Clone)]
pub struct NoApproval(String);

impl NoApproval {
    /// The stable code: `NO_APPROVAL`.
    pub fn code(&self) -> Code {
        Code::NoApproval
    }
}

impl std::fmt::Display for NoApproval {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `ap-N` (or `N`) as a number.
fn parse_id(id: &str) -> Option<u64> {
    id.strip_prefix("ap-").unwrap_or(id).parse().ok()
}

fn view(n: u64, p: &Pending) -> ApprovalView {
    ApprovalView {
        id: format!("ap-{n}"),
        question: p.question.clone(),
        command: p.command.clone(),
        cwd: p.cwd.clone(),
        agent: p.agent.clone(),
        waited: p.since.elapsed(),
    }
}

impl Approvals {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Removes a request from the list when its wait ends, however it ends.
struct Waiting<'a>(&'a Approvals, u64);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

impl Host {
    /// The requests to run a command outside the sandbox that wait for a
    /// person, oldest first.
    pub fn waiting_approvals(&self) -> Vec<ApprovalView> {
        let pending = self.prompts.approvals.lock();
        pending.iter().map(|(n, p)| view(*n, p)).collect()
    }

    /// Request `id` (`ap-N`), while it waits.
    pub fn waiting_approval(&self, id: &str) -> Option<ApprovalView> {
        let n = parse_id(id)?;
        let pending = self.prompts.approvals.lock();
        pending.get(&n).map(|p| view(n, p))
    }

    /// A person's decision about request `id`: `run` lets the command run
    /// unconfined once; otherwise it is refused. Says what became of it.
    pub fn person_decides(&self, id: &str, run: bool) -> Result<String, NoApproval> {
        let gone = || {
            NoApproval(format!(
                "no command waits for approval as `{id}` (it was decided, or its call ended: answered, timed out or cancelled); `dsh approve` lists the waiting ones"
            ))
        };
        let n = parse_id(id).ok_or_else(gone)?;
        let pending = self.prompts.approvals.lock().remove(&n).ok_or_else(gone)?;
        if pending.decide.send(run).is_err() {
            return Err(gone());
        }
        tracing::info!(approval = %format!("ap-{n}"), agent = %pending.agent, run, "a person decided about a command outside the sandbox");
        Ok(if run {
            format!(
                "approved: ap-{n} runs outside the sandbox once, for {}",
                pending.agent
            )
        } else {
            format!("refused: ap-{n} was not run; {} is told so", pending.agent)
        })
    }
}

/// An asker that waits up to `timeout` (unless `DSH_ASK_TIMEOUT_SECS`
/// says) for a person's decision in the page or `dsh approve`, and sends
/// the client the page's link when it can open one; `None` when the host
/// serves no page (standalone: no person can be reached).
pub(crate) fn approval_asker(
    host: Arc<Host>,
    links: LinkSender,
    agent: String,
    timeout: Duration,
) -> Option<Asker> {
    host.prompts.links.get()?;
    Some(Asker::new(move |approval: Approval| {
        let (host, links, agent) = (host.clone(), links.clone(), agent.clone());
        let timeout = person_timeout(timeout);
        Box::pin(async move { wait_for_person(&host, &links, agent, approval, timeout).await })
            as futures::future::BoxFuture<'static, Answer>
    }))
}

/// What the client did with the page's link.
enum Shown {
    /// Nothing was sent: why.
    NotSent(String),
    /// Not answered yet.
    Waiting,
    /// The client said it opened it.
    Opened,
    /// The client declined or dismissed it.
    Declined,
    /// Sending failed.
    Failed(String),
}

async fn wait_for_person(
    host: &Host,
    client: &LinkSender,
    agent: String,
    approval: Approval,
    timeout: Duration,
) -> Answer {
    let Some(links) = host.prompts.links.get() else {
        return Answer::Unavailable(
            "this dsh runs standalone, so no person can be asked; run it in the sandbox, or ask the person to run it themselves".to_owned(),
        );
    };
    let approvals = &host.prompts.approvals;
    let n = approvals.next.fetch_add(1, Ordering::Relaxed) + 1;
    let id = format!("ap-{n}");
    let (decide, decided) = oneshot::channel();
    approvals.lock().insert(
        n,
        Pending {
            question: approval.question.clone(),
            command: approval.command,
            cwd: approval.cwd,
            agent,
            since: Instant::now(),
            decide,
        },
    );
    let _waiting = Waiting(approvals, n);
    let how = format!(
        "`dsh approve {id}` on the person's own terminal, or the `dsh ui` page at /approve/{id}"
    );
    if let Some(progress) = &approval.progress {
        progress.report(
            format!(
                "waiting up to {} s for a person to approve {id}: {how}",
                timeout.as_secs()
            ),
            None,
        );
    }
    let mut shown = match client {
        LinkSender::None(why) => Shown::NotSent(format!(
            "{why}, so it was not sent the link to the approval page"
        )),
        LinkSender::Request(_) | LinkSender::InputRequired(_) => Shown::Waiting,
    };
    // The link, once the client opened it, is held until the wait ends
    // (decided, timed out, the call gone): then it dies. Declined, it dies
    // at once.
    let show = async {
        let link = match links.link_to(&format!("/approve/{id}")).await {
            Ok(link) => link,
            Err(e) => {
                return (
                    Shown::Failed(format!("the page could not be started: {e}")),
                    None,
                );
            }
        };
        let message = format!(
            "An agent asks to run a command OUTSIDE the sandbox ({id}). Open the page to see it and choose Run or Refuse; only your choice there counts."
        );
        match client
            .open(
                message,
                link.url().to_owned(),
                format!("dsh-approve-{n}"),
                timeout,
            )
            .await
        {
            LinkOutcome::Opened => (Shown::Opened, Some(link)),
            LinkOutcome::NotOpened(_) => (Shown::Declined, None),
        }
    };
    let mut _link = None;
    let mut show = std::pin::pin!(show);
    let deadline = tokio::time::sleep(timeout);
    let mut deadline = std::pin::pin!(deadline);
    let mut decided = std::pin::pin!(decided);
    loop {
        tokio::select! {
            decision = &mut decided => return match decision {
                Ok(true) => Answer::Yes,
                Ok(false) => Answer::No,
                Err(_) => Answer::Unanswered(format!("{id} left the list without a decision")),
            },
            (outcome, link) = &mut show, if matches!(shown, Shown::Waiting) => {
                _link = link;
                if matches!(outcome, Shown::Declined) {
                    tracing::info!(approval = %id, "the client declined the approval page's link; the person may still decide in the page or with dsh approve");
                }
                shown = outcome;
            }
            () = &mut deadline => break,
        }
    }
    let client = match shown {
        Shown::NotSent(why) => why,
        Shown::Waiting | Shown::Opened => {
            "the client was sent the link to the approval page".to_owned()
        }
        Shown::Declined => "the client declined or dismissed the link to the approval page (a client may do so on its own, without showing it to anyone), so no person may have seen it".to_owned(),
        Shown::Failed(e) => format!("sending the client the link to the approval page failed ({e})"),
    };
    Answer::Unanswered(format!(
        "{client}, and no person decided within {} s. Nothing was run. To run it, call again and, while the call waits, have the person approve it: `dsh approve` on their own terminal lists the waiting commands and approves one, or the `dsh ui` page shows it at /approve/ap-N",
        timeout.as_secs()
    ))
}
