//! `Prepared::rules`: the view a host keeps to name refusals answers as
//! the preparation does, and holds none of its descriptors or threads once
//! the preparation itself is gone. In a test binary of its own, so that
//! the process's descriptors and threads are this test's alone.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use sandbox::{Availability, Sandbox, SandboxPolicy, SpawnContext};

/// The open descriptors and the threads of this process.
fn held() -> (usize, usize) {
    let count = |dir: &str| std::fs::read_dir(dir).unwrap().count();
    (count("/proc/self/fd"), count("/proc/self/task"))
}

#[test]
fn the_rules_view_answers_alike_and_holds_nothing_of_the_enforcement() {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws, tmp) = (root.join("home"), root.join("ws"), root.join("tmp"));
    for dir in [home.join(".ssh"), ws.clone(), tmp.clone()] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let ctx = SpawnContext::command(&ws, &home).with_temp_dir(&tmp);
    let before = held();
    let view = {
        let sandbox = Sandbox::new(SandboxPolicy::default(), Availability::probe_kernel()).unwrap();
        let prepared = sandbox.prepare(&ctx).unwrap();
        if !prepared.confines() {
            println!("this kernel confines nothing: only the answers are compared");
        }
        let view = prepared.rules();
        assert_eq!(view.confines(), prepared.confines());
        assert_eq!(view.status(), prepared.status());
        for path in [home.join(".ssh/id_ed25519"), ws.join("a.txt"), home.clone()] {
            assert_eq!(
                view.read_refusal(&path).map(ToString::to_string),
                prepared.read_refusal(&path).map(ToString::to_string),
                "{}",
                path.display()
            );
        }
        if prepared.confines() {
            assert!(
                view.read_refusal(&home.join(".ssh/id_ed25519")).is_some(),
                "the credential store is refused"
            );
        }
        assert!(view.pty_dir().is_none(), "the view holds no devpts root");
        // One view per preparation.
        assert!(view.is_same(&prepared.rules()));
        view
    };
    // The sandbox and the preparation are gone; the view lives on. The
    // guard of `connect` ends its thread once its socket is closed.
    test_support::wait_until(
        "the preparation's descriptors and threads to be gone",
        || held() == before,
    );
    // And it still answers.
    let confines = view.confines();
    assert_eq!(
        view.read_refusal(&home.join(".ssh/id_ed25519")).is_some(),
        confines
    );
}
