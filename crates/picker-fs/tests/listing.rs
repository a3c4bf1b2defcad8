//! `FsPicker` on real directories: what it lists, what it refuses and
//! why, and that it never lists what the person could not (checked as
//! another user when the tests run as root, who may list everything).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::{PermissionsExt as _, symlink};
use std::path::{Path, PathBuf};

use picker_fs::FsPicker;
use picker_seam::{Capability, DirectoryPicker as _, Entry, Listing, Refusal};
use pretty_assertions::assert_eq;

fn entry(name: &str, path: &Path, symlink: bool, refused: Option<Refusal>) -> Entry {
    Entry {
        name: name.into(),
        path: path.to_path_buf(),
        symlink,
        refused,
    }
}

fn real(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap()
}

#[test]
fn a_directory_lists_its_directories_with_loops_and_device_trees_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let home = real(tmp.path());
    for dir in ["b", "A", ".hidden"] {
        std::fs::create_dir(home.join(dir)).unwrap();
    }
    std::fs::write(home.join("notes.txt"), "a file is not listed").unwrap();
    symlink(home.join("b"), home.join("link")).unwrap();
    symlink(home.join("nowhere"), home.join("dangling")).unwrap();
    symlink(home.join("notes.txt"), home.join("file-link")).unwrap();
    symlink(home.join("l2"), home.join("l1")).unwrap();
    symlink(home.join("l1"), home.join("l2")).unwrap();
    symlink("..", home.join("up")).unwrap();
    symlink(".", home.join("self")).unwrap();
    symlink("/proc", home.join("kernel")).unwrap();
    let picker = FsPicker::new(tmp.path());
    assert_eq!(
        picker.capability(),
        Capability::Browse {
            start: home.clone()
        }
    );
    let listing = picker.list(tmp.path()).unwrap();
    let loop_ = Some(Refusal::SymlinkLoop);
    assert_eq!(
        listing,
        Listing {
            dir: home.clone(),
            parent: home.parent().map(Path::to_path_buf),
            entries: vec![
                entry(".hidden", &home.join(".hidden"), false, None),
                entry("A", &home.join("A"), false, None),
                entry("b", &home.join("b"), false, None),
                entry(
                    "kernel",
                    Path::new("/proc"),
                    true,
                    Some(Refusal::DeviceTree)
                ),
                entry("l1", &home.join("l1"), true, loop_),
                entry("l2", &home.join("l2"), true, loop_),
                entry("link", &home.join("b"), true, None),
                entry("self", &home, true, loop_),
                entry("up", home.parent().unwrap(), true, loop_),
            ],
            truncated: false,
        }
    );
}

#[test]
fn a_start_that_cannot_be_resolved_is_the_root() {
    assert_eq!(
        FsPicker::new(Path::new("/no/such/home")).capability(),
        Capability::Browse {
            start: PathBuf::from("/")
        }
    );
}

#[test]
fn device_trees_are_refused_in_a_listing_and_as_one() {
    let root = FsPicker::new(Path::new("/")).list(Path::new("/")).unwrap();
    let refused = |name: &str| {
        root.entries
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.refused)
    };
    assert_eq!(refused("proc"), Some(Some(Refusal::DeviceTree)));
    assert_eq!(refused("sys"), Some(Some(Refusal::DeviceTree)));
    assert_eq!(refused("dev"), Some(Some(Refusal::DeviceTree)));
    assert_eq!(refused("tmp"), Some(None));
    let picker = FsPicker::new(Path::new("/"));
    for tree in ["/proc", "/proc/self", "/sys", "/dev", "/sys/fs/cgroup"] {
        let e = picker.list(Path::new(tree)).unwrap_err();
        assert_eq!(e.code(), "PICKER_DEVICE_TREE", "{tree}: {e}");
    }
}

#[test]
fn what_cannot_be_listed_gets_an_error_that_says_what_to_do() {
    let tmp = tempfile::tempdir().unwrap();
    let home = real(tmp.path());
    std::fs::write(home.join("notes.txt"), "").unwrap();
    symlink(home.join("l2"), home.join("l1")).unwrap();
    symlink(home.join("l1"), home.join("l2")).unwrap();
    let picker = FsPicker::new(&home);
    let cases = [
        (PathBuf::from("relative/dir"), "INVALID_ARGUMENT"),
        (home.join("missing"), "PICKER_NOT_FOUND"),
        (home.join("notes.txt"), "PICKER_NOT_A_DIRECTORY"),
        (home.join("notes.txt/below"), "PICKER_NOT_A_DIRECTORY"),
        (home.join("l1"), "PICKER_SYMLINK_LOOP"),
    ];
    for (path, code) in cases {
        let e = picker.list(&path).unwrap_err();
        assert_eq!(e.code(), code, "{}: {e}", path.display());
    }
    assert_eq!(
        picker.list(&home.join("missing")).unwrap_err().to_string(),
        format!(
            "{} does not exist; go up to a directory that does",
            home.join("missing").display()
        )
    );
}

/// Set in the copy of this test run as another user.
const AS_OTHER_USER: &str = "PICKER_FS_TEST_DIR";

#[test]
fn what_the_person_cannot_list_is_never_listed() {
    if let Some(dir) = std::env::var_os(AS_OTHER_USER) {
        // The copy run as a user who may not list `closed`.
        let dir = PathBuf::from(dir);
        let picker = FsPicker::new(&dir);
        let listing = picker.list(&dir).unwrap();
        assert_eq!(
            listing.entries,
            vec![
                entry(
                    "closed",
                    &dir.join("closed"),
                    false,
                    Some(Refusal::Unreadable)
                ),
                entry("open", &dir.join("open"), false, None),
            ]
        );
        let e = picker.list(&dir.join("closed")).unwrap_err();
        assert_eq!(e.code(), "PICKER_UNREADABLE", "{e}");
        let e = picker.list(&dir.join("closed/inner")).unwrap_err();
        assert_eq!(e.code(), "PICKER_UNREADABLE", "{e}");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = real(tmp.path());
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir(dir.join("open")).unwrap();
    std::fs::create_dir_all(dir.join("closed/inner")).unwrap();
    std::fs::set_permissions(dir.join("open"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(dir.join("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    // The test binary, where another user may run it (a checkout under a
    // private home is closed to `nobody`).
    let bin = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = bin.path().join("listing-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut copy = std::process::Command::new(&exe);
    copy.args([
        "--exact",
        "what_the_person_cannot_list_is_never_listed",
        "--test-threads=1",
        "--nocapture",
    ])
    .env(AS_OTHER_USER, &dir);
    if nix::unistd::geteuid().is_root() {
        // Root may list everything: the rule is checked as `nobody`.
        use std::os::unix::process::CommandExt as _;
        copy.uid(65534).gid(65534);
    } else {
        // A user: the owner of `closed` too, so it is closed to all.
        std::fs::set_permissions(dir.join("closed"), std::fs::Permissions::from_mode(0o000))
            .unwrap();
    }
    let out = copy.output().unwrap();
    std::fs::set_permissions(dir.join("closed"), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert!(
        out.status.success(),
        "as another user: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "the copy ran the test: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}
