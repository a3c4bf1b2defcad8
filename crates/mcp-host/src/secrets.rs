//! Secret prompts are answered by a person, never through the model.
//!
//! When an agent's send settles on a secret prompt (a program reads the
//! terminal with echo off: `sudo`, `ssh`, `ssh-keygen`, `gpg`, a database
//! client), the tool layer asks [`ConnectionSecrets`]. Where the MCP client
//! can do URL-mode elicitation (the protocol's mode for sensitive input:
//! the client opens a URL and never sees what the person enters there),
//! the person is sent to the page's `/answer/pty-N`, which shows the agent,
//! the terminal, the prompt and the command beside a password box; what
//! they type goes browser → daemon → the waiting send, which types it.
//! Elsewhere the reply tells the model, in one line, how a person answers:
//! `dsh answer pty-N` on their own terminal (read with echo off), the
//! page, or `dsh attach pty-N --write`.
//!
//! The client's answer to the elicitation says only whether it opened the
//! page: a client may decline or dismiss it on its own, with nobody having
//! seen it. Opened, the send waits for the page or `dsh answer` until the
//! answer timeout; not opened, the reply says at once that no one
//! answered (never that the person declined) and how a person answers,
//! and the prompt waits on for them.
//!
//! A person's answer for a terminal with a waiting send goes to that send
//! ([`Host::person_answers`]); otherwise it is typed at once, and only
//! while a program waits with echo off. The answer is held in memory that
//! is wiped when dropped, and never written to a log, the store or a reply.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use futures::future::BoxFuture;
use terminal_seam::{AnswerError, TerminalId};
use tokio::sync::oneshot;
use tools_catalog::{Owner, SecretAsked, SecretPrompts};
use zeroize::Zeroizing;

use super::Host;

#[path = "approvals.rs"]
mod approvals;
pub(super) use approvals::approval_asker;

/// How long a person may take to answer (unless `DSH_ASK_TIMEOUT_SECS`
/// says), counted from the ask.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);

/// Links to the page, given by the daemon once it can serve it.
pub trait PageLinks: Send + Sync {
    /// A link that opens `path` alone, once; it dies when dropped (held
    /// while the prompt it is for waits).
    fn link_to<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<ui::PageLink, String>>;
}

/// A send waiting for a person's answer.
struct Pending {
    /// Which ask it is (a later ask on the same terminal replaces it).
    ask: u64,
    prompt: String,
    command: String,
    agent: String,
    answer: oneshot::Sender<Zeroizing<String>>,
}

/// The prompts waiting for a person, by terminal.
#[derive(Default)]
pub struct Prompts {
    pending: Mutex<HashMap<TerminalId, Pending>>,
    links: OnceLock<Arc<dyn PageLinks>>,
    /// Commands waiting for a person's approval to run unconfined.
    approvals: approvals::Approvals,
}

/// What the page shows about a terminal's secret prompt.
#[derive(Debug, Clone)]
pub struct PromptView {
    /// The prompt's text (the last line the program printed).
    pub prompt: String,
    /// The terminal's command.
    pub command: String,
    /// The agent (its client's name).
    pub agent: String,
    /// Whether an agent's send waits for this answer.
    pub waiting: bool,
    /// Who reads the answer and what to beware of (see
    /// [`Host::reader_facts`]); `None` when it cannot be told.
    pub reader: Option<String>,
}

/// What a person is told about the process that reads a secret prompt
/// before answering it, and whether an answer is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReaderFacts {
    /// One or two sentences: the executable, and a warning when it is a
    /// shell or interpreter, or a `sudo`/`su` prompt that cannot be real.
    pub text: String,
    /// Set when no answer is typed there at all: why.
    pub refused: Option<String>,
}

/// Executables that read a secret only for a script: whatever the prompt
/// says, the script decides what becomes of the answer.
fn is_shell_or_interpreter(name: &str) -> bool {
    const EXACT: &[&str] = &[
        "bash", "sh", "zsh", "dash", "ksh", "mksh", "ash", "fish", "csh", "tcsh", "busybox",
        "node", "nodejs", "deno", "bun", "expect", "tclsh", "wish", "Rscript", "R", "osh",
        "elvish", "nu", "xonsh", "pwsh", "awk", "gawk", "mawk",
    ];
    const PREFIXES: &[&str] = &["python", "perl", "ruby", "php", "lua", "tclsh", "pypy"];
    EXACT.contains(&name) || PREFIXES.iter().any(|p| name.starts_with(p))
}

/// Programs that ask for a password to gain privileges: under
/// `no_new_privs` none of them can.
fn is_privilege_program(name: &str) -> bool {
    ["sudo", "su", "doas", "pkexec", "sudoedit", "run0"].contains(&name)
}

/// Whether a prompt's text claims to be `sudo`'s or `su`'s.
fn claims_privileges(prompt: &str) -> bool {
    let lower = prompt.to_ascii_lowercase();
    lower.contains("[sudo]") || lower.contains("sudo password") || lower.contains("doas (")
}

/// What to tell a person about `reader`, which reads a prompt showing
/// `prompt` (see [`ReaderFacts`]).
pub fn reader_facts(reader: &terminal_seam::SecretReader, prompt: &str) -> ReaderFacts {
    let base = reader
        .exe
        .as_ref()
        .and_then(|e| e.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| reader.name.clone());
    let shown = reader.exe.as_ref().map_or_else(
        || format!("{} (its executable is hidden)", reader.name),
        |e| e.display().to_string(),
    );
    let mut text = format!("The program reading it is {shown} (pid {}).", reader.pid);
    let mut refused = None;
    let pretends = claims_privileges(prompt) || is_privilege_program(&base);
    if reader.no_new_privs && pretends {
        text.push_str(
            " It runs inside dsh's sandbox, where sudo and su cannot work: this sudo/su prompt cannot be real.",
        );
        refused = Some(format!(
            "refused: the prompt claims to be sudo's or su's, but {shown} runs inside dsh's sandbox, where no password can raise privileges; it cannot be real, so nothing was typed (run the command yourself outside dsh if you meant it)"
        ));
    }
    if is_shell_or_interpreter(&base) {
        text.push_str(&format!(
            " WARNING: {base} is a shell or interpreter, not a program that authenticates: a script reads this answer and may store it or send it anywhere, whatever its prompt says. Answer only if you know the script and why it asks."
        ));
    }
    ReaderFacts { text, refused }
}

impl Prompts {
    fn take(&self, id: TerminalId) -> Option<Pending> {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&id)
    }
}

/// Removes an ask's entry when the ask ends, however it ends (answered,
/// declined, timed out, or the call dropped), unless a later ask on the
/// same terminal replaced it.
struct AskGuard<'a> {
    prompts: &'a Prompts,
    id: TerminalId,
    ask: u64,
}

impl Drop for AskGuard<'_> {
    fn drop(&mut self) {
        let mut pending = self
            .prompts
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if pending.get(&self.id).is_some_and(|p| p.ask == self.ask) {
            pending.remove(&self.id);
        }
    }
}

impl Host {
    /// Lets secret prompts send people to the page (the daemon calls it
    /// once; a standalone server has no page).
    pub fn set_page_links(&self, links: Arc<dyn PageLinks>) {
        let _ = self.prompts.links.set(links);
    }

    /// The prompt terminal `id` shows, when an agent's send waits for a
    /// person to answer it.
    pub fn waiting_prompt(&self, id: TerminalId) -> Option<PromptView> {
        let pending = self
            .prompts
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let view = pending.get(&id).map(|p| PromptView {
            prompt: p.prompt.clone(),
            command: p.command.clone(),
            agent: p.agent.clone(),
            waiting: true,
            reader: None,
        });
        drop(pending);
        view.map(|mut v| {
            v.reader = self.reader_facts(id, &v.prompt).map(|f| f.text);
            v
        })
    }

    /// Who reads terminal `id`'s secret prompt now (its text `prompt`),
    /// as a person is told before answering; `None` when no program
    /// waits for a secret there or it cannot be told.
    pub fn reader_facts(&self, id: TerminalId, prompt: &str) -> Option<ReaderFacts> {
        let reader = terminal_seam::PersonViews::secret_reader(&*self.terminals, id)?;
        Some(reader_facts(&reader, prompt))
    }

    /// Remembers a person's answer typed some other way (`dsh attach
    /// --write` while a secret prompt waits): no later result,
    /// notification or log line of any agent shows it.
    pub fn remember_answer(&self, answer: &str) {
        self.runtime.remember_secret("answer", answer);
    }

    /// Why no answer may be typed into terminal `id` now (a `sudo`/`su`
    /// prompt inside the sandbox); `None` when one may.
    pub fn answer_refused(&self, id: TerminalId) -> Option<String> {
        let prompt = self.screen_prompt(id).unwrap_or_default();
        self.reader_facts(id, &prompt)?.refused
    }

    /// What `dsh answer` shows before reading the answer for terminal
    /// `id`: the prompt, who reads it and any warning.
    pub fn answer_question(&self, id: TerminalId) -> String {
        let prompt = self
            .waiting_prompt(id)
            .map(|p| p.prompt)
            .or_else(|| self.screen_prompt(id))
            .unwrap_or_default();
        match self.reader_facts(id, &prompt) {
            Some(facts) => format!(
                "{id} asks: \u{ab}{prompt}\u{bb}\n{}{}",
                facts.text,
                facts
                    .refused
                    .map(|r| format!("\nAn answer would be {r}."))
                    .unwrap_or_default()
            ),
            None => format!(
                "{id} does not wait for a secret now (no program reads it with echo off); an answer is typed only if one does by then."
            ),
        }
    }

    /// The last line terminal `id` shows.
    fn screen_prompt(&self, id: TerminalId) -> Option<String> {
        let screen = terminal_seam::PersonViews::screen_copy(&*self.terminals, id).ok()?;
        screen
            .lines
            .iter()
            .rev()
            .map(|runs| runs.iter().map(|r| r.text.as_str()).collect::<String>())
            .find(|l| !l.trim().is_empty())
            .map(|l| l.trim().to_owned())
    }

    /// A person answers terminal `id`'s secret prompt: handed to the
    /// agent's send that waits for it, or else typed at once (only while
    /// a program waits with echo off). Says which.
    pub async fn person_answers(
        &self,
        id: TerminalId,
        secret: Zeroizing<String>,
    ) -> Result<&'static str, AnswerError> {
        // Whatever the program does with it (a script may write it to a
        // file), no later result, notification or log line of any agent
        // shows it.
        self.runtime.remember_secret("answer", &secret);
        let prompt = self
            .waiting_prompt(id)
            .map(|p| p.prompt)
            .or_else(|| self.screen_prompt(id))
            .unwrap_or_default();
        if let Some(refused) = self.reader_facts(id, &prompt).and_then(|f| f.refused) {
            tracing::warn!(terminal = %id, "refused a person's answer to a sudo/su prompt inside the sandbox");
            return Err(AnswerError::Refused { id, why: refused });
        }
        let secret = match self.prompts.take(id) {
            Some(pending) => match pending.answer.send(secret) {
                Ok(()) => {
                    return Ok(
                        "handed to the agent's waiting send, which types it if the program still asks for it",
                    );
                }
                // The send gave up meanwhile: type it like any answer.
                Err(secret) => secret,
            },
            None => secret,
        };
        terminal_seam::PersonViews::answer_secret(&*self.terminals, id, secret.as_bytes()).await?;
        Ok("typed into the terminal")
    }
}

/// A connection's side of [`SecretPrompts`].
pub struct ConnectionSecrets {
    pub(super) host: Arc<Host>,
    /// How the call reaches its client with the page's link.
    pub(super) links: super::links::LinkSender,
    pub(super) agent: String,
}

impl std::fmt::Debug for ConnectionSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionSecrets")
            .field("agent", &self.agent)
            .finish_non_exhaustive()
    }
}

/// How a person answers when the client cannot ask them.
fn how_to_answer(id: TerminalId) -> String {
    format!(
        "a person must answer this prompt; you never see the answer: they run `dsh answer {id}` in their own terminal (it reads the answer with echo off), or use the page (`dsh ui`) or `dsh attach {id} --write`; then read what followed with terminal_read"
    )
}

impl ConnectionSecrets {
    async fn command_of(&self, owner: &Owner, id: TerminalId) -> String {
        self.host
            .runtime
            .terminals
            .list(owner)
            .await
            .into_iter()
            .find(|t| t.id == id)
            .map(|t| t.command.join(" "))
            .unwrap_or_default()
    }

    async fn ask_in_client(
        &self,
        owner: &Owner,
        id: TerminalId,
        prompt: &str,
        sent: &str,
    ) -> SecretAsked {
        let Some(links) = self.host.prompts.links.get() else {
            return SecretAsked::NotAsked(
                "a person must type the answer into the program; this dsh runs standalone, so it cannot ask them; you never see the answer".to_owned(),
            );
        };
        if let Some(refused) = self.host.reader_facts(id, prompt).and_then(|f| f.refused) {
            return SecretAsked::NotAsked(format!(
                "no person is asked: {refused}; a sudo or su prompt inside the sandbox is never genuine"
            ));
        }
        if !self.links.can_open() {
            return SecretAsked::NotAsked(how_to_answer(id));
        }
        // Held until this ask ends, however it ends: then the link dies.
        let link = match links.link_to(&format!("/answer/{id}")).await {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!("no page for a secret prompt: {e}");
                return SecretAsked::NotAsked(how_to_answer(id));
            }
        };
        let command = match sent.trim() {
            "" => self.command_of(owner, id).await,
            sent => sent.to_owned(),
        };
        let (answer, answered) = oneshot::channel();
        static ASKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let ask = ASKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.host
            .prompts
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                id,
                Pending {
                    ask,
                    prompt: prompt.to_owned(),
                    command: command.clone(),
                    agent: self.agent.clone(),
                    answer,
                },
            );
        let _ask = AskGuard {
            prompts: &self.host.prompts,
            id,
            ask,
        };
        let timeout = approvals::person_timeout(ANSWER_TIMEOUT);
        let reader = self
            .host
            .reader_facts(id, prompt)
            .map(|f| format!(" {}", f.text))
            .unwrap_or_default();
        let opened = self.links.open(
            format!(
                "{id} (`{command}`) asks for a secret: \u{ab}{prompt}\u{bb}.{reader} Answer it in the page this opens; the agent never sees it."
            ),
            link.url().to_owned(),
            format!("dsh-answer-{id}-{}", owner.serial()),
            timeout,
        );
        let mut opened = std::pin::pin!(opened);
        let answered = tokio::time::timeout(timeout, answered);
        let mut answered = std::pin::pin!(answered);
        // The client's answer only says whether it showed the page; the
        // person's answer comes from the page or `dsh answer`. A link the
        // client did not open was seen by no one known: the reply says so
        // at once (the model can tell the person how to answer) instead
        // of holding the send until the timeout, and the prompt waits on.
        let mut waiting_for_client = true;
        let answer = loop {
            tokio::select! {
                answer = &mut answered => break answer,
                outcome = &mut opened, if waiting_for_client => {
                    waiting_for_client = false;
                    if let super::links::LinkOutcome::NotOpened(why) = outcome {
                        tracing::info!(terminal = %id, "the answer page's link was not opened ({why})");
                        return SecretAsked::NotAsked(format!(
                            "no one answered: {why} (a client may do so on its own, without showing the link to anyone); the prompt still waits, and {}",
                            how_to_answer(id)
                        ));
                    }
                }
            }
        };
        match answer {
            // The program may have given up meanwhile (a login's grace
            // time): an answer is typed only where a secret is read.
            Ok(Ok(_))
                if !terminal_seam::PersonViews::waits_for_secret(&*self.host.terminals, id) =>
            {
                SecretAsked::NotAsked(format!(
                    "the person answered, but {id} no longer waits for a secret (the program gave up or moved on), so nothing was typed; read it with terminal_read"
                ))
            }
            Ok(Ok(secret)) => {
                tracing::info!(terminal = %id, "a person answered a secret prompt");
                SecretAsked::Answered(secret)
            }
            Ok(Err(_)) | Err(_) => SecretAsked::NotAsked(format!(
                "no one answered within {} s; the prompt still waits, and {}",
                timeout.as_secs(),
                how_to_answer(id)
            )),
        }
    }
}

impl SecretPrompts for ConnectionSecrets {
    fn ask<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        prompt: &'a str,
        sent: &'a str,
    ) -> BoxFuture<'a, SecretAsked> {
        Box::pin(self.ask_in_client(owner, id, prompt, sent))
    }
}
