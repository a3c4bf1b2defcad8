//! What secret redaction costs on a flood of ordinary output, next to the
//! raw floor of copying the same bytes.
//!
//! The flood is the false-positive corpus of the `redact` crate's tests
//! (built from the machine: `git log -p`, JavaScript, Debian's docs, base64
//! of binaries, JSON logs; its builder is included from
//! `crates/redact/tests/ordinary`), repeated to 100 MB and cut into 64 KiB
//! chunks, as a terminal's reader hands them on. Each series takes every
//! chunk in turn, the series taking turns in rounds:
//!
//! * the floor: copy the chunk into a fresh buffer;
//! * `StreamRedactor::push` with no known values, and with 20;
//! * `Redactor::redact_bytes` on each chunk alone (a tool result's path).
//!
//! It prints, per series, the median throughput over the rounds, the
//! per-chunk latency (median, p99, p99.9), the ratio to the floor, the
//! cost per MB above the floor, and what that cost makes of a terminal
//! flood running at `--flood` MB/s (default 100, the raw pty read's rate
//! in `docs/subsystems/terminal.md`) if redaction ran on the flood's own
//! thread: `1 / (1 + rate × cost)`.
//!
//! Run: `cargo xtask bench redact` (release build; `--quick` for a short
//! smoke run on the debug build), or
//! `cargo run --release -p bench --bin bench_redact [-- --quick] [-- --flood MB/s]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../../../redact/tests/ordinary/mod.rs"]
mod ordinary;

use std::time::{Duration, Instant};

use bench::terminal::Stats;
use redact::{KnownSecret, Redactor};

const CHUNK: usize = 64 * 1024;

fn flood(bytes: usize) -> Vec<u8> {
    let sources = ordinary::build();
    let mix: Vec<String> = sources
        .iter()
        .map(|s| format!("{} ({:.1} MB)", s.name, mb(s.text.len())))
        .collect();
    println!("the corpus, repeated: {}\n", mix.join(", "));
    let corpus: Vec<u8> = sources.into_iter().flat_map(|s| s.text).collect();
    assert!(
        !corpus.is_empty(),
        "no ordinary output found on this machine"
    );
    corpus.iter().copied().cycle().take(bytes).collect()
}

/// Runs a series over the flood: pushes each chunk's latency, adds the
/// bytes it put out, returns the whole run's time.
type Run = Box<dyn FnMut(&[u8], &mut Vec<Duration>, &mut u64) -> Duration>;

/// One series: a name and what it does to each chunk.
struct Series {
    label: &'static str,
    run: Run,
}

fn chunked(
    mut each: impl FnMut(&[u8]) -> usize,
) -> impl FnMut(&[u8], &mut Vec<Duration>, &mut u64) -> Duration {
    move |data, lat, out| {
        let start = Instant::now();
        for chunk in data.chunks(CHUNK) {
            let t = Instant::now();
            *out += each(chunk) as u64;
            lat.push(t.elapsed());
        }
        start.elapsed()
    }
}

fn known() -> Vec<KnownSecret> {
    (0..20)
        .map(|i| {
            KnownSecret::new(
                format!("env SECRET_{i}"),
                format!("Val-{i:02}-q8Zr3xLm0PwT{i}"),
            )
        })
        .collect()
}

fn series(redactor: &Redactor) -> Vec<Series> {
    let plain = redactor.clone();
    let with_known = redactor.with_known(known());
    let one_shot = redactor.clone();
    let mut stream = plain.stream();
    let mut stream_known = with_known.stream();
    vec![
        Series {
            label: "floor: copy each chunk",
            run: Box::new(chunked(|c| std::hint::black_box(c.to_vec()).len())),
        },
        Series {
            label: "StreamRedactor::push",
            run: Box::new(chunked(move |c| stream.push(c).text.len())),
        },
        Series {
            label: "StreamRedactor::push, 20 known values",
            run: Box::new(chunked(move |c| stream_known.push(c).text.len())),
        },
        Series {
            label: "Redactor::redact_bytes on each chunk",
            run: Box::new(chunked(move |c| one_shot.redact_bytes(c).bytes.len())),
        },
    ]
}

fn mb(bytes: usize) -> f64 {
    bytes as f64 / 1e6
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let flood_rate: f64 = args
        .iter()
        .position(|a| a == "--flood")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(100.0);
    let (bytes, rounds) = if quick {
        (8_000_000, 2)
    } else {
        (100_000_000, 5)
    };

    let started = Instant::now();
    let redactor = Redactor::builtin().unwrap();
    let compile = started.elapsed();
    let data = flood(bytes);

    let mut all = series(&redactor);
    let mut secs: Vec<Vec<f64>> = vec![Vec::new(); all.len()];
    let mut lat: Vec<Vec<Duration>> = vec![Vec::new(); all.len()];
    let mut out: Vec<u64> = vec![0; all.len()];
    for _ in 0..rounds {
        for (i, s) in all.iter_mut().enumerate() {
            let took = (s.run)(&data, &mut lat[i], &mut out[i]);
            secs[i].push(took.as_secs_f64());
        }
    }

    if quick {
        println!("--quick: a smoke run, not figures to quote\n");
    }
    println!(
        "`cargo run --release -p bench --bin bench_redact`: {:.0} MB of ordinary output in {} KiB chunks, {rounds} rounds; {} rules compiled in {:.0} ms\n",
        mb(bytes),
        CHUNK / 1024,
        redactor.rule_count(),
        compile.as_secs_f64() * 1e3
    );
    println!(
        "| series | MB/s (median) | chunk median | chunk p99 | chunk p99.9 | × floor | ms per MB over floor | a {flood_rate:.0} MB/s flood becomes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let floor = median(&mut secs[0].clone());
    for (i, s) in all.iter().enumerate() {
        let t = median(&mut secs[i]);
        let stats = Stats::of(&mut lat[i]).unwrap();
        let cost_ms_per_mb = (t - floor).max(0.0) * 1e3 / mb(bytes);
        let becomes = 1.0 / (1.0 + flood_rate * cost_ms_per_mb / 1e3);
        println!(
            "| {} | {:.0} | {:.1} µs | {:.1} µs | {:.1} µs | {:.2}× | {:.2} | {:.2}× |",
            s.label,
            mb(bytes) / t,
            stats.median.as_secs_f64() * 1e6,
            stats.p99.as_secs_f64() * 1e6,
            stats.p999.as_secs_f64() * 1e6,
            floor / t,
            cost_ms_per_mb,
            becomes,
        );
    }
    std::hint::black_box(out);
    tool_layer_flood(if quick { 10 } else { 100 }, rounds);
}

/// The flood where dsh redacts it: a `terminal_send` of `mb` MB of base64
/// through the tool layer (a real pty, the real `terminal_send` tool),
/// its reply as it is and its reply redacted as the host redacts every
/// result (`tools_catalog::redaction::redact_outcome`). The flood's bytes
/// go to the terminal's ring unredacted; what is redacted is the reply,
/// which the result limit bounds.
fn tool_layer_flood(mb_out: usize, rounds: usize) {
    use std::sync::Arc;
    use tools_catalog::{CallContext, Catalog, JobsConfig, Owner, Preset, Runtime, Settings};

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Arc::new(Runtime::new(
            JobsConfig::default(),
            Arc::new(terminal_pty::PtyTerminals::default()),
            lsp_seam::Router::new(),
        ));
        let catalog = Catalog::new(Preset::Full, &Settings::default());
        let cx = CallContext {
            owner: Owner::new("bench-redact-flood"),
            cwd: std::env::current_dir().unwrap(),
            runtime: runtime.clone(),
            env: None,
            progress: None,
            confinement: Arc::new(tools_catalog::Confinement::none()),
            ask: None,
            resume: None,
            secrets: None,
        };
        let call = |name: &str, args: serde_json::Value| {
            let tool = catalog.get(name).cloned().unwrap();
            let cx = &cx;
            async move { tool.call(cx, args).await }
        };
        let opened = call("terminal_open", serde_json::json!({})).await.unwrap();
        let id = opened.structured["id"].as_str().unwrap().to_owned();
        // Warm the rules, as the first call of a host does.
        let _ = runtime.redactor();
        let text = format!("head -c {} /dev/urandom | base64 -w 76", mb_out * 750_000);
        let args = serde_json::json!({ "id": id, "text": text, "timeout_ms": 600_000 });
        let (mut plain, mut redacted) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let started = Instant::now();
            let reply = call("terminal_send", args.clone()).await;
            plain.push(started.elapsed());
            assert!(reply.is_ok());
            let started = Instant::now();
            let mut reply = call("terminal_send", args.clone()).await;
            tools_catalog::redaction::redact_outcome(&cx, &args, &mut reply);
            redacted.push(started.elapsed());
            assert!(reply.is_ok());
        }
        let _ = call("terminal_close", serde_json::json!({ "id": id })).await;
        runtime.end_owner(&cx.owner).await;
        let p = Stats::of(&mut plain).unwrap();
        let r = Stats::of(&mut redacted).unwrap();
        println!(
            "\n`terminal_send` of {mb_out} MB of base64 through the tool layer, {rounds} rounds each, taking turns:\n"
        );
        println!("| series | median | p99 | × plain |");
        println!("|---|---:|---:|---:|");
        for (label, s) in [("reply as it is", &p), ("reply redacted (what the host sends)", &r)] {
            println!(
                "| {label} | {:.0} ms | {:.0} ms | {:.2}× |",
                s.median.as_secs_f64() * 1e3,
                s.p99.as_secs_f64() * 1e3,
                p.median.as_secs_f64() / s.median.as_secs_f64(),
            );
        }
    });
}
