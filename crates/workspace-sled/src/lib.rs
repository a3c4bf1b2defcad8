//! An implementation of the workspace registry's two seams
//! ([`workspace::StorageDomain`] and [`workspace::SessionPersistence`]),
//! based on sled, and a [`Store`] that many processes can share.
//!
//! **Many processes, one store.** Every `dsh mcp` process and every CLI
//! command uses the same store directory, while sled takes an exclusive lock
//! on its files. A [`Store`] therefore holds nothing open between operations:
//! each operation takes a `flock` on `DIR/lock` (waiting, with backoff, up to
//! [`StoreOptions::lock_wait`], 5 s by default), opens sled, re-reads the
//! registry under the lock, acts, flushes and closes. No process acts on stale
//! state, and only a lock that cannot be had within the bound is an error
//! ([`StorageError::Busy`], naming the directory and how long it waited).
//!
//! **Durability.** Every write is flushed (`fsync`) before it is
//! acknowledged. The calls block; async callers use the `*_async` helpers,
//! which run them on tokio's blocking pool. An I/O error poisons the open
//! handle: it is reported, every later call on that handle fails with
//! [`StorageError::Poisoned`], and the next operation reopens the store.
//!
//! This crate deliberately holds no registry logic (that is the `workspace`
//! crate's) and chooses no data directory (the host passes one).
//!
//! [`OpenStore`] is the store open and locked, the two seams on it: a
//! [`Store`] opens one for the span of one operation (`--standalone`),
//! and the daemon, the store's only opener, holds one for its life.

#![forbid(unsafe_code)]

mod sled_store;
mod store;

pub use sled_store::{OpenStore, SledDomain, SledSessions};
pub use store::{Store, StoreOptions};
pub use workspace::StorageError;
