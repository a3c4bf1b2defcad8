//! Every connection's tool calls as they happen, for the `dsh ui` page:
//! the session log publishes each call to the host's [`CallHub`], and the
//! page reads the newest few and a broadcast of each new one.

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::broadcast;
use ui::{CallFeed, LiveCall};
use workspace::{LogEntry, SessionId};

use crate::session_log::CallPublisher;

/// How many of the newest calls (of all sessions) are kept for a page
/// that opens after they were made but before the store has them.
pub const RECENT_CALLS: usize = 512;
/// How many calls a slow page may fall behind before it reloads.
const CALL_CHANNEL: usize = 1024;

/// Every connection's tool calls as they happen: the newest few, and a
/// broadcast of each new one.
pub struct CallHub {
    recent: Mutex<VecDeque<LiveCall>>,
    tx: broadcast::Sender<LiveCall>,
}

impl Default for CallHub {
    fn default() -> Self {
        Self {
            recent: Mutex::new(VecDeque::with_capacity(RECENT_CALLS)),
            tx: broadcast::channel(CALL_CHANNEL).0,
        }
    }
}

impl std::fmt::Debug for CallHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallHub").finish_non_exhaustive()
    }
}

impl CallPublisher for CallHub {
    fn publish(&self, session: SessionId, entry: &LogEntry) {
        let call = LiveCall {
            session,
            entry: entry.clone(),
        };
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT_CALLS {
            recent.pop_front();
        }
        recent.push_back(call.clone());
        // Sent under the lock, so a feed taken meanwhile sees each call
        // exactly once: in its recent list or on its receiver.
        let _ = self.tx.send(call);
    }
}

impl CallHub {
    /// The newest calls and every later one.
    pub fn feed(&self) -> CallFeed {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        CallFeed {
            live: self.tx.subscribe(),
            recent: recent.iter().cloned().collect(),
        }
    }

    /// The newest calls of `session`, oldest first.
    pub fn recent_of(&self, session: SessionId) -> Vec<LogEntry> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .iter()
            .filter(|c| c.session == session)
            .map(|c| c.entry.clone())
            .collect()
    }
}
