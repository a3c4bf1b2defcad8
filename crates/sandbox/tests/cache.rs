//! A `Sandbox` reuses a preparation until a directory it listed changes.
//! In a test binary of its own: the preparation lists every directory
//! between `/` and the fixture's home, and the other tests keep creating
//! fixtures next to it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use sandbox::{Availability, Prepared, Sandbox, SandboxPolicy, SpawnContext};

fn set_mtime(path: &Path, secs: i64) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    let t = libc::timespec {
        tv_sec: secs,
        tv_nsec: 0,
    };
    // SAFETY: a valid C string and two valid timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
    assert_eq!(rc, 0);
}

fn cat(prepared: &Prepared, path: &Path) -> bool {
    let mut command = Command::new("cat");
    command
        .arg(path)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let step = prepared.pre_exec_step();
    // SAFETY: the sandbox step is async-signal-safe.
    unsafe { command.pre_exec(step) };
    command.status().unwrap().success()
}

#[test]
fn a_cached_preparation_is_reused_until_a_directory_it_listed_changes() {
    let target_tmp = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .canonicalize()
        .unwrap();
    let base = tempfile::Builder::new()
        .prefix("sandbox-cache-")
        .tempdir_in(&target_tmp)
        .unwrap();
    let home = base.path().canonicalize().unwrap().join("home");
    let ws = base.path().canonicalize().unwrap().join("ws");
    // A temp dir of its own: a checkout under the system's temp dir would
    // otherwise put home inside the temp dir's write grant.
    let tmp = base.path().canonicalize().unwrap().join("tmp");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(&tmp).unwrap();
    // Every listed directory from the target dir down must have last
    // changed long enough ago for its time to be trusted (cargo creates
    // the target's tmp dir just before the tests of a fresh checkout run).
    let target = target_tmp.parent().unwrap().to_path_buf();
    for dir in [&target, &target_tmp, &base.path().to_path_buf(), &home] {
        set_mtime(dir, 1_000_000_000);
    }
    let sandbox = Sandbox::new(SandboxPolicy::default(), Availability::probe_kernel()).unwrap();
    let ctx = SpawnContext::command(&ws, &home).with_temp_dir(&tmp);
    // The directories above the target dir (`/`, and the system's temp dir
    // or the home directory a checkout lives in) are listed too, and other
    // programs may change them at any moment: a rebuild is a failure only
    // when none of them changed around the two preparations.
    let mut ancestors: Vec<PathBuf> = target.ancestors().map(Path::to_path_buf).collect();
    ancestors.retain(|a| a != &target);
    let mut tries = 0;
    let first = loop {
        tries += 1;
        let since = SystemTime::now() - Duration::from_millis(100);
        let first = sandbox.prepare(&ctx).unwrap();
        let again = sandbox.prepare(&ctx).unwrap();
        if first.is_same(&again) {
            break first;
        }
        let changed: Vec<&PathBuf> = ancestors
            .iter()
            .filter(|a| std::fs::metadata(a).unwrap().modified().unwrap() >= since)
            .collect();
        assert!(
            !changed.is_empty() && tries < 50,
            "a second prepare rebuilt it (try {tries}; changed meanwhile: {changed:?})"
        );
        // Something else wrote in an ancestor: wait for it to be old enough
        // to be trusted, then try again.
        test_support::wait_for("the ancestors' changes to age", || {
            let young = SystemTime::now() - Duration::from_millis(60);
            changed
                .iter()
                .all(|a| std::fs::metadata(a).unwrap().modified().unwrap() < young)
                .then_some(())
        });
    };

    // A file created in home after the preparation is not covered by it
    // (home is granted entry by entry around .ssh)...
    std::fs::write(home.join("late"), "late\n").unwrap();
    assert!(!cat(&first, &home.join("late")));
    // ...and the next preparation sees it.
    let fresh = sandbox.prepare(&ctx).unwrap();
    assert!(!fresh.is_same(&first));
    assert!(cat(&fresh, &home.join("late")));
    // A credential store that appears after the preparation (one of many
    // missing ones watched through home) is closed by the next one.
    set_mtime(&home, 1_000_000_000);
    let settled = sandbox.prepare(&ctx).unwrap();
    assert!(settled.is_same(&sandbox.prepare(&ctx).unwrap()));
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    std::fs::write(home.join(".aws/credentials"), "secret\n").unwrap();
    let closed = sandbox.prepare(&ctx).unwrap();
    assert!(!closed.is_same(&settled));
    assert!(!cat(&closed, &home.join(".aws/credentials")));
    assert!(cat(&closed, &home.join("late")));
    // A different context is a different preparation.
    let other = sandbox
        .prepare(&SpawnContext::language_server(&ws, &home))
        .unwrap();
    assert!(!other.is_same(&closed));
}
