//! The step a child runs between `fork` and `exec` must not allocate: in a
//! multi-threaded parent another thread may have held the allocator's lock
//! at the fork, and the child would deadlock. This binary counts the
//! allocations made inside the step, in the child, and makes the spawn
//! fail if there was one.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use sandbox::{Availability, Mode, Sandbox, SandboxPolicy, SpawnContext};

struct Counting;

static IN_STEP: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if IN_STEP.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if IN_STEP.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn the_child_step_allocates_nothing() {
    let base = tempfile::Builder::new()
        .prefix("sandbox-alloc-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let root = base.path().canonicalize().unwrap();
    let (home, ws) = (root.join("home"), root.join("ws"));
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::create_dir_all(ws.join(".git")).unwrap();
    let sandbox = Sandbox::new(
        SandboxPolicy {
            mode: Mode::WorkspaceWrite,
            network: false,
            ..SandboxPolicy::default()
        },
        Availability::probe_kernel(),
    )
    .unwrap();
    let prepared = sandbox.prepare(&SpawnContext::command(&ws, &home)).unwrap();
    // Every mechanism is in play: the namespaces (for .git), Landlock and
    // seccomp (for the network).
    assert_eq!(
        (
            prepared.status().mode,
            prepared.status().enforced,
            prepared.status().network
        ),
        (sandbox::Mode::WorkspaceWrite, true, false)
    );
    let step = prepared.pre_exec_step();
    let mut command = Command::new("true");
    command.current_dir(&ws).stdin(Stdio::null());
    // SAFETY: the closure only flips atomics around the step under test.
    unsafe {
        command.pre_exec(move || {
            IN_STEP.store(true, Ordering::Relaxed);
            let result = step();
            IN_STEP.store(false, Ordering::Relaxed);
            result?;
            if ALLOCATIONS.load(Ordering::Relaxed) != 0 {
                return Err(std::io::Error::from_raw_os_error(libc::ENOTRECOVERABLE));
            }
            Ok(())
        });
    }
    let status = command.status().expect("the step allocated or failed");
    assert!(status.success());
}
