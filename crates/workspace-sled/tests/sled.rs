//! The sled provider against a real sled database on disk: the conformance
//! suite, fault injection, and many handles on one store directory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Barrier};
use std::time::Duration;

use pretty_assertions::assert_eq;
use workspace::testing::{
    Harness, fault_injection_suite, header, rollback_combinations_suite, run_conformance, sid,
};
use workspace::{LogEntry, WorkspaceError};
use workspace_sled::{OpenStore, SledDomain, SledSessions, StorageError, Store, StoreOptions};

/// A real store in a temp dir. A reopen closes sled and opens it again from
/// disk, unless a handle from the previous open is still alive (then it is shared).
struct SledHarness {
    tmp: tempfile::TempDir,
    open: Option<OpenStore>,
}

impl SledHarness {
    fn new() -> Self {
        Self {
            tmp: tempfile::tempdir().unwrap(),
            open: None,
        }
    }
}

impl Harness for SledHarness {
    type Domain = SledDomain;
    type Sessions = SledSessions;
    fn open(&mut self) -> (SledDomain, SledSessions) {
        let store = match self.open.take() {
            Some(open) if open.handles() > 1 => open,
            previous => {
                drop(previous);
                OpenStore::open(self.tmp.path(), Duration::from_secs(10)).unwrap()
            }
        };
        let handles = (store.domain(), store.sessions());
        self.open = Some(store);
        handles
    }
}

#[test]
fn conformance_on_sled() {
    run_conformance(SledHarness::new);
}

#[test]
fn fault_injection_over_every_mutation_on_sled() {
    fault_injection_suite(SledHarness::new);
}

#[test]
fn rollback_combinations_on_sled() {
    rollback_combinations_suite(SledHarness::new);
}

#[test]
fn a_held_store_is_busy_after_the_bounded_wait_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let held = OpenStore::open(tmp.path(), Duration::from_secs(1)).unwrap();
    let store = Store::with_options(
        tmp.path(),
        StoreOptions {
            lock_wait: Duration::from_millis(200),
        },
    );
    let err = store.list_workspaces().unwrap_err();
    assert_eq!(err.code(), "STORE_BUSY");
    let WorkspaceError::Storage(StorageError::Busy { dir, waited_ms }) = &err else {
        panic!("expected STORE_BUSY, got {err}");
    };
    assert_eq!(dir, tmp.path());
    assert!(*waited_ms >= 200, "gave up early: {waited_ms} ms");
    assert!(
        err.to_string().contains("held by another dsh process"),
        "{err}"
    );
    drop(held);
    assert_eq!(store.list_workspaces().unwrap(), vec![]);
}

#[test]
fn concurrent_same_path_creates_collapse_to_one_record() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tempfile::tempdir().unwrap();
    let store = Store::new(tmp.path().join("store"));
    let barrier = Arc::new(Barrier::new(4));
    let threads: Vec<_> = (0..4)
        .map(|i| {
            let (store, barrier, path) = (store.clone(), barrier.clone(), target.path().to_owned());
            std::thread::spawn(move || {
                barrier.wait();
                store
                    .create_workspace(&path, Some(&format!("title {i}")))
                    .unwrap()
            })
        })
        .collect();
    let created: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let listed = store.list_workspaces().unwrap();
    assert_eq!(listed.len(), 1);
    for w in created {
        assert_eq!(w, listed[0]);
    }
}

#[test]
fn store_facade_round_trip() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cwd = std::fs::canonicalize(dir.path()).unwrap();
    let store = Store::new(tmp.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let started = rt
        .block_on(store.begin_session_async(header(1, Some(&cwd), 1)))
        .unwrap();
    let w = started.workspace.unwrap();
    rt.block_on(store.append_log_async(
        sid(1),
        LogEntry::new(workspace::testing::at(2), "bash", "ls", "OK", 4),
    ))
    .unwrap();
    let renamed = store.rename_workspace(w.id, "mine").unwrap();
    assert_eq!(renamed.title, "mine");
    assert_eq!(store.show_workspace(w.id).unwrap(), renamed);
    let archived = store.archive_session(sid(1)).unwrap();
    assert!(archived.archived);
    assert_eq!(
        store.list_sessions(Some(w.id)).unwrap(),
        vec![archived.clone()]
    );
    let shown = store.show_session(sid(1)).unwrap();
    assert_eq!(shown.log.len(), 1);
    let json = serde_json::to_value(&shown).unwrap();
    assert_eq!(json["id"], serde_json::json!(sid(1).to_string()));
    assert_eq!(json["archived"], serde_json::json!(true));
    assert!(!store.unarchive_session(sid(1)).unwrap().archived);
    assert!(store.remove_workspace(w.id).unwrap());
    assert_eq!(
        store.show_workspace(w.id).unwrap_err().code(),
        "UNKNOWN_WORKSPACE"
    );
    assert_eq!(store.list_sessions(None).unwrap().len(), 1);
}
