//! What the guard's tests share: a home, a workspace and a temp dir of
//! their own, a sandbox prepared for them, and a confined run of a real
//! program.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use sandbox::{Availability, Prepared, Sandbox, SandboxPolicy, SpawnContext};

pub struct Fixture {
    _base: tempfile::TempDir,
    pub home: PathBuf,
    pub ws: PathBuf,
    pub tmp: PathBuf,
}

impl Fixture {
    /// Fresh directories under the target's temp dir, named `prefix…`.
    pub fn new(prefix: &str) -> Self {
        let base = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let root = base.path().canonicalize().unwrap();
        let (home, ws, tmp) = (root.join("home"), root.join("ws"), root.join("tmp"));
        for d in [&home, &ws, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        Self {
            _base: base,
            home,
            ws,
            tmp,
        }
    }

    /// The sandbox of `policy` on `availability`, prepared for a command
    /// in the workspace.
    pub fn prepare_with(&self, policy: SandboxPolicy, availability: Availability) -> Prepared {
        let context = SpawnContext::command(&self.ws, &self.home).with_temp_dir(&self.tmp);
        Sandbox::new(policy, availability)
            .unwrap()
            .prepare(&context)
            .unwrap()
    }

    /// The default `workspace-write` sandbox on `availability`, prepared
    /// for a command in the workspace.
    pub fn prepare_default_in(&self, availability: Availability) -> Prepared {
        self.prepare_with(workspace_write(), availability)
    }

    /// The default `workspace-write` sandbox on this kernel, prepared for
    /// `context` (another temp dir, a language server's root): a second
    /// sandbox beside the fixture's.
    pub fn prepare_default_for(&self, context: &SpawnContext) -> Prepared {
        Sandbox::new(workspace_write(), Availability::probe_kernel())
            .unwrap()
            .prepare(context)
            .unwrap()
    }

    /// [`Fixture::prepare_default_in`] on this kernel.
    pub fn prepare_default(&self) -> Prepared {
        self.prepare_default_in(Availability::probe_kernel())
    }

    /// Runs `program args…` confined by `prepared`, in the workspace.
    pub fn run(&self, prepared: &Prepared, program: &str, args: &[&str]) -> Output {
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.ws)
            .env("HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .stdin(Stdio::null());
        let step = prepared.pre_exec_step();
        // SAFETY: setsid and the sandbox step are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
            command.pre_exec(step);
        }
        command.output().expect("spawn")
    }
}

/// The default policy in `workspace-write` mode.
fn workspace_write() -> SandboxPolicy {
    SandboxPolicy {
        mode: sandbox::Mode::WorkspaceWrite,
        ..SandboxPolicy::default()
    }
}

/// Whether this kernel runs the guard (seccomp's listener and Landlock);
/// says what is skipped when not.
pub fn guarded(what: &str) -> bool {
    let a = Availability::probe_kernel();
    if !a.connect_guard || a.landlock_abi == 0 {
        eprintln!("skipped: this kernel cannot guard {what} ({a})");
        return false;
    }
    true
}

/// What a run printed on stdout, trimmed; fails naming its exit and both
/// outputs when it did not succeed.
pub fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
