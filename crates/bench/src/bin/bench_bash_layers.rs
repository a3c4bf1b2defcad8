//! Where the time of one `bash {command: "true"}` goes inside dsh, layer
//! by layer, in one process grown to the size of a running `dsh mcp`
//! (17 MB touched, 16 threads). Each series runs `bash -c true` to its
//! end; the series take turns in rounds:
//!
//! 1. `std::process::Command` (`posix_spawn`), output piped and read: the
//!    floor;
//! 2. `process_tree::SessionCommand`: the spawn path (spawner thread, a
//!    new session, the parent-death signal, the signal reset), the wait,
//!    the empty-session proof and the reap;
//! 3. `jobs::run_command`: the above plus the output pipe read through
//!    the runtime, the exit awaited on the pidfd, sanitizing and the
//!    result;
//! 4. the `bash` tool through the tool layer, in process, with no
//!    sandbox: the above plus arguments, the environment policy, the
//!    sandbox preparation's trip to the blocking pool, the foreground
//!    slot and the reply;
//! 5. `process_tree::SessionCommand` in a PID namespace of its own (as
//!    root: no sandbox needed to make one): series 2 plus the namespaces,
//!    the init, the waiter and the init's end;
//! 6. the `bash` tool with the default sandbox, where the kernel has one
//!    (its user, mount and network namespaces entered, Landlock and
//!    seccomp, and the PID namespace): what `dsh mcp` runs, less MCP.
//!
//! What MCP adds on top (protocol, the session log) and what the sandbox
//! costs are `cargo xtask bench mcp`'s rows. Each line below is a
//! difference of medians measured in this run.
//!
//! Run: `cargo xtask bench spawn` (release build; `--quick` for a short
//! smoke run on the debug build), or
//! `cargo run --release -p bench --bin bench_bash_layers [-- --quick]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use process_tree::{ChildIo, SessionCommand};
use serde_json::json;
use terminal_pty::PtyTerminals;
use terminal_seam::Owner;
use tools_catalog::{CallContext, Catalog, JobsConfig, Preset, Runtime, Settings, Tool};

/// How much memory a running `dsh mcp` has touched, and its threads.
const HOST_BYTES: usize = 17 << 20;
const HOST_THREADS: usize = 16;

const SERIES: [&str; 6] = [
    "std posix_spawn, output read: the floor",
    "process_tree::SessionCommand + wait + proof + reap",
    "jobs::run_command (bash -c true)",
    "the bash tool, in process, no sandbox",
    "series 2 in a PID namespace of its own",
    "the bash tool, in process, default sandbox",
];

/// The series each one builds on (its line says what it adds to it).
const BUILDS_ON: [Option<usize>; 6] = [None, Some(0), Some(1), Some(2), Some(1), Some(3)];

fn median(samples: &mut [f64]) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

async fn once(series: usize, tool: &Arc<dyn Tool>, cx: &CallContext, sandboxed: &CallContext) {
    match series {
        0 => {
            let out = Command::new("bash")
                .args(["-c", "true"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            assert!(out.status.success());
        }
        1 | 4 => {
            let command = SessionCommand::new("bash")
                .args(["-c", "true"])
                .stdin(ChildIo::Null)
                .stdout(ChildIo::Piped)
                .stderr(ChildIo::Null);
            let command = if series == 4 {
                // SAFETY: no entry step.
                unsafe { command.pid_namespace(None) }
            } else {
                command
            };
            let spawned = command.spawn().unwrap();
            let mut out = Vec::new();
            std::io::Read::read_to_end(&mut spawned.stdout.unwrap(), &mut out).unwrap();
            assert!(spawned.leader.wait_exit().unwrap().success());
            assert!(spawned.leader.session_is_over());
            assert!(spawned.leader.reap().is_some());
            if series == 4 {
                assert_ne!(spawned.program, spawned.leader.pid(), "no PID namespace");
            }
        }
        2 => {
            let run = jobs::run_command(&jobs::CommandSpec::shell("true"), None, 16 * 1024)
                .await
                .unwrap();
            assert_eq!(run.exit_code, Some(0));
        }
        3 => {
            let reply = tool.call(cx, json!({ "command": "true" })).await.unwrap();
            assert_eq!(reply.structured["exit_code"], json!(0), "{}", reply.text);
        }
        _ => {
            let reply = tool
                .call(sandboxed, json!({ "command": "true" }))
                .await
                .unwrap();
            assert_eq!(reply.structured["exit_code"], json!(0), "{}", reply.text);
        }
    }
}

#[tokio::main]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, rounds) = if quick { (30, 3) } else { (300, 3) };
    let mut ballast = vec![0u8; HOST_BYTES];
    for page in ballast.chunks_mut(4096) {
        page[0] = 1;
    }
    for _ in 1..HOST_THREADS {
        std::thread::spawn(|| {
            loop {
                std::thread::park();
            }
        });
    }
    let runtime = Arc::new(Runtime::new(
        JobsConfig::default(),
        Arc::new(PtyTerminals::default()),
        lsp_seam::Router::new(),
    ));
    let catalog = Catalog::new(Preset::Full, &Settings::default());
    let cx = CallContext {
        owner: Owner::new("bench-bash-layers"),
        cwd: std::env::current_dir().unwrap(),
        runtime: runtime.clone(),
        env: None,
        progress: None,
        confinement: Arc::new(tools_catalog::Confinement::none()),
        ask: None,
        resume: None,
        secrets: None,
    };
    let tool = catalog.get("bash").cloned().expect("the bash tool");
    process_tree::pidns::enable();
    let sandboxed = CallContext {
        confinement: Arc::new(tools_catalog::Confinement::new(
            tools_catalog::sandbox::SandboxPolicy::default(),
            tools_catalog::sandbox::EnvPolicy::default(),
            tools_catalog::sandbox::Availability::probe().map_err(|e| e.to_string()),
            Vec::new(),
        )),
        ..cx.clone()
    };
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); SERIES.len()];
    for series in 0..SERIES.len() {
        for _ in 0..n / 10 {
            once(series, &tool, &cx, &sandboxed).await;
        }
    }
    for _ in 0..rounds {
        for (series, out) in samples.iter_mut().enumerate() {
            for _ in 0..n / rounds {
                let start = Instant::now();
                once(series, &tool, &cx, &sandboxed).await;
                out.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    std::hint::black_box(&ballast);
    if quick {
        println!("--quick: a smoke run, not figures to quote\n");
    }
    println!(
        "`cargo xtask bench spawn` (crates/bench/src/bin/bench_bash_layers.rs): `bash -c true` \
         through each layer of dsh, {n} each in {rounds} rounds, in a process of {} KiB resident \
         and {HOST_THREADS} threads\n",
        process_tree::resident_kib()
    );
    let medians: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
    println!("| layer | median ms | ratio to the floor | beyond the series it builds on |");
    println!("|---|---|---|---|");
    for (i, name) in SERIES.iter().enumerate() {
        let beyond = BUILDS_ON[i].map_or_else(String::new, |base| {
            format!(
                "{:+.3} ms (beyond {})",
                medians[i] - medians[base],
                base + 1
            )
        });
        println!(
            "| {}. {name} | {:.3} | {:.2}x | {beyond} |",
            i + 1,
            medians[i],
            medians[i] / medians[0]
        );
    }
    runtime.end_owner(&cx.owner).await;
}
