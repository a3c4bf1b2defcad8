//! A writer SIGKILLed while sled writes a snapshot leaves a half-written
//! `snap.N.generating` file; the store still opens, with everything that
//! was acknowledged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use workspace_sled::Store;

#[test]
fn a_half_written_snapshot_left_by_a_killed_writer_does_not_break_the_store() {
    let tmp = tempfile::tempdir().unwrap();
    let project = tmp.path().join("project");
    std::fs::create_dir(&project).unwrap();
    let project = project.canonicalize().unwrap();
    let store_dir = tmp.path().join("store");
    let store = Store::new(&store_dir);
    let created = store.create_workspace(&project, Some("kept")).unwrap();
    // Another open writes a snapshot that covers the create.
    assert_eq!(store.list_workspaces().unwrap().len(), 1);

    // What a kill in the middle of writing the next snapshot leaves: a
    // newer `.generating` file holding the first part of a snapshot.
    let db = store_dir.join("db");
    let snapshot = std::fs::read_dir(&db)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("snap.")
        })
        .expect("sled wrote a snapshot");
    let bytes = std::fs::read(&snapshot).unwrap();
    let torn = db.join(format!("snap.{:016X}.generating", u64::MAX >> 4));
    std::fs::write(&torn, &bytes[..bytes.len() / 2]).unwrap();

    let listed = store.list_workspaces().unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|w| (w.id, w.title.as_str()))
            .collect::<Vec<_>>(),
        vec![(created.id, "kept")]
    );
    assert!(!torn.exists(), "the torn snapshot is still there");
}
