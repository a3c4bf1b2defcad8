//! The spawn path's own contract, as `std::process::Command` users expect
//! it: arguments, environment, directory, standard streams, `PATH` lookup
//! and the errors of a spawn that cannot start — each failed spawn leaving
//! no child behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::sync::Arc;

use process_tree::{ChildIo, SessionCommand, Spawned};

/// Runs `command` to its end; its stdout and exit code.
fn output(command: SessionCommand) -> (String, Option<i32>) {
    let spawned = command
        .stdout(ChildIo::Piped)
        .spawn()
        .expect("the command starts");
    finish(spawned)
}

fn finish(spawned: Spawned) -> (String, Option<i32>) {
    let mut out = String::new();
    spawned
        .stdout
        .expect("a piped stdout")
        .read_to_string(&mut out)
        .expect("stdout reads");
    let status = spawned.leader.wait_exit().expect("the leader exits");
    assert!(spawned.leader.reap().is_some());
    (out, status.code())
}

/// Children of this process that are zombies now.
fn zombie_children() -> Vec<i32> {
    let me = std::process::id() as i32;
    process_tree::all_processes()
        .into_iter()
        .filter(|p| p.ppid == me && p.is_zombie())
        .map(|p| p.pid)
        .collect()
}

#[test]
fn arguments_directory_and_exit_code_reach_the_child() {
    let _turn = one_at_a_time();
    let dir = std::env::temp_dir();
    let (out, code) = output(
        SessionCommand::new("bash")
            .args(["-c", "printf '%s|' \"$0\" \"$1\" \"$(pwd -P)\"; exit 4"])
            .arg("two words")
            .current_dir(&dir),
    );
    let dir = std::fs::canonicalize(dir).unwrap();
    assert_eq!(out, format!("two words||{}|", dir.display()));
    assert_eq!(code, Some(4));
}

#[test]
fn the_environment_is_the_hosts_with_changes_or_only_what_was_set() {
    let _turn = one_at_a_time();
    // SAFETY: set before any child of this test reads it; tests that read
    // this variable are only these.
    unsafe { std::env::set_var("DSH_SPAWN_TEST_INHERITED", "from the host") };
    let script =
        "printf '%s|%s|%s' \"${DSH_SPAWN_TEST_INHERITED-unset}\" \"${A-unset}\" \"${B-unset}\"";
    let (out, _) = output(
        SessionCommand::new("bash")
            .args(["-c", script])
            .env("A", "1")
            .env("B", "2")
            .env_remove("B"),
    );
    assert_eq!(out, "from the host|1|unset");
    let (out, _) = output(
        SessionCommand::new("bash")
            .args(["-c", script])
            .env("A", "dropped by env_clear")
            .env_clear()
            .env("B", "3"),
    );
    assert_eq!(out, "unset|unset|3");
    // SAFETY: as above.
    unsafe { std::env::remove_var("DSH_SPAWN_TEST_INHERITED") };
}

#[test]
fn a_bare_name_is_looked_up_in_the_childs_path() {
    let _turn = one_at_a_time();
    let temp = tempdir();
    let dir = temp.path();
    let tool = dir.join("dsh-spawn-test-tool");
    std::fs::write(&tool, "#!/bin/sh\necho found\n").unwrap();
    set_mode(&tool, 0o755);
    let path = format!("/nonexistent-dir:{}:/usr/bin:/bin", dir.display());
    let (out, code) = output(SessionCommand::new("dsh-spawn-test-tool").env("PATH", &path));
    assert_eq!((out.as_str(), code), ("found\n", Some(0)));
    // An executable without a `#!` line runs as a script of /bin/sh, as
    // with execvp, with its arguments.
    let script = dir.join("dsh-spawn-test-script");
    std::fs::write(&script, "echo \"script $1\"\n").unwrap();
    set_mode(&script, 0o755);
    let (out, code) = output(
        SessionCommand::new("dsh-spawn-test-script")
            .arg("ran")
            .env("PATH", &path),
    );
    assert_eq!((out.as_str(), code), ("script ran\n", Some(0)));
    // Not in the host's PATH: only the child's was searched.
    let error = SessionCommand::new("dsh-spawn-test-tool")
        .spawn()
        .expect_err("not on the host's PATH");
    assert_eq!(error.kind(), std::io::ErrorKind::NotFound);
}

#[test]
fn a_spawn_that_cannot_start_says_why_and_leaves_no_child() {
    let _turn = one_at_a_time();
    let before = zombie_children();
    let missing = SessionCommand::new("/nonexistent/program")
        .spawn()
        .expect_err("a missing program");
    assert_eq!(missing.kind(), std::io::ErrorKind::NotFound, "{missing}");

    let temp = tempdir();
    let dir = temp.path();
    let plain = dir.join("not-executable");
    std::fs::write(&plain, "#!/bin/sh\n").unwrap();
    set_mode(&plain, 0o644);
    let denied = SessionCommand::new(&plain)
        .spawn()
        .expect_err("a file without execute permission");
    assert_eq!(
        denied.kind(),
        std::io::ErrorKind::PermissionDenied,
        "{denied}"
    );

    let no_dir = SessionCommand::new("true")
        .current_dir(dir.join("missing"))
        .spawn()
        .expect_err("a missing working directory");
    assert_eq!(no_dir.kind(), std::io::ErrorKind::NotFound, "{no_dir}");

    let nul = SessionCommand::new("true")
        .arg("a\0b")
        .spawn()
        .expect_err("an argument with a NUL byte");
    assert_eq!(nul.kind(), std::io::ErrorKind::InvalidInput, "{nul}");

    // A failing step fails the spawn with its error, and nothing runs.
    let marker = dir.join("ran");
    let step: process_tree::PreExecStep =
        Arc::new(|| Err(std::io::Error::from_raw_os_error(libc::EPERM)));
    // SAFETY: the step makes no call at all.
    let refused = unsafe {
        SessionCommand::new("touch")
            .arg(&marker)
            .pre_exec(step)
            .spawn()
            .expect_err("a step that fails")
    };
    assert_eq!(refused.raw_os_error(), Some(libc::EPERM), "{refused}");
    assert!(!marker.exists(), "the program ran after its step failed");

    // A child that dies before it runs the program fails the spawn (the
    // step exits: a step that panicked would die the same way).
    let exits: process_tree::PreExecStep = Arc::new(|| {
        // SAFETY: ends the child at once, async-signal-safe.
        unsafe { libc::_exit(0) }
    });
    // SAFETY: the step makes one async-signal-safe call.
    let died = unsafe {
        SessionCommand::new("touch")
            .arg(&marker)
            .pre_exec(exits)
            .spawn()
            .expect_err("a child that died before exec")
    };
    assert!(died.to_string().contains("died before"), "{died}");
    assert!(!marker.exists(), "the program ran after its child died");

    // Every child those spawns started was reaped by the spawn.
    assert_eq!(zombie_children(), before);
}

#[test]
fn streams_are_null_piped_or_a_given_descriptor() {
    let _turn = one_at_a_time();
    // stdin piped: what we write, the child reads; stderr to a pipe we own.
    let (reader, writer) = std::io::pipe().unwrap();
    let spawned = SessionCommand::new("bash")
        .args(["-c", "read line; echo \"got $line\"; echo oops >&2"])
        .stdin(ChildIo::Piped)
        .stdout(ChildIo::Piped)
        .stderr(OwnedFd::from(writer))
        .spawn()
        .unwrap();
    let mut stdin = spawned.stdin.as_ref().unwrap();
    stdin.write_all(b"hello\n").unwrap();
    let Spawned {
        leader,
        program,
        stdout,
        stdin,
        stderr,
    } = spawned;
    drop(stdin);
    assert!(stderr.is_none(), "stderr was not piped");
    let (out, code) = finish(Spawned {
        program,
        leader,
        stdin: None,
        stdout,
        stderr: None,
    });
    assert_eq!((out.as_str(), code), ("got hello\n", Some(0)));
    // Our copy of the write end was closed by the spawn: end of file.
    let mut err = String::new();
    let mut reader = reader;
    reader.read_to_string(&mut err).unwrap();
    assert_eq!(err, "oops\n");

    // Null: reading gives end of file at once, writing goes nowhere.
    let (out, code) = output(
        SessionCommand::new("bash")
            .args(["-c", "cat; echo done; echo unseen >&2"])
            .stdin(ChildIo::Null)
            .stderr(ChildIo::Null),
    );
    assert_eq!((out.as_str(), code), ("done\n", Some(0)));
}

#[test]
fn the_child_is_a_session_leader_with_default_signal_actions_and_an_empty_mask() {
    let _turn = one_at_a_time();
    // The host ignores a signal (a disposition is the whole process's):
    // the child must not inherit that. Its mask must be empty, though the
    // spawn blocks every signal around the child's start.
    let spawned = {
        let _ignored = IgnoredUsr1::new();
        SessionCommand::new("cat")
            .args(["/proc/self/stat", "/proc/self/status"])
            .stdout(ChildIo::Piped)
            .spawn()
            .unwrap()
    };
    let pid = spawned.leader.pid();
    let (out, code) = finish(spawned);
    assert_eq!(code, Some(0));
    let stat = process_tree::parse_stat(out.lines().next().unwrap()).unwrap();
    assert_eq!((stat.pid, stat.sid), (pid, pid), "a session leader");
    // 32 and 33 are the C library's own; it refuses to change them.
    let reserved = (1u64 << 31) | (1u64 << 32);
    for line in out
        .lines()
        .filter(|l| l.starts_with("SigBlk:") || l.starts_with("SigIgn:"))
    {
        let (name, mask) = line.split_once(':').unwrap();
        let mask = u64::from_str_radix(mask.trim(), 16).unwrap();
        assert_eq!(mask & !reserved, 0, "{name} of the child: {mask:#x}");
    }
}

/// SIGUSR1 ignored by this process until dropped.
struct IgnoredUsr1(libc::sighandler_t);

impl IgnoredUsr1 {
    fn new() -> Self {
        // SAFETY: a plain disposition change in a test.
        Self(unsafe { libc::signal(libc::SIGUSR1, libc::SIG_IGN) })
    }
}

impl Drop for IgnoredUsr1 {
    fn drop(&mut self) {
        // SAFETY: as in `new`.
        unsafe { libc::signal(libc::SIGUSR1, self.0) };
    }
}

/// The tests of this file one at a time: one counts this process's zombie
/// children, which the others' children would be for a moment.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TURN.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("dsh-spawn-test-")
        .tempdir()
        .unwrap()
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}
