//! The store is private to its owner: the directory 0700 and every file in
//! it, sled's own included, 0600 — whatever the process's umask.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use chrono::Utc;
use pretty_assertions::assert_eq;
use workspace::{LogEntry, SessionHeader, SessionId};
use workspace_sled::Store;

/// Every path under `dir` (itself included) with its permission bits.
fn modes(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        out.push((path.clone(), meta.permissions().mode() & 0o777));
        if meta.is_dir() {
            for entry in std::fs::read_dir(&path).unwrap() {
                pending.push(entry.unwrap().path());
            }
        }
    }
    out.sort();
    out
}

/// The paths whose mode is not the private one (0700 for directories,
/// 0600 for files).
fn not_private(dir: &Path) -> Vec<(PathBuf, u32)> {
    modes(dir)
        .into_iter()
        .filter(|(path, mode)| {
            let wanted = if path.is_dir() { 0o700 } else { 0o600 };
            *mode != wanted
        })
        .collect()
}

fn use_the_store(store: &Store, cwd: &Path) {
    let id = SessionId::new_random();
    store
        .begin_session(&SessionHeader {
            id,
            cwd: Some(cwd.to_path_buf()),
            created_at: Utc::now(),
            client: None,
        })
        .unwrap();
    for n in 0..20 {
        store
            .append_log(
                id,
                &LogEntry::new(Utc::now(), "bash", &format!("{{\"n\":{n}}}"), "OK", 1),
            )
            .unwrap();
    }
    // Reopening makes sled write a new snapshot file.
    assert_eq!(store.list_sessions(None).unwrap().len(), 1);
}

#[test]
fn a_new_store_is_private_to_its_owner() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir = tmp.path().join("share").join("dsh");
    let store = Store::new(&dir);
    use_the_store(&store, tmp.path());

    let all = modes(&dir);
    assert!(
        all.iter().any(|(p, _)| p.ends_with("db/conf")),
        "sled's files are checked too: {all:?}"
    );
    assert_eq!(not_private(&dir), Vec::new());
    // The parents are created as usual, not private.
    let parent = std::fs::metadata(dir.parent().unwrap()).unwrap();
    assert_ne!(parent.permissions().mode() & 0o777, 0o700);
}

#[test]
fn an_existing_store_made_by_an_older_version_is_made_private() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dsh");
    let store = Store::new(&dir);
    use_the_store(&store, tmp.path());
    // As an older dsh left it: readable by everyone.
    for (path, _) in modes(&dir) {
        let mode = if path.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    // Someone else's file next to the store is none of its business.
    let other = dir.join("notes.txt");
    std::fs::write(&other, "mine").unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o644)).unwrap();

    assert_eq!(store.list_workspaces().unwrap().len(), 1);
    assert_eq!(
        not_private(&dir),
        vec![(other.clone(), 0o644)],
        "everything of the store is private again"
    );
}
