//! The guard of repositories where a place changes its name: a directory
//! moved with symbolic links in it, the workspace seen through a second
//! mount of its file system, a file system that stores a name other than
//! the one given. The attackers are real `python3` and shell processes
//! spawned through `Prepared::pre_exec_step`; the tests that need a mount
//! namespace of their own run this test binary again under `unshare -m`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;

mod common;

use common::{Fixture, stdout};

/// Set in the copy of this binary that runs inside a private mount
/// namespace.
const INNER: &str = "DSH_GUARD_VIEWS_INNER";

fn guarded() -> bool {
    common::guarded("creating calls")
}

/// Runs test `name` of this binary again in a private mount namespace,
/// and checks that it passed there.
fn run_in_private_mounts(name: &str) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private"])
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("1 passed"),
        "the inner test did not run: {text}"
    );
}

fn inner() -> bool {
    std::env::var_os(INNER).is_some()
}

fn mount(args: &[&str]) {
    let out = Command::new("mount").args(args).output().unwrap();
    assert!(out.status.success(), "mount {args:?}: {out:?}");
}

/// A nested repository made outside the sandbox, at `ws/lib`.
fn nested_repository(ws: &Path) {
    let lib = ws.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    let out = Command::new("git")
        .arg("-C")
        .arg(&lib)
        .args(["init", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_directory_moved_with_links_in_it_leads_nowhere_out() {
    if !test_support::needs(&["bash", "python3"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-views-");
    let prepared = f.prepare_default();
    // `../../../tmp/r` from ws/a/b/c is ws/tmp/r, inside; once `b` is
    // ws/b2, the same link in ws/b2/c leads to the temp dir outside.
    let script = r#"
try() { if "$@" 2>/dev/null; then echo made; else echo refused; fi; }
mkdir -p a/b/c deep/er
try ln -s ../../../tmp/r a/b/c/l
python3 -c '
import errno, os
try:
    os.rename("a/b", "b2")
    print("renamed")
except OSError as e:
    print(errno.errorcode[e.errno])
'
try mv a/b b2
test -L b2/c/l && echo "link out" || echo "no link out"
# Exchanged with a directory at the top: the same move.
mkdir x2
python3 -c '
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
rc = libc.renameat2(-100, b"a/b", -100, b"x2", 2)
print("exchanged" if rc == 0 else errno.errorcode[ctypes.get_errno()])
'
test -L x2/c/l && echo "link out" || echo "no link out"
# A link leading out of the moved tree that stays in the workspace.
mkdir -p a/d && ln -s ../../x a/d/l2
python3 -c 'import os; os.rename("a/d", "deep/er/d"); print("renamed")'
# node_modules: links inside the tree, and to the system.
mkdir -p pkg/node_modules/.bin pkg/node_modules/foo/bin
touch pkg/node_modules/foo/bin/cli
ln -s ../foo/bin/cli pkg/node_modules/.bin/cli
ln -s /usr/bin/env pkg/node_modules/.bin/env
mkdir -p moved
try mv pkg moved/pkg
test -e moved/pkg/node_modules/.bin/cli && echo "cli there"
"#;
    let out = f.run(&prepared, "bash", &["-c", script]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [
            "made",
            "EXDEV",
            "refused",
            "no link out",
            "EXDEV",
            "no link out",
            "renamed",
            "made",
            "cli there"
        ]
    );
    assert!(std::fs::symlink_metadata(f.ws.join("b2/c/l")).is_err());
    assert!(std::fs::symlink_metadata(f.ws.join("a/b/c/l")).is_ok());
}

#[test]
fn a_dot_git_file_is_not_written_through_another_name() {
    if !test_support::needs(&["bash"]) || !guarded() {
        return;
    }
    let f = Fixture::new("git-guard-views-");
    let sub = f.ws.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(sub.join(".git"), "gitdir: ../lib/.git\n").unwrap();
    // A second name the person made for it, beside it, as a name stored
    // otherwise would be (vfat opens `.git` for `.git.`).
    std::fs::hard_link(sub.join(".git"), sub.join("alias")).unwrap();
    std::fs::write(sub.join("plain"), "").unwrap();
    let prepared = f.prepare_default();
    let script = r#"
try() { if "$@" 2>/dev/null; then echo made; else echo refused; fi; }
try ln sub/.git y
try bash -c 'echo "gitdir: /tmp/evil" > y'
try bash -c 'echo "gitdir: /tmp/evil" > sub/alias'
try bash -c 'echo "gitdir: /tmp/evil" >> sub/alias'
try bash -c 'echo x > sub/plain'
try mkdir sub2 .git.
"#;
    let out = f.run(&prepared, "bash", &["-c", script]);
    // `y` is then a file of its own.
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        ["refused", "made", "refused", "refused", "made", "refused"]
    );
    assert_eq!(
        std::fs::read_to_string(sub.join(".git")).unwrap(),
        "gitdir: ../lib/.git\n"
    );
}

#[test]
fn a_second_view_of_the_workspace_is_the_workspace() {
    if !inner() {
        if test_support::needs_root("a bind mount")
            && test_support::needs(&["unshare", "mount", "umount", "python3", "git"])
            && guarded()
        {
            run_in_private_mounts("a_second_view_of_the_workspace_is_the_workspace");
        }
        return;
    }
    let f = Fixture::new("git-guard-views-");
    nested_repository(&f.ws);
    std::fs::create_dir_all(f.ws.join("d")).unwrap();
    let base = f.ws.parent().unwrap().to_path_buf();
    // The workspace itself at another path, and the directory above it;
    // directories in it at other paths; a nested repository's hooks
    // under another name in its `.git` (as a case-folding file system
    // finds `hooks` by another spelling). All made before the sandbox,
    // whose mount namespace is a copy.
    let binds = [
        (f.ws.clone(), base.join("view")),
        (base.clone(), base.join("above")),
        (f.ws.join("d"), base.join("d-view")),
        (f.ws.join("lib"), base.join("lib-view")),
        (f.ws.join("lib/.git/hooks"), f.ws.join("lib/.git/hk")),
    ];
    for (from, to) in &binds {
        std::fs::create_dir_all(to).unwrap();
        mount(&["--bind", from.to_str().unwrap(), to.to_str().unwrap()]);
    }
    let prepared = f.prepare_default();
    let script = r##"
import os, subprocess, sys
view = sys.argv[1]
def attempt(what, action):
    try:
        action()
        print(what, "made")
    except OSError:
        print(what, "refused")
def write(path, mode="a"):
    with open(path, mode) as f:
        f.write("#!/bin/sh\n")
attempt("mkdir", lambda: os.mkdir(view + "/.git"))
attempt("head", lambda: write(view + "/d/HEAD", "w"))
attempt("hook", lambda: write(view + "/lib/.git/hooks/pre-commit", "w"))
attempt("config", lambda: write(view + "/lib/.git/config"))
attempt("plain", lambda: write(view + "/plain.txt", "w"))
init = subprocess.run(["git", "init", "-q", view + "/x"], capture_output=True)
print("init", "made" if init.returncode == 0 else "refused")
"##;
    for view in [base.join("view"), base.join("above/ws")] {
        let out = f.run(
            &prepared,
            "python3",
            &["-c", script, view.to_str().unwrap()],
        );
        assert_eq!(
            stdout(&out).lines().collect::<Vec<_>>(),
            [
                "mkdir refused",
                "head refused",
                "hook refused",
                "config refused",
                "plain made",
                "init refused"
            ],
            "{}",
            view.display()
        );
    }
    // Directories in the workspace bound elsewhere: Landlock grants the
    // workspace by its top directory, which a path through such a mount
    // does not pass, so nothing at all is written there.
    let below = r##"
try() { if "$@" 2>/dev/null; then echo made; else echo refused; fi; }
try mkdir "$1/.git"
try bash -c "echo x > '$1/plain.txt'"
try bash -c "echo x > '$2/.git/hooks/pre-commit'"
"##;
    let (d_view, lib_view) = (base.join("d-view"), base.join("lib-view"));
    let out = f.run(
        &prepared,
        "bash",
        &[
            "-c",
            below,
            "below",
            d_view.to_str().unwrap(),
            lib_view.to_str().unwrap(),
        ],
    );
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        ["refused", "refused", "refused"]
    );
    // The hooks under another name, in the workspace: refused by identity.
    let hooks = r##"
try() { if "$@" 2>/dev/null; then echo made; else echo refused; fi; }
try bash -c 'echo "#!/bin/sh" > lib/.git/hk/pre-commit'
try bash -c 'echo "#!/bin/sh" >> lib/.git/hk/pre-commit.sample'
try mkdir lib/.git/hk/sub
try bash -c 'echo x > lib/.git/description'
"##;
    let out = f.run(&prepared, "bash", &["-c", hooks]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        ["refused", "refused", "refused", "made"]
    );
    for (_, to) in binds.iter().rev() {
        let out = Command::new("umount").arg(to).output().unwrap();
        assert!(out.status.success(), "umount {}: {out:?}", to.display());
    }
    assert!(!f.ws.join(".git").exists());
    assert!(!f.ws.join("d/.git").exists());
    assert!(!f.ws.join("lib/.git/hooks/pre-commit").exists());
    assert!(!f.ws.join("x/.git").exists());
    assert!(f.ws.join("plain.txt").exists());
}

/// Whether `program` is on `PATH`; says the test is skipped when not.
fn has_program(program: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|d| d.join(program).is_file()));
    if !found {
        eprintln!("skipped: no {program} on PATH");
    }
    found
}

/// Whether this kernel mounts file system `fs`.
fn kernel_has(fs: &str) -> bool {
    let known = std::fs::read_to_string("/proc/filesystems")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().last() == Some(fs));
    if !known {
        eprintln!("skipped: this kernel has no {fs}");
    }
    known
}

#[test]
fn a_file_system_that_drops_trailing_dots_makes_no_repository() {
    if !inner() {
        // vfat is neither in every kernel nor installed by the test
        // harness: without it the test is skipped, whatever the tier.
        if kernel_has("vfat")
            && has_program("mkfs.vfat")
            && test_support::needs_root("a loop mount")
            && test_support::needs(&["unshare", "mount", "umount", "python3"])
            && guarded()
        {
            run_in_private_mounts("a_file_system_that_drops_trailing_dots_makes_no_repository");
        }
        return;
    }
    let f = Fixture::new("git-guard-views-");
    let image = f.ws.parent().unwrap().join("vfat.img");
    std::fs::File::create(&image)
        .unwrap()
        .set_len(8 << 20)
        .unwrap();
    let out = Command::new("mkfs.vfat").arg(&image).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    mount(&[
        "-o",
        "loop",
        image.to_str().unwrap(),
        f.ws.to_str().unwrap(),
    ]);
    let prepared = f.prepare_default();
    let script = r#"
import os
for name in (".git.", ".git..", "HEAD.", "ok."):
    try:
        os.mkdir(name)
        print(name, "made")
    except OSError:
        print(name, "refused")
print(os.path.exists(".git"), os.path.exists("HEAD"))
"#;
    let out = f.run(&prepared, "python3", &["-c", script]);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [
            ".git. refused",
            ".git.. refused",
            "HEAD. refused",
            "ok. made",
            "False False"
        ]
    );
    let out = Command::new("umount").arg(&f.ws).output().unwrap();
    assert!(out.status.success(), "umount: {out:?}");
}

/// A file system in memory, served over `/dev/fuse`, that drops U+200B
/// (ZERO WIDTH SPACE) from every name as a file system with ignorable
/// characters does: `.gi\u200bt` is stored, and found, as `.git`.
const IGNORING_FS: &str = r##"
# A file system in memory that drops U+200B (ZERO WIDTH SPACE) from every
# name, as a file system with ignorable characters does: ".gi\u200bt" is
# stored, and found, as ".git".
import ctypes, errno, os, struct, sys, stat

target = sys.argv[1].encode()
fd = os.open("/dev/fuse", os.O_RDWR)
libc = ctypes.CDLL(None, use_errno=True)
opts = b"fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other" % fd
if libc.mount(b"toyfs", target, b"fuse.toyfs", 0, opts) != 0:
    print("mount failed", os.strerror(ctypes.get_errno()), flush=True)
    sys.exit(1)

ZWSP = "\u200b".encode()
nodes = {1: {"mode": stat.S_IFDIR | 0o755, "children": {}, "parent": 1}}
next_id = [2]

def attr(nid):
    n = nodes[nid]
    return struct.pack("<QQQQQQIIIIIIIIII", nid, 0, 0, 0, 0, 0, 0, 0, 0,
                       n["mode"], 2, 0, 0, 0, 4096, 0)

def entry(nid):
    return struct.pack("<QQQQII", nid, 0, 0, 0, 0, 0) + attr(nid)

def reply(unique, err=0, body=b""):
    os.write(fd, struct.pack("<IiQ", 16 + len(body), -err, unique) + body)

def name_of(data):
    return data.split(b"\0", 1)[0].replace(ZWSP, b"")

while True:
    try:
        req = os.read(fd, 1 << 20 | 4096)
    except OSError as e:
        if e.errno in (errno.ENODEV,):
            break
        if e.errno in (errno.EINTR, errno.ENOENT):
            continue
        raise
    length, op, unique, nid = struct.unpack_from("<IIQQ", req)
    body = req[40:length]
    if op == 26:  # INIT
        major, minor, readahead, flags = struct.unpack_from("<IIII", body)
        out = struct.pack("<IIIIHHIIHHII", 7, 31, readahead, 0, 16, 12, 65536, 1, 32, 0, 0, 0)
        reply(unique, 0, out + b"\0" * (64 - len(out)))
        print("ready", flush=True)
    elif op == 1:  # LOOKUP
        child = nodes.get(nid, {}).get("children", {}).get(name_of(body))
        if child is None:
            reply(unique, errno.ENOENT)
        else:
            reply(unique, 0, entry(child))
    elif op in (2, 42, 36):  # FORGET, BATCH_FORGET, INTERRUPT
        pass
    elif op == 3:  # GETATTR
        if nid in nodes:
            reply(unique, 0, struct.pack("<QII", 0, 0, 0) + attr(nid))
        else:
            reply(unique, errno.ENOENT)
    elif op == 9:  # MKDIR
        mode, umask = struct.unpack_from("<II", body)
        name = name_of(body[8:])
        children = nodes[nid]["children"]
        if name in children:
            reply(unique, errno.EEXIST)
        else:
            new = next_id[0]
            next_id[0] += 1
            nodes[new] = {"mode": stat.S_IFDIR | (mode & 0o7777 & ~umask), "children": {}, "parent": nid}
            children[name] = new
            reply(unique, 0, entry(new))
    elif op == 11:  # RMDIR
        name = name_of(body)
        children = nodes[nid]["children"]
        child = children.get(name)
        if child is None:
            reply(unique, errno.ENOENT)
        elif nodes[child]["children"]:
            reply(unique, errno.ENOTEMPTY)
        else:
            del children[name]
            reply(unique, 0)
    elif op == 27:  # OPENDIR
        reply(unique, 0, struct.pack("<QII", 0, 0, 0))
    elif op == 28:  # READDIR
        fh, offset, size = struct.unpack_from("<QQI", body)
        out = b""
        names = [(b".", nid), (b"..", nodes[nid]["parent"])] + sorted(nodes[nid]["children"].items())
        for i, (name, child) in enumerate(names):
            if i < offset:
                continue
            kind = 4  # DT_DIR
            rec = struct.pack("<QQII", child, i + 1, len(name), kind) + name
            rec += b"\0" * ((8 - len(rec) % 8) % 8)
            if len(out) + len(rec) > size:
                break
            out += rec
        reply(unique, 0, out)
    elif op in (29, 25, 18, 30, 34, 38):  # RELEASEDIR FLUSH RELEASE FSYNCDIR ACCESS DESTROY
        reply(unique, 0)
    elif op == 17:  # STATFS
        reply(unique, 0, struct.pack("<QQQQQIIII", 1000, 1000, 1000, 1000, 1000, 4096, 255, 4096, 0) + b"\0" * 24)
    else:
        reply(unique, errno.ENOSYS)
"##;

#[test]
fn a_file_system_that_ignores_characters_in_names_makes_no_repository() {
    if !inner() {
        if kernel_has("fuse")
            && std::path::Path::new("/dev/fuse").exists()
            && test_support::needs_root("a FUSE mount")
            && test_support::needs(&["unshare", "umount", "python3"])
            && guarded()
        {
            run_in_private_mounts(
                "a_file_system_that_ignores_characters_in_names_makes_no_repository",
            );
        }
        return;
    }
    let f = Fixture::new("git-guard-views-");
    let server = f.ws.parent().unwrap().join("ignoring-fs.py");
    std::fs::write(&server, IGNORING_FS).unwrap();
    let mut child = test_support::spawn_ready(Command::new("python3").arg(&server).arg(&f.ws));
    let prepared = f.prepare_default();
    let script = r#"
import os
for name in (".gi\u200bt", "HE\u200bAD", "o\u200bk"):
    try:
        os.mkdir(name)
        print(name.replace("\u200b", "+"), "made")
    except OSError:
        print(name.replace("\u200b", "+"), "refused")
print(os.path.exists(".git"), os.path.exists("HEAD"), os.path.exists("ok"))
"#;
    let out = f.run(&prepared, "python3", &["-c", script]);
    let umount = Command::new("umount")
        .arg("-l")
        .arg(&f.ws)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(umount.status.success(), "umount: {umount:?}");
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>(),
        [
            ".gi+t refused",
            "HE+AD refused",
            "o+k made",
            "False False True"
        ]
    );
}
