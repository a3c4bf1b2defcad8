//! The cost of confinement per spawn: `true` and `bash -c true` started
//! unconfined and in each kind of sandbox, interleaved in one run, a
//! program that creates and writes files (each such `open` goes through
//! the guard of repositories) and one that connects (through the guard of
//! connect), plus the cost of preparing a sandbox (first time, and a
//! cache hit).
//!
//! `cargo run --release -p bench --bin bench_sandbox [-- --quick]`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandbox::{Availability, Prepared, Sandbox, SandboxPolicy, SpawnContext};

struct Variant {
    name: &'static str,
    prepared: Option<Prepared>,
    samples: Vec<Duration>,
}

fn spawn(argv: &[&str], cwd: &Path, prepared: Option<&Prepared>) -> Duration {
    let mut command = Command::new(argv[0]);
    command
        .args(&argv[1..])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // SAFETY: setsid is async-signal-safe; so is the sandbox step.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
        if let Some(p) = prepared {
            command.pre_exec(p.pre_exec_step());
        }
    }
    let start = Instant::now();
    let status = command.status().expect("spawn");
    let elapsed = start.elapsed();
    assert!(status.success());
    elapsed
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

// Long on purpose: a benchmark's main runs its measurements in order and
// prints each table as it goes.
fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let rounds = if quick { 60 } else { 400 };
    let home = std::env::var_os("HOME").map_or_else(|| "/".into(), std::path::PathBuf::from);
    let plain_ws = tempfile::tempdir().unwrap();
    let git_ws = tempfile::tempdir().unwrap();
    assert!(
        Command::new("git")
            .args(["init", "-q"])
            .arg(git_ws.path())
            .status()
            .unwrap()
            .success()
    );
    let availability = Availability::probe_kernel();
    println!("kernel: {availability}");

    let default = Sandbox::new(SandboxPolicy::default(), availability.clone()).unwrap();
    let offline_policy = SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    };
    let offline = Sandbox::new(offline_policy.clone(), availability.clone()).unwrap();
    let offline_seccomp = Sandbox::new(
        offline_policy,
        availability.clone().pretend("no-userns").unwrap(),
    )
    .unwrap();
    let unguarded = Sandbox::new(
        SandboxPolicy::default(),
        availability.pretend("no-connect-guard").unwrap(),
    )
    .unwrap();
    let plain_ctx = SpawnContext::command(plain_ws.path(), &home);
    let git_ctx = SpawnContext::command(git_ws.path(), &home);

    // Preparation: a fresh Sandbox each time for the first preparation.
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for _ in 0..(rounds / 4).max(10) {
        let s = Sandbox::new(SandboxPolicy::default(), Availability::probe_kernel()).unwrap();
        let t = Instant::now();
        s.prepare(&git_ctx).unwrap();
        cold.push(t.elapsed());
        let t = Instant::now();
        s.prepare(&git_ctx).unwrap();
        warm.push(t.elapsed());
    }

    let mut variants = vec![
        Variant {
            name: "off",
            prepared: None,
            samples: Vec::new(),
        },
        Variant {
            name: "workspace-write, no connect guard",
            prepared: Some(unguarded.prepare(&plain_ctx).unwrap()),
            samples: Vec::new(),
        },
        Variant {
            name: "workspace-write (Landlock)",
            prepared: Some(default.prepare(&plain_ctx).unwrap()),
            samples: Vec::new(),
        },
        Variant {
            name: "+ read-only .git (namespaces)",
            prepared: Some(default.prepare(&git_ctx).unwrap()),
            samples: Vec::new(),
        },
        Variant {
            name: "+ network off (namespace)",
            prepared: Some(offline.prepare(&git_ctx).unwrap()),
            samples: Vec::new(),
        },
        Variant {
            name: "network off (seccomp, no userns)",
            prepared: Some(offline_seccomp.prepare(&plain_ctx).unwrap()),
            samples: Vec::new(),
        },
    ];
    for v in &variants[1..] {
        let p = v.prepared.as_ref().unwrap();
        assert!(p.status().enforced, "{}: {}", v.name, p.status());
    }
    // A loopback listener for the connect-heavy program: each `connect` of
    // a confined process goes through the guard's supervisor.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || for _ in listener.incoming() {});
    // (With the network off each connect is refused, by the guard or by
    // the namespace's empty loopback.)
    let connects = "import socket, sys\n\
                    for _ in range(200):\n\
                    \x20   s = socket.socket()\n\
                    \x20   s.connect_ex(('127.0.0.1', int(sys.argv[1])))\n\
                    \x20   s.close()\n";
    // Creating and writing files: in `workspace-write` each `open` with
    // `O_CREAT` or for writing goes through the guard of repositories,
    // which makes it for the process (not in the variant without a guard).
    let files = "import os\n\
                 for i in range(1000):\n\
                 \x20   name = 'bench-%d' % (i % 20)\n\
                 \x20   os.close(os.open(name, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644))\n\
                 \x20   os.close(os.open(name, os.O_WRONLY))\n";
    for (program, argv, rounds) in [
        ("true", &["true"][..], rounds),
        (
            "python3: 1000 creating + 1000 writing opens",
            &["python3", "-c", files][..],
            (rounds / 10).max(6),
        ),
        ("bash -c true", &["bash", "-c", "true"][..], rounds),
        (
            "python3: 200 TCP connects",
            &["python3", "-c", connects, port.as_str()][..],
            (rounds / 10).max(6),
        ),
    ] {
        for v in &mut variants {
            v.samples.clear();
        }
        // Warm up, then interleave the variants round by round.
        for v in &variants {
            spawn(argv, git_ws.path(), v.prepared.as_ref());
        }
        for _ in 0..rounds {
            for v in &mut variants {
                let d = spawn(argv, git_ws.path(), v.prepared.as_ref());
                v.samples.push(d);
            }
        }
        println!("\nspawn `{program}` and wait, {rounds} rounds interleaved (ms)");
        println!(
            "{:<32} {:>8} {:>8} {:>8} {:>7}",
            "sandbox", "median", "p90", "p99", "ratio"
        );
        let mut base = None;
        for v in &mut variants {
            v.samples.sort();
            let median = percentile(&v.samples, 0.5);
            let base = *base.get_or_insert(median);
            println!(
                "{:<32} {:>8} {:>8} {:>8} {:>6.2}x",
                v.name,
                ms(median),
                ms(percentile(&v.samples, 0.9)),
                ms(percentile(&v.samples, 0.99)),
                median.as_secs_f64() / base.as_secs_f64()
            );
        }
    }
    cold.sort();
    warm.sort();
    println!("\nprepare a context (ms)");
    println!("{:<32} {:>8} {:>8} {:>8}", "", "median", "p90", "p99");
    for (name, s) in [
        ("first (lists dirs, namespaces)", &cold),
        ("cached (checks stamps)", &warm),
    ] {
        println!(
            "{:<32} {:>8} {:>8} {:>8}",
            name,
            ms(percentile(s, 0.5)),
            ms(percentile(s, 0.9)),
            ms(percentile(s, 0.99))
        );
    }
}
