//! Latency of the sled-backed workspace registry, side by side with raw sled
//! on the same disk. Run with `cargo xtask bench workspace [--quick]` or
//! `cargo run --release -p bench --bin bench_workspace -- [--quick] [DIR]`
//! (DIR: where to put the stores; default: the system temp dir; `--quick`:
//! a tenth of the operations, a smoke run whose figures are not to be
//! quoted).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use workspace::{LogEntry, SessionHeader, SessionId, SessionPersistence};
use workspace_sled::{OpenStore, Store};

struct Stats {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Stats {
    fn median(&self) -> Duration {
        self.pct(50)
    }
    fn pct(&self, p: usize) -> Duration {
        let mut s = self.samples.clone();
        s.sort();
        s[((s.len() - 1) * p) / 100]
    }
}

fn time<T>(f: impl FnOnce() -> T) -> (Duration, T) {
    let t = Instant::now();
    let v = f();
    (t.elapsed(), v)
}

fn fresh(base: &Path, name: &str) -> PathBuf {
    let p = base.join(name);
    let _ = std::fs::remove_dir_all(&p);
    std::fs::create_dir_all(&p).unwrap();
    p
}

fn dirs(base: &Path, n: usize) -> Vec<PathBuf> {
    let root = fresh(base, "dirs");
    (0..n)
        .map(|i| {
            let p = root.join(format!("d{i}"));
            std::fs::create_dir(&p).unwrap();
            std::fs::canonicalize(p).unwrap()
        })
        .collect()
}

fn header(n: u128, cwd: &Path, secs: i64) -> SessionHeader {
    SessionHeader {
        id: SessionId(uuid::Uuid::from_u128(n)),
        cwd: Some(cwd.to_owned()),
        created_at: chrono::DateTime::from_timestamp(1_700_000_000 + secs, 0).unwrap(),
        client: None,
    }
}

// Long on purpose: a benchmark's main runs its measurements in order and
// prints each table as it goes.
fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    // Operations per row: the full run, or a tenth of it.
    let scale = |full: usize| if quick { (full / 10).max(3) } else { full };
    let base = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let base = base.join(format!("dsh-workspace-bench-{}", std::process::id()));
    let n = scale(300);
    let headers_n = scale(10_000) as u128;
    let dir_n = scale(100);
    let targets = dirs(&base, n);
    let wait = Duration::from_secs(10);
    let mut rows: Vec<Stats> = Vec::new();

    // Raw sled: one insert + flush.
    let raw_dir = fresh(&base, "raw");
    let db = sled::Config::new()
        .path(&raw_dir)
        .flush_every_ms(None)
        .open()
        .unwrap();
    let tree = db.open_tree("t").unwrap();
    let mut samples = Vec::new();
    for i in 0..n {
        let (d, _) = time(|| {
            tree.insert(format!("k{i}").as_bytes(), vec![0u8; 200])
                .unwrap();
            db.flush().unwrap();
        });
        samples.push(d);
    }
    drop((tree, db));
    rows.push(Stats {
        name: "raw sled insert+flush",
        samples,
    });

    // The registry held open (one process, one span).
    let store_dir = fresh(&base, "held");
    let open = OpenStore::open(&store_dir, wait).unwrap();
    let mut registry = open.registry().unwrap();
    let mut samples = Vec::new();
    let mut ids = Vec::new();
    for t in &targets {
        let (d, w) = time(|| registry.create(t, None).unwrap());
        ids.push(w.id);
        samples.push(d);
    }
    rows.push(Stats {
        name: "create (3 durable writes)",
        samples,
    });
    let mut samples = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        registry
            .record_session(&header(i as u128, t, i as i64))
            .unwrap();
        let (d, _) = time(|| {
            registry
                .attach_session(ids[i], SessionId(uuid::Uuid::from_u128(i as u128)))
                .unwrap()
        });
        samples.push(d);
    }
    rows.push(Stats {
        name: "attach_session (1 durable write)",
        samples,
    });
    let mut samples = Vec::new();
    for _ in 0..scale(2000) {
        let (d, v) = time(|| registry.list());
        assert_eq!(v.len(), n);
        samples.push(d);
    }
    rows.push(Stats {
        name: "list() of all workspaces (memory)",
        samples,
    });
    drop(registry);
    drop(open);

    // The multi-process design: every operation opens, locks, loads, acts, closes.
    let store = Store::new(fresh(&base, "shared"));
    store.list_workspaces().unwrap();
    let mut samples = Vec::new();
    for t in targets.iter().take(scale(100)) {
        let (d, _) = time(|| store.create_workspace(t, None).unwrap());
        samples.push(d);
    }
    rows.push(Stats {
        name: "Store::create_workspace (open+create+close)",
        samples,
    });
    let mut samples = Vec::new();
    for i in 0..scale(100) as u128 {
        let (d, _) = time(|| {
            store
                .begin_session(&header(10_000 + i, &targets[0], i as i64))
                .unwrap()
        });
        samples.push(d);
    }
    rows.push(Stats {
        name: "Store::begin_session (open+record+attach+close)",
        samples,
    });
    let entry = LogEntry::new(chrono::Utc::now(), "bash", "ls -la", "OK", 3);
    let mut samples = Vec::new();
    for _ in 0..scale(100) {
        let (d, _) = time(|| {
            store
                .append_log(SessionId(uuid::Uuid::from_u128(10_000)), &entry)
                .unwrap()
        });
        samples.push(d);
    }
    rows.push(Stats {
        name: "Store::append_log (open+append+close)",
        samples,
    });
    let mut samples = Vec::new();
    for _ in 0..scale(100) {
        let (d, _) = time(|| store.list_workspaces().unwrap());
        samples.push(d);
    }
    rows.push(Stats {
        name: "Store::list_workspaces (open+load+close)",
        samples,
    });
    let mut samples = Vec::new();
    for _ in 0..scale(100) {
        let (d, _) = time(|| drop(store.open().unwrap()));
        samples.push(d);
    }
    rows.push(Stats {
        name: "open+close alone (lock, sled open)",
        samples,
    });

    // Start-up with 10,000 session headers over 100 directories.
    let headers: Vec<SessionHeader> = (0..headers_n)
        .map(|i| header(i, &targets[(i % dir_n as u128) as usize], (i / 3) as i64))
        .collect();
    let mut boot = Vec::new();
    let mut reopen = Vec::new();
    for round in 0..if quick { 1 } else { 3 } {
        let dir = fresh(&base, &format!("boot{round}"));
        {
            let open = OpenStore::open(&dir, wait).unwrap();
            let mut s = open.sessions();
            for h in &headers {
                s.put_header(h).unwrap();
            }
        }
        let (d, r) = time(|| {
            let open = OpenStore::open(&dir, wait).unwrap();
            let r = open.registry().unwrap();
            r.list().len()
        });
        assert_eq!(r, dir_n);
        boot.push(d);
        for _ in 0..5 {
            let (d, r) = time(|| {
                let open = OpenStore::open(&dir, wait).unwrap();
                let r = open.registry().unwrap();
                r.list().iter().map(|w| w.session_ids.len()).sum::<usize>()
            });
            assert_eq!(r, headers_n as usize);
            reopen.push(d);
        }
    }
    rows.push(Stats {
        name: "start-up with the headers: bootstrap",
        samples: boot,
    });
    rows.push(Stats {
        name: "start-up with the headers: plain reopen",
        samples: reopen,
    });

    let raw = rows[0].median();
    println!(
        "{n} workspaces; {headers_n} session headers over {dir_n} directories for start-up{}\n",
        if quick {
            "; --quick: a smoke run, not figures to quote"
        } else {
            ""
        }
    );
    println!(
        "{:<52} {:>5} {:>12} {:>12} {:>10}",
        "operation", "n", "median", "p99", "vs raw"
    );
    for r in &rows {
        println!(
            "{:<52} {:>5} {:>12.3?} {:>12.3?} {:>9.1}x",
            r.name,
            r.samples.len(),
            r.median(),
            r.pct(99),
            r.median().as_secs_f64() / raw.as_secs_f64()
        );
    }
    let _ = std::fs::remove_dir_all(&base);
}
