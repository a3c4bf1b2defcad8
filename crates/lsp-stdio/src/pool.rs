//! [`ServerPool`]: the bounds every provider of one process shares — a cap
//! on running language servers (the least recently used is stopped beyond
//! it) and the idle stop (a server with no query for a while is stopped,
//! and started again by the next query).

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::server::Server;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The server of one (provider, root), replaced on restart.
#[derive(Default)]
pub(crate) struct Slot {
    pub server: tokio::sync::Mutex<Option<Arc<Server>>>,
    pub restarts: std::sync::atomic::AtomicU32,
    /// When a query last started or ended here.
    last_used: Mutex<Option<Instant>>,
    /// Queries running now: a busy server is never stopped for idleness.
    in_flight: AtomicUsize,
}

impl Slot {
    /// Marks a query running until the guard drops.
    pub fn begin_query(self: &Arc<Self>) -> QueryGuard {
        self.touch();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        QueryGuard(self.clone())
    }

    fn touch(&self) {
        *lock(&self.last_used) = Some(Instant::now());
    }

    fn last_used(&self) -> Instant {
        lock(&self.last_used).unwrap_or_else(Instant::now)
    }

    fn busy(&self) -> bool {
        self.in_flight.load(Ordering::SeqCst) > 0
    }
}

/// A query in flight on a [`Slot`].
pub(crate) struct QueryGuard(Arc<Slot>);

impl Drop for QueryGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Entry {
    name: String,
    root: PathBuf,
    slot: Weak<Slot>,
}

/// Bounds shared by the providers of one process: at most `max_servers`
/// running servers (least recently used stopped first) and the idle stop.
pub struct ServerPool {
    max_servers: usize,
    idle_stop: Option<Duration>,
    entries: Mutex<Vec<Entry>>,
    reaper: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl std::fmt::Debug for ServerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerPool")
            .field("max_servers", &self.max_servers)
            .field("idle_stop", &self.idle_stop)
            .finish_non_exhaustive()
    }
}

impl ServerPool {
    /// A pool with these bounds (`max_servers` of at least 1).
    pub fn new(max_servers: usize, idle_stop: Option<Duration>) -> Arc<ServerPool> {
        Arc::new(ServerPool {
            max_servers: max_servers.max(1),
            idle_stop,
            entries: Mutex::new(Vec::new()),
            reaper: Mutex::new(None),
        })
    }

    /// Tracks `slot` (once) under the provider `name` and `root`.
    pub(crate) fn track(&self, name: &str, root: &std::path::Path, slot: &Arc<Slot>) {
        let mut entries = lock(&self.entries);
        entries.retain(|e| e.slot.strong_count() > 0);
        if !entries
            .iter()
            .any(|e| e.slot.upgrade().is_some_and(|s| Arc::ptr_eq(&s, slot)))
        {
            entries.push(Entry {
                name: name.to_owned(),
                root: root.to_owned(),
                slot: Arc::downgrade(slot),
            });
        }
    }

    /// Before a server starts for `starting`: stops the least recently
    /// used idle servers until one more fits under the cap. Busy servers
    /// are never stopped (the cap may then be passed until they finish).
    pub(crate) fn make_room(&self, starting: &Arc<Slot>) {
        let mut running: Vec<(Instant, String, PathBuf, Arc<Slot>)> = Vec::new();
        let mut count = 0;
        for e in lock(&self.entries).iter() {
            let Some(slot) = e.slot.upgrade() else {
                continue;
            };
            if Arc::ptr_eq(&slot, starting) {
                continue;
            }
            match slot.server.try_lock() {
                Ok(guard) => {
                    if guard.as_ref().is_some_and(|s| s.is_alive()) {
                        count += 1;
                        if !slot.busy() {
                            running.push((
                                slot.last_used(),
                                e.name.clone(),
                                e.root.clone(),
                                slot.clone(),
                            ));
                        }
                    }
                }
                // Locked: starting or restarting right now.
                Err(_) => count += 1,
            }
        }
        running.sort_by_key(|(at, ..)| *at);
        for (_, name, root, slot) in running {
            if count < self.max_servers {
                break;
            }
            if stop_slot(&slot) {
                tracing::info!(
                    "stopping {name} for {}: more than {} language servers would run",
                    root.display(),
                    self.max_servers
                );
                count -= 1;
            }
        }
        if count >= self.max_servers {
            tracing::warn!(
                "{count} language servers are busy; starting one more than the cap of {}",
                self.max_servers
            );
        }
    }

    /// Starts the idle-stop task once (from within a runtime).
    pub(crate) fn ensure_reaper(self: &Arc<Self>) {
        let Some(idle) = self.idle_stop else { return };
        let mut reaper = lock(&self.reaper);
        if reaper.as_ref().is_some_and(|r| !r.is_finished()) {
            return;
        }
        let pool = Arc::downgrade(self);
        let tick = (idle / 4).clamp(Duration::from_millis(50), Duration::from_secs(30));
        *reaper = Some(tokio::spawn(async move {
            loop {
                tokio::time::sleep(tick).await;
                let Some(pool) = pool.upgrade() else { return };
                pool.stop_idle(idle);
            }
        }));
    }

    /// Stops every server whose last query ended more than `idle` ago.
    fn stop_idle(&self, idle: Duration) {
        let idle_slots: Vec<(String, PathBuf, Arc<Slot>)> = lock(&self.entries)
            .iter()
            .filter_map(|e| Some((e.name.clone(), e.root.clone(), e.slot.upgrade()?)))
            .filter(|(_, _, s)| !s.busy() && s.last_used().elapsed() >= idle)
            .collect();
        for (name, root, slot) in idle_slots {
            if stop_slot(&slot) {
                tracing::info!(
                    "stopped {name} for {}: no query for {} s",
                    root.display(),
                    idle.as_secs()
                );
            }
        }
    }
}

impl Drop for ServerPool {
    fn drop(&mut self) {
        if let Some(reaper) = lock(&self.reaper).take() {
            reaper.abort();
        }
    }
}

/// Takes a live server out of an unlocked slot and shuts it down cleanly in
/// the background; the next query starts a new one (not a crash restart).
fn stop_slot(slot: &Arc<Slot>) -> bool {
    let Ok(mut guard) = slot.server.try_lock() else {
        return false;
    };
    if slot.busy() || !guard.as_ref().is_some_and(|s| s.is_alive()) {
        return false;
    }
    let Some(server) = guard.take() else {
        return false;
    };
    drop(guard);
    tokio::spawn(async move { server.shutdown().await });
    true
}
