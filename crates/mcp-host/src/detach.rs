//! Agents outlive their client. When a connection ends while its agent
//! still has terminals or jobs, they are not ended but kept **detached**
//! for `[daemon] detach_grace`: still read (within the usual per-terminal
//! and per-job bounds), shown by `dsh ps` and the page, and taken back by
//! the same agent from a new connection with its resume key. When the
//! grace period ends they are ended and verified as when a connection
//! ends today.
//!
//! MCP gives a server no identity for "the same conversation", so the
//! agent proves it with a capability: a random key the host shows only in
//! the replies that start its work (terminals, background jobs), which
//! the conversation keeps across a client restart. An id alone never
//! takes anything back; a wrong, foreign or expired key is a structured
//! error. Taking back swaps the new connection's owner for the detached
//! one, so every id, cursor and limit is the agent's own as before.
//!
//! A key is read by nobody else and replayed by nobody:
//!
//! * each reply that shows a key mints it: it is shown there, once, to
//!   the agent it belongs to (the call's redactor was made before it
//!   existed), and remembered as a secret at once, so every later result
//!   of every agent (a client's transcript read back with `cat`, the
//!   owner's own later calls) shows `[redacted: resume key]` instead.
//!   The agent's last [`KEYS_KEPT`] keys are live together, so a key of
//!   any recent reply works;
//! * a key is single-use: a resume ends every key of the agent and the
//!   reply that resumed shows a new one; a key whose agent ended is
//!   forgotten too;
//! * a key presented while the agent it belongs to is still connected
//!   takes nothing (`RESUME_KEY_IN_USE`), unless the presenter works in
//!   the same directory (the same agent, whose client came back while
//!   its old stream had died without a word) or the connected one has
//!   sent nothing for `[daemon] detach_grace`;
//! * detached work goes back by key only to an agent working in the
//!   directory the work was started in (`RESUME_KEY_FOREIGN` elsewhere);
//!   a person may still give it to any agent (`dsh ps --give`);
//! * a call that was running when a key was minted does not show it
//!   either: its redactor is remade as it ends (and for each progress
//!   report) when a secret was remembered meanwhile.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use daemon_wire::Code;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tools_catalog::{Owner, Resume, Resumed, ToolError};

use super::{ConnectionEntry, Host};
use crate::session_log::SessionRecorder;

/// Resume keys of expired agents remembered, to say "expired" rather than
/// "unknown".
const EXPIRED_KEPT: usize = 256;

/// How long a key's presenter waits for the connection that has the key
/// to finish ending, before it is answered `RESUME_BUSY`.
const ENDING_WAIT: Duration = Duration::from_secs(3);

/// The prefix of every resume key.
pub const KEY_PREFIX: &str = "dsh-rk-";

/// How many of an agent's keys (the newest, each shown once) are live
/// together; an older one is forgotten.
pub const KEYS_KEPT: usize = 8;

/// What names a resume key in the marker that replaces it.
const KEY_KIND: &str = "resume key";

/// An agent: the owner of its terminals and jobs, and the keys that take
/// them back.
#[derive(Debug)]
pub struct Agent {
    /// Its owner.
    pub owner: Owner,
    /// Its live resume keys, newest last: each was shown once, in the
    /// reply that minted it.
    keys: Vec<String>,
}

/// Whether `presented` is one of `agent`'s live keys, compared in
/// constant time.
fn has_key(agent: &Agent, presented: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    agent
        .keys
        .iter()
        .any(|key| !key.is_empty() && bool::from(key.as_bytes().ct_eq(presented.as_bytes())))
}

/// Whether `cell`'s agent has the live key `presented`.
fn holds_key(cell: &AgentCell, presented: &str) -> bool {
    has_key(&cell.lock().unwrap_or_else(|e| e.into_inner()), presented)
}

/// Takes every live key out of `cell`'s agent.
fn take_keys(cell: &AgentCell) -> Vec<String> {
    std::mem::take(&mut cell.lock().unwrap_or_else(|e| e.into_inner()).keys)
}

/// When a connection's client last sent anything.
pub type Seen = Arc<Mutex<Instant>>;

/// A client's connection sent something now.
pub fn seen_now(seen: &Seen) {
    *seen.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
}

/// How long ago the client of `seen` sent anything.
fn silent_for(seen: &Seen) -> Duration {
    seen.lock().unwrap_or_else(|e| e.into_inner()).elapsed()
}

/// Whether keys can be minted (the system gives randomness).
pub fn can_mint() -> bool {
    getrandom::fill(&mut [0u8; 1]).is_ok()
}

/// Serialises the take-backs into one connection, and its end with them:
/// a connection swaps its agent at most once at a time, and never while
/// it is ending.
pub type TakeBackLock = Arc<tokio::sync::Mutex<()>>;

/// The agent a connection acts as; a resume swaps it.
pub type AgentCell = Arc<Mutex<Agent>>;

/// A fresh agent labelled `label`, with no key yet (the first reply
/// that starts its work mints one).
pub fn new_agent(label: &str) -> AgentCell {
    Arc::new(Mutex::new(Agent {
        owner: Owner::new(label),
        keys: Vec::new(),
    }))
}

/// 128 random bits, as a key. Without randomness there is no capability:
/// the key is then one nobody can present (a resume fails as unknown).
fn new_key() -> String {
    let mut bytes = [0u8; 16];
    match getrandom::fill(&mut bytes) {
        Ok(()) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("{KEY_PREFIX}{hex}")
        }
        Err(e) => {
            tracing::error!("no randomness for a resume key: {e}");
            String::new()
        }
    }
}

/// The agent of `cell` now: its owner and its newest live key (empty
/// when none was shown yet).
pub fn current(cell: &AgentCell) -> (Owner, String) {
    let agent = cell.lock().unwrap_or_else(|e| e.into_inner());
    (
        agent.owner.clone(),
        agent.keys.last().cloned().unwrap_or_default(),
    )
}

/// A connection's work kept after its client went away.
#[derive(Debug, Clone)]
pub struct Detached {
    /// When the client went away.
    pub since: SystemTime,
    /// When the work is ended unless taken back.
    pub until: SystemTime,
    /// Cancelled when it is taken back or ended early.
    pub cancel: CancellationToken,
}

/// Keys that take nothing any more, newest last: those of agents whose
/// grace period ended, and those a resume used.
#[derive(Debug, Default)]
pub struct Expired {
    expired: Mutex<VecDeque<String>>,
    used: Mutex<VecDeque<String>>,
}

/// Adds `keys` to `list`, keeping the newest [`EXPIRED_KEPT`].
fn keep(list: &Mutex<VecDeque<String>>, keys: Vec<String>) {
    let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
    for key in keys.into_iter().filter(|k| !k.is_empty()) {
        if list.len() >= EXPIRED_KEPT {
            list.pop_front();
        }
        list.push_back(key);
    }
}

/// Whether `list` has `key`.
fn kept(list: &Mutex<VecDeque<String>>, key: &str) -> bool {
    let list = list.lock().unwrap_or_else(|e| e.into_inner());
    !key.is_empty() && list.iter().any(|k| k == key)
}

impl Expired {
    fn remember(&self, keys: Vec<String>) {
        keep(&self.expired, keys);
    }

    fn contains(&self, key: &str) -> bool {
        kept(&self.expired, key)
    }

    fn remember_used(&self, keys: Vec<String>) {
        keep(&self.used, keys);
    }

    fn was_used(&self, key: &str) -> bool {
        kept(&self.used, key)
    }
}

/// "2 terminals, 1 job".
fn work_words(terminals: usize, jobs: usize) -> String {
    let plural = |n: usize, one: &str| {
        if n == 1 {
            format!("1 {one}")
        } else {
            format!("{n} {one}s")
        }
    };
    format!("{}, {}", plural(terminals, "terminal"), plural(jobs, "job"))
}

impl Host {
    /// A new key for the agent of `cell`, shown once by the caller: live
    /// from now on, and redacted from every later result. Empty without
    /// randomness.
    fn mint_key(&self, cell: &AgentCell) -> String {
        let key = new_key();
        if key.is_empty() {
            return key;
        }
        self.runtime.remember_secret(KEY_KIND, &key);
        let dropped: Vec<String> = {
            let mut agent = cell.lock().unwrap_or_else(|e| e.into_inner());
            agent.keys.push(key.clone());
            let over = agent.keys.len().saturating_sub(KEYS_KEPT);
            agent.keys.drain(..over).collect()
        };
        self.forget_keys(&dropped);
        key
    }

    /// Keys that take nothing any more are no secret to keep redacting.
    fn forget_keys(&self, keys: &[String]) {
        for key in keys {
            self.runtime.forget_secret(key);
        }
    }

    /// The agent of `cell` ended: its keys take nothing any more.
    pub(super) fn retire_keys(&self, cell: &AgentCell) {
        self.forget_keys(&take_keys(cell));
    }

    /// How many terminals and jobs `owner` has (jobs settled or not).
    pub async fn work_of(&self, owner: &Owner) -> (usize, usize) {
        let terminals = self.runtime.terminals.list(owner).await.len();
        let jobs = self.runtime.jobs.list(owner, None).len();
        (terminals, jobs)
    }

    /// Keeps connection `id`'s work detached for `grace`, then ends it.
    /// The connection's recorder stays open meanwhile (the session log
    /// records the detach, and later the resume or the expiry).
    pub(super) fn detach(self: &Arc<Self>, id: u64, grace: Duration, work: (usize, usize)) {
        let cancel = CancellationToken::new();
        let now = SystemTime::now();
        let recorder = {
            let mut entries = self.entries();
            let Some(entry) = entries.get_mut(&id) else {
                return;
            };
            entry.detached = Some(Detached {
                since: now,
                until: now + grace,
                cancel: cancel.clone(),
            });
            entry.recorder.clone()
        };
        recorder.event(
            "detach",
            &format!(
                "the client went away; {} kept for {} s",
                work_words(work.0, work.1),
                grace.as_secs()
            ),
        );
        tracing::info!(
            connection = id,
            grace_s = grace.as_secs(),
            "client went away: its terminals and jobs are kept detached"
        );
        self.changed.notify_waiters();
        let host = Arc::clone(self);
        tokio::spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(grace) => {
                    host.end_detached_one(id, "expire").await;
                }
                () = cancel.cancelled() => {}
            }
        });
    }

    /// Ends detached connection `id`'s work (verified) and its session:
    /// `why` is `expire` (its grace period ended), `end` (a person ended
    /// it) or `stop` (the daemon stops).
    async fn end_detached_one(&self, id: u64, why: &str) -> bool {
        let taken = {
            let mut entries = self.entries();
            match entries.get(&id) {
                Some(e) if e.detached.is_some() => entries.remove(&id).inspect(|e| {
                    // In the same hold: a key presented meanwhile is found
                    // either detached or expired, never unknown.
                    let keys = take_keys(&e.agent);
                    self.forget_keys(&keys);
                    self.expired.remember(keys);
                }),
                _ => None,
            }
        };
        let Some(entry) = taken else { return false };
        if let Some(d) = &entry.detached {
            d.cancel.cancel();
        }
        let owner = current(&entry.agent).0;
        let (terminals, jobs) = self.work_of(&owner).await;
        let summary = match why {
            "expire" => "the grace period ended",
            "end" => "a person ended it",
            _ => "the dsh daemon stopped",
        };
        entry.recorder.event(
            "expire",
            &format!("{summary}: {} ended", work_words(terminals, jobs)),
        );
        tracing::info!(connection = id, why, "detached terminals and jobs ended");
        let recorder = entry.recorder.clone();
        drop(entry);
        tokio::join!(
            self.runtime.end_owner(&owner),
            recorder.finish(Duration::from_secs(2)),
        );
        self.changed.notify_waiters();
        true
    }

    /// Ends every detached connection's work (the daemon stops).
    pub async fn end_detached(&self) {
        let ids: Vec<u64> = self
            .entries()
            .iter()
            .filter(|(_, e)| e.detached.is_some())
            .map(|(id, _)| *id)
            .collect();
        futures::future::join_all(ids.into_iter().map(|id| self.end_detached_one(id, "stop")))
            .await;
    }

    /// A person ends detached connection `id`'s work now (`dsh ps` shows
    /// the ids). False when `id` is not a detached connection.
    pub async fn end_detached_now(&self, id: u64) -> bool {
        self.end_detached_one(id, "end").await
    }

    /// A person gives detached connection `id`'s work to connected agent
    /// `to`, as if that agent had presented the key.
    pub async fn give_detached(&self, id: u64, to: u64) -> Result<Resumed, ToolError> {
        let (target, recorder, lock) = {
            let entries = self.entries();
            if entries.get(&id).is_none_or(|e| e.detached.is_none()) {
                return Err(ToolError::new(
                    Code::NoDetached,
                    format!("connection {id} is not detached work (dsh ps lists what is)"),
                ));
            }
            let Some(target) = entries.get(&to).filter(|e| e.detached.is_none()) else {
                return Err(ToolError::new(
                    Code::NoConnection,
                    format!("no connected agent is connection {to} (dsh ps lists them)"),
                ));
            };
            (
                Arc::clone(&target.agent),
                target.recorder.clone(),
                Arc::clone(&target.take_back),
            )
        };
        self.take_back(Wanted::Connection(id), &target, to, &recorder, &lock)
            .await
    }

    /// Makes the detached agent `wanted` the agent of connection `id`
    /// (whose cell is `into`).
    pub(super) async fn take_back(
        &self,
        wanted: Wanted<'_>,
        into: &AgentCell,
        id: u64,
        recorder: &SessionRecorder,
        lock: &TakeBackLock,
    ) -> Result<Resumed, ToolError> {
        let _one_at_a_time = lock.lock().await;
        let mine = current(into).0;
        if let Wanted::Key(key) = wanted
            && holds_key(into, key)
        {
            return Ok(Resumed {
                owner: mine,
                detached_for: Duration::ZERO,
            });
        }
        let (terminals, jobs) = self.work_of(&mine).await;
        let mut claim = self.claim(wanted, into, id, terminals + jobs > 0);
        // A connection that is ending holds its lock for moments, until
        // its work is detached: wait for that, a while, rather than answer
        // busy to the client that reconnected for it.
        let deadline = tokio::time::Instant::now() + ENDING_WAIT;
        while let Claim::Ending(its_lock) = &claim {
            if tokio::time::timeout_at(deadline, its_lock.lock())
                .await
                .is_err()
            {
                claim = Claim::Busy;
                break;
            }
            claim = self.claim(wanted, into, id, terminals + jobs > 0);
        }
        let (from, entry, taken) = match claim {
            Claim::Detached { from, entry, taken } => (from, entry, taken),
            Claim::TakenOver {
                from,
                recorder: from_recorder,
                closed,
                taken,
            } => {
                return Ok(self
                    .taken_over(from, from_recorder, closed, taken, id, recorder)
                    .await);
            }
            Claim::Busy | Claim::Ending(_) => {
                return Err(ToolError::retryable(
                    Code::ResumeBusy,
                    "the work of this key is changing hands right now; try again in a moment",
                ));
            }
            Claim::NotEmpty => {
                return Err(ToolError::new(
                    Code::ResumeNotEmpty,
                    format!(
                        "this connection already has work of its own ({}); resume before starting any, or in a new connection",
                        work_words(terminals, jobs)
                    ),
                ));
            }
            Claim::Foreign => {
                return Err(ToolError::new(
                    Code::ResumeKeyForeign,
                    "this resume key's work was started in another directory, and only an agent working there takes it back; start work of your own here, or ask the person to give it to you (`dsh ps --give N --to M`)",
                ));
            }
            Claim::InUse => {
                return Err(ToolError::new(
                    Code::ResumeKeyInUse,
                    "the agent this resume key belongs to is still connected, from another directory, and keeps its work; if it is yours and its client is gone, present the key again once `dsh ps` shows its work detached, else start work of your own",
                ));
            }
            Claim::Unknown if wanted.key().is_some_and(|k| self.expired.contains(k)) => {
                return Err(ToolError::new(
                    Code::ResumeExpired,
                    "the grace period of this resume key ended: its terminals and jobs were closed; start new ones",
                ));
            }
            Claim::Unknown if wanted.key().is_some_and(|k| self.expired.was_used(k)) => {
                return Err(ToolError::new(
                    Code::ResumeKeyUnknown,
                    "this resume key was already used: a key takes work back once, and the reply that did so gave a new one; pass the newest key a reply gave you",
                ));
            }
            Claim::Unknown if matches!(wanted, Wanted::Connection(_)) => {
                return Err(ToolError::new(
                    Code::NoDetached,
                    "that connection's work is no longer detached (dsh ps lists what is)",
                ));
            }
            Claim::Unknown => {
                return Err(ToolError::new(
                    Code::ResumeKeyUnknown,
                    format!(
                        "no detached work has this resume key; pass the key ({KEY_PREFIX}…) exactly as an earlier reply of yours gave it"
                    ),
                ));
            }
        };
        let detached_for = entry
            .detached
            .as_ref()
            .map(|d| d.since.elapsed().unwrap_or_default())
            .unwrap_or_default();
        // The connection's own (empty) agent is over.
        self.runtime.end_owner(&mine).await;
        let (terminals, jobs) = self.work_of(&taken).await;
        let old_session = entry
            .recorder
            .session_id()
            .map_or_else(|| "?".to_owned(), |s| s.to_string());
        entry.recorder.event(
            "resume",
            &format!(
                "taken back by connection {id} after {} s: {}",
                detached_for.as_secs(),
                work_words(terminals, jobs)
            ),
        );
        recorder.event(
            "resume",
            &format!(
                "took back session {old_session} after {} s: {}",
                detached_for.as_secs(),
                work_words(terminals, jobs)
            ),
        );
        tracing::info!(
            from,
            to = id,
            after_s = detached_for.as_secs(),
            "detached terminals and jobs taken back"
        );
        let old = entry.recorder.clone();
        drop(entry);
        tokio::spawn(old.finish(Duration::from_secs(2)));
        self.changed.notify_waiters();
        Ok(Resumed {
            owner: taken,
            detached_for,
        })
    }
}

/// The agent a take-back is for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Wanted<'a> {
    /// The one with this live key (a `terminal_list` resume).
    Key(&'a str),
    /// The one of this detached connection (a person gives it).
    Connection(u64),
}

impl Wanted<'_> {
    /// The key presented, if one was.
    fn key(&self) -> Option<&str> {
        match self {
            Self::Key(key) => Some(key),
            Self::Connection(_) => None,
        }
    }
}

/// What presenting a key found. It is decided, and the agents swapped,
/// in one hold of the connections: a key changing hands between two
/// connections is never missed by a look in between.
enum Claim {
    /// No connection's agent has the key.
    Unknown,
    /// The agent that has it is connected elsewhere and still speaking.
    InUse,
    /// Its work is detached, but the key came from an agent working in
    /// another directory.
    Foreign,
    /// Found, but the presenting connection has work of its own.
    NotEmpty,
    /// The connection that has it is taking back work right now.
    Busy,
    /// The connection that has it is ending right now; it holds this lock
    /// until its work is detached.
    Ending(TakeBackLock),
    /// Taken from detached connection `from`, whose entry is removed.
    Detached {
        from: u64,
        entry: ConnectionEntry,
        taken: Owner,
    },
    /// Taken over from connection `from`, which still counts as connected.
    TakenOver {
        from: u64,
        recorder: SessionRecorder,
        closed: CancellationToken,
        taken: Owner,
    },
}

/// Swaps the agents of `a` and `b`; the owner now in `b`. Every key of
/// both is used up (returned): the one presented was for this one
/// take-back, and the agent now in `a` is left with nothing to take.
fn swap_agents(a: &AgentCell, b: &AgentCell) -> (Owner, Vec<String>) {
    let mut a = a.lock().unwrap_or_else(|e| e.into_inner());
    let mut b = b.lock().unwrap_or_else(|e| e.into_inner());
    std::mem::swap(&mut *a, &mut *b);
    let mut used = std::mem::take(&mut a.keys);
    used.append(&mut b.keys);
    (b.owner.clone(), used)
}

/// The directory a connection's calls run in, once known.
fn dir_of(entry: &ConnectionEntry) -> Option<PathBuf> {
    entry.cwd.borrow().clone()
}

impl Host {
    /// Finds the connection other than `id` whose agent is `wanted` and,
    /// unless `has_work`, swaps that agent into `into`.
    fn claim(&self, wanted: Wanted<'_>, into: &AgentCell, id: u64, has_work: bool) -> Claim {
        let mut entries = self.entries();
        let mine = entries.get(&id).and_then(dir_of);
        let Some((&from, entry)) = entries.iter().find(|(other, e)| {
            **other != id
                && match wanted {
                    Wanted::Key(key) => holds_key(&e.agent, key),
                    Wanted::Connection(c) => **other == c && e.detached.is_some(),
                }
        }) else {
            return Claim::Unknown;
        };
        let same_agent = mine.is_some() && mine == dir_of(entry);
        if entry.detached.is_none() {
            // Its agent is connected. A key read where it was left (a
            // client's transcript) takes nothing from it: only the same
            // agent (working in the same directory) takes over a stream
            // that died without a word, or anyone once it has said
            // nothing for a whole grace period.
            if !same_agent && silent_for(&entry.seen) < self.config.detach_grace {
                return Claim::InUse;
            }
        } else if matches!(wanted, Wanted::Key(_)) && !same_agent {
            // Detached work goes back by key only to an agent working in
            // the directory it was started in: a client restarted for the
            // same project. A key leaked to an agent elsewhere gives it no
            // terminal in a workspace its own sandbox keeps it out of; a
            // person can still give the work (`dsh ps --give`).
            return Claim::Foreign;
        }
        if has_work {
            return Claim::NotEmpty;
        }
        if entry.detached.is_none() {
            // Its client presented the key from a new connection, so the old
            // one is a stream that died without a word (a network gone quiet
            // keeps a connection open for as long as the transport takes to
            // notice). Unless it is ending or taking back work of its own
            // right now: then it is not the one to take from yet.
            let Ok(_its_turn) = entry.take_back.try_lock() else {
                return if entry.closed.is_cancelled() {
                    Claim::Ending(Arc::clone(&entry.take_back))
                } else {
                    Claim::Busy
                };
            };
            let (taken, used) = swap_agents(&entry.agent, into);
            self.used_up(used);
            return Claim::TakenOver {
                from,
                recorder: entry.recorder.clone(),
                closed: entry.closed.clone(),
                taken,
            };
        }
        let Some(entry) = entries.remove(&from) else {
            return Claim::Unknown;
        };
        if let Some(d) = &entry.detached {
            d.cancel.cancel();
        }
        let (taken, used) = swap_agents(&entry.agent, into);
        self.used_up(used);
        Claim::Detached { from, entry, taken }
    }

    /// `keys` were used by a take-back: they take nothing again.
    fn used_up(&self, keys: Vec<String>) {
        self.forget_keys(&keys);
        self.expired.remember_used(keys);
    }

    /// Connection `id` took over the agent `taken` of connection `from`:
    /// records it and ends the old connection, whose agent is now the new
    /// connection's former, empty one.
    async fn taken_over(
        &self,
        from: u64,
        from_recorder: SessionRecorder,
        from_closed: CancellationToken,
        taken: Owner,
        id: u64,
        recorder: &SessionRecorder,
    ) -> Resumed {
        let (terminals, jobs) = self.work_of(&taken).await;
        let old_session = from_recorder
            .session_id()
            .map_or_else(|| "?".to_owned(), |s| s.to_string());
        from_recorder.event(
            "resume",
            &format!(
                "taken over by connection {id}, whose client presented the resume key while this connection still seemed open: {}",
                work_words(terminals, jobs)
            ),
        );
        recorder.event(
            "resume",
            &format!(
                "took over session {old_session} from connection {from}, which still seemed open: {}",
                work_words(terminals, jobs)
            ),
        );
        // The old connection ends: its calls in flight stop at once (the
        // sends they made go on, their output kept for the new owner), and
        // its client, if one is still there, sees the connection close.
        from_closed.cancel();
        tracing::info!(
            from,
            to = id,
            "terminals and jobs taken over from an open connection"
        );
        self.changed.notify_waiters();
        Resumed {
            owner: taken,
            detached_for: Duration::ZERO,
        }
    }
}

/// A connection's side of [`Resume`].
pub struct ConnectionResume {
    pub(super) host: Arc<Host>,
    pub(super) agent: AgentCell,
    pub(super) id: u64,
    pub(super) recorder: SessionRecorder,
    pub(super) lock: TakeBackLock,
    /// The redactor of the call whose reply shows the keys minted here.
    pub(super) shows: Arc<tools_catalog::redaction::LiveRedactor>,
}

impl std::fmt::Debug for ConnectionResume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionResume")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Resume for ConnectionResume {
    /// A new key, for the reply that shows it (see the module's notes).
    fn key(&self) -> String {
        let key = self.host.mint_key(&self.agent);
        self.shows.may_show(&key);
        key
    }

    fn resume<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Resumed, ToolError>> {
        Box::pin(self.host.take_back(
            Wanted::Key(key),
            &self.agent,
            self.id,
            &self.recorder,
            &self.lock,
        ))
    }
}
