//! The file watcher of a language server skips build output, version
//! control and dependencies, and still watches top-level directories made
//! after the server started.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use lsp_stdio::{ServerConfig, StdioLspProvider};

/// The inotify watches this process holds, by watched directory (inode).
fn inotify_watches() -> usize {
    std::fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|info| {
            info.lines()
                .filter(|l| l.starts_with("inotify wd:"))
                .count()
        })
        .sum()
}

#[test]
fn build_output_is_not_watched_and_new_top_level_directories_are() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::write(root.join("stub.toml"), "").unwrap();
    std::fs::create_dir_all(root.join("src/nested")).unwrap();
    // A build directory of 400 directories, and dependencies.
    for i in 0..400 {
        std::fs::create_dir_all(root.join(format!("target/debug/deps/d{i}"))).unwrap();
    }
    std::fs::create_dir_all(root.join("node_modules/pkg/lib")).unwrap();
    let config = ServerConfig {
        root_markers: vec!["stub.toml".into()],
        ..stub_config(None)
    };
    let before = inotify_watches();
    let provider = StdioLspProvider::new(config, options());
    RT.block_on(provider.start(root, &lsp_seam::SandboxTag::default()))
        .unwrap();
    // The fence directory, the root, `src` and `src/nested`.
    test_support::wait_until("the watches are in place", || {
        inotify_watches() >= before + 4
    });
    let started = inotify_watches() - before;
    assert!(started < 10, "{started} watches: build output was walked");

    std::fs::create_dir_all(root.join("docs/guide")).unwrap();
    test_support::wait_until("the new directory is watched", || {
        inotify_watches() > before + started
    });
    drop(provider);
}
