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

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;
use tools_catalog::{Owner, Resume, Resumed, ToolError};

use super::Host;
use crate::session_log::SessionRecorder;

/// Resume keys of expired agents remembered, to say "expired" rather than
/// "unknown".
const EXPIRED_KEPT: usize = 256;

/// The prefix of every resume key.
pub const KEY_PREFIX: &str = "dsh-rk-";

/// An agent: the owner of its terminals and jobs, and the key that takes
/// them back.
#[derive(Debug)]
pub struct Agent {
    /// Its owner.
    pub owner: Owner,
    /// Its resume key (empty when the system gave no randomness: then
    /// none is shown and nothing can be taken back).
    pub key: String,
}

/// Whether `key` is `presented`, compared in constant time.
fn same_key(key: &str, presented: &str) -> bool {
    use subtle::ConstantTimeEq as _;
    !key.is_empty() && bool::from(key.as_bytes().ct_eq(presented.as_bytes()))
}

/// Serialises the take-backs into one connection, and its end with them:
/// a connection swaps its agent at most once at a time, and never while
/// it is ending.
pub type TakeBackLock = Arc<tokio::sync::Mutex<()>>;

/// The agent a connection acts as; a resume swaps it.
pub type AgentCell = Arc<Mutex<Agent>>;

/// A fresh agent labelled `label`, with a random key.
pub fn new_agent(label: &str) -> AgentCell {
    Arc::new(Mutex::new(Agent {
        owner: Owner::new(label),
        key: new_key(),
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

/// The agent of `cell` now.
pub fn current(cell: &AgentCell) -> (Owner, String) {
    let agent = cell.lock().unwrap_or_else(|e| e.into_inner());
    (agent.owner.clone(), agent.key.clone())
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

/// The keys of agents whose grace period ended, newest last.
#[derive(Debug, Default)]
pub struct Expired(Mutex<VecDeque<String>>);

impl Expired {
    fn remember(&self, key: String) {
        let mut keys = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if keys.len() >= EXPIRED_KEPT {
            keys.pop_front();
        }
        keys.push_back(key);
    }

    fn contains(&self, key: &str) -> bool {
        let keys = self.0.lock().unwrap_or_else(|e| e.into_inner());
        !key.is_empty() && keys.iter().any(|k| k == key)
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
                Some(e) if e.detached.is_some() => entries.remove(&id),
                _ => None,
            }
        };
        let Some(entry) = taken else { return false };
        if let Some(d) = &entry.detached {
            d.cancel.cancel();
        }
        let (owner, key) = current(&entry.agent);
        self.expired.remember(key);
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
        let (key, target, recorder, lock) = {
            let entries = self.entries();
            let Some(from) = entries.get(&id).filter(|e| e.detached.is_some()) else {
                return Err(ToolError::new(
                    "NO_DETACHED",
                    format!("connection {id} is not detached work (dsh ps lists what is)"),
                ));
            };
            let Some(target) = entries.get(&to).filter(|e| e.detached.is_none()) else {
                return Err(ToolError::new(
                    "NO_CONNECTION",
                    format!("no connected agent is connection {to} (dsh ps lists them)"),
                ));
            };
            (
                current(&from.agent).1,
                Arc::clone(&target.agent),
                target.recorder.clone(),
                Arc::clone(&target.take_back),
            )
        };
        self.take_back(&key, &target, to, &recorder, &lock).await
    }

    /// Makes the detached agent with `key` the agent of connection `id`
    /// (whose cell is `into`).
    pub(super) async fn take_back(
        &self,
        key: &str,
        into: &AgentCell,
        id: u64,
        recorder: &SessionRecorder,
        lock: &TakeBackLock,
    ) -> Result<Resumed, ToolError> {
        let _one_at_a_time = lock.lock().await;
        let (mine, my_key) = current(into);
        if same_key(&my_key, key) {
            return Ok(Resumed {
                owner: mine,
                detached_for: Duration::ZERO,
            });
        }
        let (terminals, jobs) = self.work_of(&mine).await;
        let found = {
            let entries = self.entries();
            entries
                .iter()
                .find(|(other, e)| **other != id && same_key(&current(&e.agent).1, key))
                .map(|(other, e)| (*other, e.detached.is_some(), Arc::clone(&e.take_back)))
        };
        let Some((from, detached, from_lock)) = found else {
            if self.expired.contains(key) {
                return Err(ToolError::new(
                    "RESUME_EXPIRED",
                    "the grace period of this resume key ended: its terminals and jobs were closed; start new ones",
                ));
            }
            return Err(ToolError::new(
                "RESUME_KEY_UNKNOWN",
                format!(
                    "no detached work has this resume key; pass the key ({KEY_PREFIX}…) exactly as an earlier reply of yours gave it"
                ),
            ));
        };
        if terminals + jobs > 0 {
            return Err(ToolError::new(
                "RESUME_NOT_EMPTY",
                format!(
                    "this connection already has work of its own ({}); resume before starting any, or in a new connection",
                    work_words(terminals, jobs)
                ),
            ));
        }
        if !detached {
            return self
                .take_over(key, from, &from_lock, into, id, recorder)
                .await;
        }
        let Some(entry) = self.entries().remove(&from) else {
            return Err(ToolError::new(
                "RESUME_KEY_UNKNOWN",
                "the detached work of this key was just ended or taken back",
            ));
        };
        let detached_for = entry
            .detached
            .as_ref()
            .map(|d| {
                d.cancel.cancel();
                d.since.elapsed().unwrap_or_default()
            })
            .unwrap_or_default();
        let taken = {
            let mut from_agent = entry.agent.lock().unwrap_or_else(|e| e.into_inner());
            let mut into_agent = into.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::swap(&mut *from_agent, &mut *into_agent);
            into_agent.owner.clone()
        };
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

impl Host {
    /// Takes the agent of connection `from`, which still counts as
    /// connected, into connection `id`: its client presented the key from
    /// a new connection, so the old one is a stream that died without a
    /// word (a network gone quiet keeps a connection open for as long as
    /// the transport takes to notice). The old connection is ended; its
    /// agent is the new connection's former, empty one.
    async fn take_over(
        &self,
        key: &str,
        from: u64,
        from_lock: &TakeBackLock,
        into: &AgentCell,
        id: u64,
        recorder: &SessionRecorder,
    ) -> Result<Resumed, ToolError> {
        let busy = || {
            ToolError::retryable(
                "RESUME_BUSY",
                "the work of this key is changing hands right now (its old connection is ending); try again in a moment",
            )
        };
        // The old connection is ending or taking back work of its own right
        // now: then it is not the one to take from yet.
        let Ok(_its_turn) = from_lock.try_lock() else {
            return Err(busy());
        };
        let (from_agent, from_recorder, from_closed) = {
            let entries = self.entries();
            match entries.get(&from).filter(|e| e.detached.is_none()) {
                Some(e) => (Arc::clone(&e.agent), e.recorder.clone(), e.closed.clone()),
                None => return Err(busy()),
            }
        };
        // Under its lock, the old connection's agent is still the one whose
        // key was presented (it did not take back another meanwhile).
        if !same_key(&current(&from_agent).1, key) {
            return Err(busy());
        }
        let taken = {
            let mut from_agent = from_agent.lock().unwrap_or_else(|e| e.into_inner());
            let mut into_agent = into.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::swap(&mut *from_agent, &mut *into_agent);
            into_agent.owner.clone()
        };
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
        Ok(Resumed {
            owner: taken,
            detached_for: Duration::ZERO,
        })
    }
}

/// A connection's side of [`Resume`].
pub struct ConnectionResume {
    pub(super) host: Arc<Host>,
    pub(super) agent: AgentCell,
    pub(super) id: u64,
    pub(super) recorder: SessionRecorder,
    pub(super) lock: TakeBackLock,
}

impl std::fmt::Debug for ConnectionResume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionResume")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Resume for ConnectionResume {
    fn key(&self) -> String {
        current(&self.agent).1
    }

    fn resume<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Resumed, ToolError>> {
        Box::pin(
            self.host
                .take_back(key, &self.agent, self.id, &self.recorder, &self.lock),
        )
    }
}
