//! The guard of repositories on the real kernel, attacked the ways a
//! confined command can attack it: a second thread rewriting the name
//! between the check and the call, a symbolic link to a repository the
//! sandbox may write outside the workspace, a config file of a nested
//! repository opened for writing without `O_CREAT`. The attackers are real
//! `python3` processes spawned through `Prepared::pre_exec_step`; ordinary
//! work (a nested repository's commit, `mv`, symbolic links to system
//! paths) is checked to keep working.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::process::Command;

use pretty_assertions::assert_eq;
use sandbox::Availability;

mod common;

use common::{Fixture, stdout};

fn guarded() -> bool {
    common::guarded("creating calls")
}

/// One thread makes an entry through a buffer another thread keeps
/// flipping between an allowed name and `.git`: a guard that checked the
/// name and then let the kernel read it again would let one through.
const RACE: &str = r#"
import ctypes, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
call, rounds = sys.argv[1], int(sys.argv[2])
decoy, bad = b"race/ok_x", b"race/.git"
os.makedirs("race", exist_ok=True)
buf = ctypes.create_string_buffer(decoy, len(decoy) + 1)
target = ctypes.create_string_buffer(b"/nowhere", 16)
stop = False
def flip():
    while not stop:
        for p in (decoy, bad):
            ctypes.memmove(buf, p, len(p))
t = threading.Thread(target=flip)
t.start()
made = refused = 0
for _ in range(rounds):
    if call == "mkdir":
        rc = libc.mkdir(buf, 0o755)
    elif call == "open":
        rc = libc.open(buf, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644)
        if rc >= 0:
            os.close(rc)
    elif call == "symlink":
        rc = libc.symlink(target, buf)
    elif call == "mknod":
        rc = libc.mknod(buf, 0o10644, 0)
    elif call in ("rename", "link"):
        open("race/src", "w").close()
        rc = getattr(libc, call)(b"race/src", buf)
    if rc == 0 or (call == "open" and rc >= 0):
        made += 1
    else:
        refused += 1
    if os.path.lexists("race/.git"):
        break
    try:
        if call == "mkdir":
            os.rmdir("race/ok_x")
        else:
            os.unlink("race/ok_x")
    except OSError:
        pass
stop = True
t.join()
print(os.path.lexists("race/.git"), made > 0, refused > 0)
"#;

#[test]
fn a_name_rewritten_by_another_thread_during_the_check_never_makes_a_repository() {
    if !test_support::needs(&["python3"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    // With the sandbox's user and mount namespaces, and without them
    // (the worker then carries the Landlock rules alone).
    let no_userns = Availability::probe_kernel().pretend("no-userns").unwrap();
    for prepared in [f.prepare_default(), f.prepare_default_in(no_userns)] {
        for call in ["mkdir", "open", "symlink", "mknod", "rename", "link"] {
            let out = f.run(&prepared, "python3", &["-c", RACE, call, "1500"]);
            // No `.git` made; both names were tried (some calls made the
            // decoy, some were refused as `.git`).
            assert_eq!(stdout(&out), "False True True", "{call}");
            assert!(!f.ws.join("race/.git").exists(), "{call}");
        }
    }
}

/// A nested repository made outside the sandbox (as a person's clone is),
/// with a commit, at `ws/lib`.
fn nested_repository(ws: &Path) -> PathBuf {
    let lib = ws.join("lib");
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .arg("-C")
            .arg(&lib)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    };
    std::fs::create_dir_all(&lib).unwrap();
    git(&["init", "-q"]);
    std::fs::write(lib.join("a.txt"), "a\n").unwrap();
    git(&["add", "a.txt"]);
    git(&[
        "-c",
        "user.name=p",
        "-c",
        "user.email=p@x",
        "commit",
        "-q",
        "-m",
        "first",
    ]);
    lib
}

#[test]
fn a_nested_repositorys_config_cannot_be_opened_for_writing_without_o_creat() {
    if !test_support::needs(&["python3", "git"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let lib = nested_repository(&f.ws);
    let before = std::fs::read_to_string(lib.join(".git/config")).unwrap();
    let prepared = f.prepare_default();
    let script = r#"
import os, sys
results = []
for path in sys.argv[1:]:
    try:
        with open(path, "r+") as config:
            config.seek(0, 2)
            config.write("[core]\n\tfsmonitor = /tmp/evil.sh\n")
        results.append("written")
    except PermissionError:
        results.append("refused")
print(" ".join(results))
"#;
    let hook = lib.join(".git/hooks/pre-commit.sample");
    // A submodule-like `.git` file, which could be pointed elsewhere.
    let sub = f.ws.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join(".git"), "gitdir: ../lib/.git\n").unwrap();
    let out = f.run(
        &prepared,
        "python3",
        &[
            "-c",
            script,
            lib.join(".git/config").to_str().unwrap(),
            hook.to_str().unwrap(),
            sub.join(".git").to_str().unwrap(),
            lib.join("a.txt").to_str().unwrap(),
        ],
    );
    assert_eq!(stdout(&out), "refused refused refused written");
    assert_eq!(
        std::fs::read_to_string(sub.join(".git")).unwrap(),
        "gitdir: ../lib/.git\n"
    );
    // Nor with `O_CREAT` (a shell's `>`).
    let out = f.run(
        &prepared,
        "bash",
        &[
            "-c",
            "echo 'gitdir: /tmp/elsewhere' > sub/.git && echo written || echo refused",
        ],
    );
    assert_eq!(stdout(&out), "refused");
    assert_eq!(
        std::fs::read_to_string(lib.join(".git/config")).unwrap(),
        before
    );
    // Reading it, and committing there, still work.
    let out = f.run(
        &prepared,
        "bash",
        &[
            "-c",
            "cat lib/.git/config >/dev/null && echo b > lib/b.txt && git -C lib add b.txt && \
             git -C lib -c user.name=a -c user.email=a@x commit -q -m second && \
             git -C lib log --format=%s | head -1",
        ],
    );
    assert_eq!(stdout(&out), "second");
}

/// The one call the guard lets the kernel make after its check — a
/// session leader without a controlling terminal opening a terminal by
/// name, which takes it as its controlling terminal — attacked by
/// rewriting the path between the check and the kernel's own read: from
/// a shared mapping, with `process_vm_writev`, through `/proc/self/mem`
/// opened before a fork, and from a process sharing the memory
/// (`CLONE_VM`), also from a thread whose process's first thread exited;
/// and a process with a Linux AIO context, whose reads
/// complete into its memory. The attacker is
/// `tests/attackers/terminal_race.c`.
#[test]
fn a_terminal_opened_by_name_is_never_swapped_for_a_repositorys_config() {
    if !test_support::needs(&["cc", "git"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let lib = nested_repository(&f.ws);
    let config = lib.join(".git/config");
    let before = std::fs::read_to_string(&config).unwrap();
    let attacker = f.tmp.join("terminal_race");
    let built = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&attacker)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/attackers/terminal_race.c"
        ))
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let attacker = attacker.to_str().unwrap();
    let prepared = f.prepare_default();
    // Unattacked, the open still gives the terminal as the controlling
    // one (as screen's windows take theirs) — where the kernel can tell
    // that no other process shares the memory (`kcmp`, CONFIG_KCMP);
    // without, the guard opens the terminal itself, never as the
    // controlling one.
    let pid = i32::try_from(std::process::id()).unwrap();
    // SAFETY: kcmp compares this process with itself; no memory.
    let kcmp = unsafe { libc::syscall(libc::SYS_kcmp, pid, pid, 1, 0, 0) } == 0;
    let out = f.run(&prepared, attacker, &["plain", "5", "lib/.git/config"]);
    let plain = if kcmp { "held 5 0 0" } else { "held 0 5 0" };
    assert_eq!(stdout(&out), plain);
    // "held" or "written", then how many opens took the terminal as the
    // controlling one, opened it without, or failed.
    let mut outcomes = Vec::new();
    for mode in ["shared", "vmwrite", "procmem", "clonevm", "zombie", "aio"] {
        // A process with an AIO context takes long to exit: fewer rounds.
        let rounds = if mode == "aio" { "20" } else { "400" };
        let out = f.run(&prepared, attacker, &[mode, rounds, "lib/.git/config"]);
        outcomes.push((mode, stdout(&out)));
        std::fs::write(&config, &before).unwrap();
    }
    let counts =
        |out: &str| -> Vec<u32> { out.split(' ').skip(1).map(|n| n.parse().unwrap()).collect() };
    for (mode, out) in &outcomes {
        assert!(out.starts_with("held "), "{outcomes:#?}");
        let counts = counts(out);
        match *mode {
            // Memory others write, or share: the terminal is opened by
            // the guard, and never becomes the controlling one.
            "shared" | "clonevm" | "zombie" => {
                assert!(counts[0] == 0 && counts[1] > 0, "{outcomes:#?}");
            }
            // Nobody rewrites, but a read could complete into the memory.
            "aio" => assert_eq!(counts, [0, 20, 0], "{outcomes:#?}"),
            // The writes are refused, so every open is the checked one.
            "vmwrite" if kcmp => assert_eq!(counts, [400, 0, 0], "{outcomes:#?}"),
            "vmwrite" => assert_eq!(counts, [0, 400, 0], "{outcomes:#?}"),
            // The memory is never opened for writing.
            _ => assert_eq!(counts, [0, 0, 400], "{outcomes:#?}"),
        }
    }
}

#[test]
fn a_symbolic_link_from_the_workspace_into_a_writable_place_outside_it_is_refused() {
    if !test_support::needs(&["bash", "python3"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let prepared = f.prepare_default();
    let tmp = f.tmp.display().to_string();
    // Into the temp dir (the repository does not exist yet, or does), or
    // through /proc to a process's working directory there: refused.
    // Inside the workspace, to system paths: made.
    let script = format!(
        r#"
mkdir -p "{tmp}/repo/.git" sub
try() {{ if ln -s "$1" "$2" 2>/dev/null; then echo made; else echo refused; fi; }}
try "{tmp}/repo" to-repo
try "{tmp}/later" to-later
try ../../tmp/repo sub/relative
try /proc/self/cwd to-cwd
try /usr/bin/env to-env
try sub in-ws
try ../sub sub/up
ln -s sub hop && try hop/../../tmp/repo via-hop
ln -s "{tmp}/repo" "{tmp}/outside-link"
if ln -P "{tmp}/outside-link" hard 2>/dev/null; then echo made; else echo refused; fi
python3 -c '
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_PATH | os.O_NOFOLLOW)
print("made" if libc.linkat(fd, b"", -100, b"hard-by-fd", 0x1000) == 0 else "refused")
' "{tmp}/outside-link"
"#
    );
    let out = f.run(&prepared, "bash", &["-c", &script]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [
            "refused", "refused", "refused", "refused", "made", "made", "made", "refused",
            "refused", "refused"
        ]
    );
    assert!(!f.ws.join("to-repo").exists());
}

/// A way out made in two steps: a link made while its way does not exist
/// yet (`x -> up/tmp/…/repo`, no `up`), then a second one that leads out
/// to a place the sandbox may not write (`up -> /`), through which the
/// first would lead into the temp dir. The second is refused however it
/// is made — a new link, a directory replaced by one, a link moved into
/// place, a directory holding one moved into place — and a link out to a
/// system place through which no waiting link leads is made.
#[test]
fn a_link_made_before_its_way_out_existed_is_judged_when_the_way_is_made() {
    if !test_support::needs(&["bash", "python3"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let prepared = f.prepare_default();
    let tmp = f.tmp.display().to_string();
    let below_root = tmp.trim_start_matches('/');
    let script = format!(
        r#"
mkdir -p "{tmp}/repo/.git"
try() {{ if ln -s "$1" "$2" 2>/dev/null; then echo made; else echo refused; fi; }}
move() {{ if mv -T "$1" "$2" 2>/dev/null; then echo moved; else echo refused; fi; }}
try "up/{below_root}/repo" x
try / up
try / g
move g up
mkdir d && try "d/{below_root}/repo" y
rmdir d && try / d
mkdir box && try / box/root
try "w/root/{below_root}/repo" z
move box w
try /usr to-usr
ls
"#
    );
    let out = f.run(&prepared, "bash", &["-c", &script]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [
            "made", "refused", "made", "refused", "made", "refused", "made", "made", "refused",
            "made", "box", "g", "to-usr", "x", "y", "z"
        ],
        "{out:?}"
    );
}

/// Makes `repo/.git` in the fixture's temp dir from `prepared`, a
/// repository a confined command may make there; the temp dir's path
/// without its leading `/`, for a link's way to it from `/`.
fn repository_in_temp_dir(f: &Fixture, prepared: &sandbox::Prepared) -> String {
    let tmp = f.tmp.display().to_string();
    stdout(&f.run(
        prepared,
        "bash",
        &["-c", &format!("mkdir -p '{tmp}/repo/.git'")],
    ));
    tmp.trim_start_matches('/').to_owned()
}

/// `ln -s TARGET NAME` in the workspace, confined by `prepared`: "made"
/// or "refused".
fn try_link(f: &Fixture, prepared: &sandbox::Prepared, target: &str, name: &str) -> String {
    let script = format!(
        r#"if ln -s "{target}" "{name}" 2>/dev/null; then echo made; else echo refused; fi"#
    );
    stdout(&f.run(prepared, "bash", &["-c", &script]))
}

/// The same attack split between two sandboxes of one workspace (two
/// preparations: a second agent there, or the same agent's command
/// after its preparation was made anew while the first still runs),
/// whose temp dirs differ: the link is made in one, the way out in the
/// other, and it leads into the first one's temp dir, which the second
/// may not write.
#[test]
fn a_way_out_made_by_another_sandbox_of_the_workspace_is_judged_with_its_links() {
    if !test_support::needs(&["bash"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let first = f.prepare_default();
    let other_tmp = f.home.join("other-tmp");
    std::fs::create_dir_all(&other_tmp).unwrap();
    let second = f.prepare_default_for(
        &sandbox::SpawnContext::command(&f.ws, &f.home).with_temp_dir(&other_tmp),
    );
    let below_root = repository_in_temp_dir(&f, &first);
    assert_eq!(
        try_link(&f, &first, &format!("up/{below_root}/repo"), "x"),
        "made"
    );
    // The way out, made in the other sandbox, would complete x's.
    assert_eq!(try_link(&f, &second, "/", "up"), "refused");
    assert!(!f.ws.join("up").exists());
    // A way out that completes nothing is made.
    assert_eq!(try_link(&f, &second, "/usr", "to-usr"), "made");
}

/// The same attack split between an agent's sandbox and a language
/// server's, whose writable root is a project inside the workspace (a
/// build script the agent wrote runs there): each way round, the link in
/// one and the way out in the other.
#[test]
fn a_way_out_across_an_agent_and_a_language_server_is_judged_with_both_links() {
    if !test_support::needs(&["bash"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let proj = f.ws.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::create_dir_all(f.ws.join("a")).unwrap();
    let agent = f.prepare_default();
    let server = f.prepare_default_for(
        &sandbox::SpawnContext::language_server(&proj, &f.home).with_temp_dir(&f.tmp),
    );
    let below_root = repository_in_temp_dir(&f, &agent);
    // The server's link, the agent's way.
    assert_eq!(
        try_link(&f, &server, &format!("up/{below_root}/repo"), "proj/x"),
        "made"
    );
    assert_eq!(try_link(&f, &agent, "/", "proj/up"), "refused");
    // The agent's link (outside the server's root), the server's way.
    assert_eq!(
        try_link(&f, &agent, &format!("../proj/up2/{below_root}/repo"), "a/y"),
        "made"
    );
    assert_eq!(try_link(&f, &server, "/", "proj/up2"), "refused");
    assert!(!proj.join("up").exists() && !proj.join("up2").exists());
}

#[test]
fn ordinary_work_keeps_its_modes_owner_and_special_files() {
    if !test_support::needs(&["bash", "python3"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    std::fs::write(f.tmp.join("moved.txt"), "m\n").unwrap();
    let prepared = f.prepare_default();
    let tmp = f.tmp.display().to_string();
    let script = format!(
        r#"
set -e
umask 027
mkdir d && touch d/f && stat -c '%a' d d/f
echo out > /dev/stdout
echo thread > /proc/thread-self/fd/1
echo err > /dev/stderr 2>&1
echo gone > /dev/null
mkfifo p
(cat p > fifo.txt) &
echo through > p
wait
cat fifo.txt
mv "{tmp}/moved.txt" . && cat moved.txt
ln -s d/f link && echo more >> link && cat d/f
python3 -c 'import os; fd = os.open("x", os.O_CREAT | os.O_WRONLY | os.O_EXCL); print(os.get_inheritable(fd))'
python3 -c 'import os; fd = os.open("y", os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC); print(os.get_inheritable(fd))'
"#
    );
    let out = f.run(&prepared, "bash", &["-c", &script]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [
            "750", "640", "out", "thread", "through", "m", "more", "False", "False"
        ]
    );
    // SAFETY: getuid and getgid cannot fail.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let meta = std::fs::metadata(f.ws.join("d/f")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!((meta.uid(), meta.gid()), (uid, gid), "owned as before");
}

#[test]
fn another_processs_files_are_not_reached_through_its_proc_links() {
    if !test_support::needs(&["python3", "git"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let git = Command::new("git")
        .args(["init", "-q"])
        .arg(&f.ws)
        .status()
        .unwrap();
    assert!(git.success());
    let config = f.ws.join(".git/config");
    let before = std::fs::read_to_string(&config).unwrap();
    let prepared = f.prepare_default();
    // A pipe of this process (outside the sandbox): its write end is
    // open here, visible as /proc/PID/fd/N where /proc is the host's.
    let mut ends = [0; 2];
    // SAFETY: pipe2 writes two descriptors.
    assert_eq!(
        unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) },
        0
    );
    // SAFETY: both are new and ours.
    let (read_end, write_end) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(ends[0]),
            std::os::fd::OwnedFd::from_raw_fd(ends[1]),
        )
    };
    let pid = std::process::id();
    let pipe = format!("/proc/{pid}/fd/{}", write_end.as_raw_fd());
    // The workspace's .git, read-only in the sandbox's mount namespace,
    // reached through this process's root (the host's mounts).
    let escape = format!("/proc/{pid}/root{}", config.display());
    let script = r#"
import sys
results = []
for path in sys.argv[1:]:
    try:
        with open(path, "a") as f:
            f.write("[core]\n\tfsmonitor = /tmp/evil.sh\n")
        results.append("written")
    except OSError as e:
        results.append("refused")
print(" ".join(results))
"#;
    let out = f.run(&prepared, "python3", &["-c", script, &pipe, &escape]);
    assert_eq!(stdout(&out), "refused refused");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), before);
    drop(write_end);
    let mut got = String::new();
    std::fs::File::from(read_end)
        .read_to_string(&mut got)
        .unwrap();
    assert_eq!(got, "", "nothing came through the pipe");
}

#[test]
fn dev_tty_opened_for_writing_is_the_controlling_terminal() {
    if !test_support::needs(&["bash", "script"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let prepared = f.prepare_default();
    // In a terminal of its own (script's), with its own descriptors on
    // the terminal, and with none of them left on it.
    let inner =
        "echo held > /dev/tty; bash -c 'exec </dev/null >/dev/null 2>&1; echo none > /dev/tty'";
    let out = f.run(&prepared, "script", &["-qec", inner, "/dev/null"]);
    assert_eq!(
        stdout(&out).lines().map(str::trim).collect::<Vec<_>>(),
        ["held", "none"]
    );
}

#[test]
fn a_link_moved_or_a_submodule_s_hooks_or_a_deleted_looking_name_open_no_way_out() {
    if !test_support::needs(&["bash", "git"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-");
    let lib = nested_repository(&f.ws);
    let prepared = f.prepare_default();
    // `../tmp/r` from ws/a/b is ws/a/tmp/r, inside; from ws itself it is
    // the temp dir outside, where a repository is free to make.
    let script = r##"
try() { if "$@" 2>/dev/null; then echo made; else echo refused; fi; }
mkdir -p a/b lib/.git/modules/dep/hooks "x (deleted)"
try ln -s ../tmp/r a/b/L
try mv a/b/L L
try ln -s ../../tmp/r "x (deleted)/M"
try bash -c 'echo "#!/bin/sh" > lib/.git/modules/dep/hooks/pre-commit'
"##;
    let out = f.run(&prepared, "bash", &["-c", script]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        ["made", "refused", "refused", "refused"]
    );
    assert!(!f.ws.join("L").exists());
    assert!(!lib.join(".git/modules/dep/hooks/pre-commit").exists());
}
