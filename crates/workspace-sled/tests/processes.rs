//! Real processes on one real store: SIGKILLed writers (crash safety) and
//! writers running at the same time (many processes, one store).
//!
//! The test binary re-executes itself as the child (`child_process_entry`,
//! selected by an environment variable). `DSH_CRASH_RUNS` sets the number of
//! crash runs (default 50).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use pretty_assertions::assert_eq;
use uuid::Uuid;
use workspace::{SessionHeader, SessionId, WorkspaceError};
use workspace_sled::Store;

const CHILD_ENV: &str = "DSH_WS_TEST_CHILD";
const DIRS: usize = 4;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

fn spawn_child(spec: &str) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "child_process_entry",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, spec)
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe { command.pre_exec(process_tree::setsid_in_child) };
    command.spawn().unwrap()
}

fn kill_and_reap(mut child: Child) {
    let pid = i32::try_from(child.id()).unwrap();
    // `signal_session`, not `end_session`: the latter also reaps every
    // unheld zombie child of this process, the other tests' children
    // included (their own waits would then fail with ECHILD). The child is
    // unreaped until `wait` below, so its session id is still its own.
    process_tree::signal_session(pid, Signal::SIGKILL);
    child.wait().unwrap();
}

/// Waits for `child` to exit (a hang fails the test); returns whether it
/// succeeded and its stderr.
fn wait_for_exit(mut child: Child) -> (bool, String) {
    let mut status = None;
    // Writers share the store one operation at a time: give them longer.
    test_support::wait_until_within(Duration::from_secs(120), "a child exits", || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    let status = status.unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.success(), err)
}

/// Lines in a child's journal so far.
fn journal_lines(journal: &Path) -> usize {
    std::fs::read_to_string(journal)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

// ---- the operations and their model -------------------------------------------

#[derive(Debug, Clone, PartialEq, Eq)]
enum Op {
    Create(usize, String),
    Delete(usize),
    Rename(usize, String),
    Move(usize, Option<usize>),
    Begin(SessionId, usize),
    Detach(usize, SessionId),
    Archive(SessionId),
}

impl Op {
    fn encode(&self) -> String {
        match self {
            Op::Create(i, t) => format!("create {i} {t}"),
            Op::Delete(i) => format!("delete {i}"),
            Op::Rename(i, t) => format!("rename {i} {t}"),
            Op::Move(i, j) => format!("move {i} {}", j.map_or("-".to_owned(), |j| j.to_string())),
            Op::Begin(s, i) => format!("begin {s} {i}"),
            Op::Detach(i, s) => format!("detach {i} {s}"),
            Op::Archive(s) => format!("archive {s}"),
        }
    }
    fn decode(line: &str) -> Op {
        let parts: Vec<&str> = line.split(' ').collect();
        let n = |k: usize| parts[k].parse::<usize>().unwrap();
        let s = |k: usize| parts[k].parse::<SessionId>().unwrap();
        match parts[0] {
            "create" => Op::Create(n(1), parts[2].to_owned()),
            "delete" => Op::Delete(n(1)),
            "rename" => Op::Rename(n(1), parts[2].to_owned()),
            "move" => Op::Move(n(1), parts[2].parse().ok()),
            "begin" => Op::Begin(s(1), n(2)),
            "detach" => Op::Detach(n(1), s(2)),
            "archive" => Op::Archive(s(1)),
            other => panic!("unknown op {other}"),
        }
    }
}

/// Workspaces in order as (dir index, title, sessions), and archived sessions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    workspaces: Vec<(usize, String, Vec<SessionId>)>,
    archived: BTreeSet<SessionId>,
}

impl Model {
    fn pos(&self, i: usize) -> Option<usize> {
        self.workspaces.iter().position(|w| w.0 == i)
    }
    /// Every state `op` may leave behind if interrupted, ending with the complete one.
    fn outcomes(&self, op: &Op) -> Vec<Model> {
        let mut m = self.clone();
        let mut partial = Vec::new();
        match op {
            Op::Create(i, t) => {
                if m.pos(*i).is_none() {
                    m.workspaces.insert(0, (*i, t.clone(), vec![]));
                }
            }
            Op::Delete(i) => m.workspaces.retain(|w| w.0 != *i),
            Op::Rename(i, t) => {
                if let Some(p) = m.pos(*i) {
                    m.workspaces[p].1 = t.clone();
                }
            }
            Op::Move(i, j) => {
                if *j != Some(*i)
                    && let Some(p) = m.pos(*i)
                {
                    let w = m.workspaces.remove(p);
                    let at = j.and_then(|j| m.pos(j)).unwrap_or(m.workspaces.len());
                    m.workspaces.insert(at, w);
                }
            }
            Op::Begin(s, i) => {
                if m.pos(*i).is_none() {
                    m.workspaces.insert(0, (*i, format!("d{i}"), vec![]));
                    partial.push(m.clone());
                }
                let p = m.pos(*i).unwrap();
                m.workspaces[p].2.insert(0, *s);
            }
            Op::Detach(i, s) => {
                if let Some(p) = m.pos(*i) {
                    m.workspaces[p].2.retain(|x| x != s);
                }
            }
            Op::Archive(s) => {
                m.archived.insert(*s);
            }
        }
        partial.push(m);
        partial
    }
}

fn observe(store: &Store, dirs: &[PathBuf]) -> Model {
    store
        .with_registry(|r| {
            let workspaces = r
                .list()
                .into_iter()
                .map(|w| {
                    (
                        dirs.iter().position(|d| *d == w.path).unwrap(),
                        w.title,
                        w.session_ids,
                    )
                })
                .collect();
            let archived = r
                .sessions(None)?
                .into_iter()
                .filter(|s| s.archived)
                .map(|s| s.id)
                .collect();
            Ok(Model {
                workspaces,
                archived,
            })
        })
        .unwrap()
}

fn apply(store: &Store, dirs: &[PathBuf], op: &Op) -> Result<(), WorkspaceError> {
    store.with_registry(|r| {
        let id_of = |r: &workspace::Registry<_, _>, i: usize| {
            r.resolve_by_path(&dirs[i]).map(|w| w.map(|w| w.id))
        };
        match op {
            Op::Create(i, t) => r.create(&dirs[*i], Some(t)).map(drop),
            Op::Delete(i) => {
                let id = id_of(r, *i)?.unwrap();
                r.delete(id).map(drop)
            }
            Op::Rename(i, t) => {
                let id = id_of(r, *i)?.unwrap();
                r.set_title(id, t).map(drop)
            }
            Op::Move(i, j) => {
                let id = id_of(r, *i)?.unwrap();
                let before = match j {
                    Some(j) => id_of(r, *j)?,
                    None => None,
                };
                r.insert_before(id, before).map(drop)
            }
            Op::Begin(s, i) => {
                let header = SessionHeader {
                    id: *s,
                    cwd: Some(dirs[*i].clone()),
                    created_at: chrono::Utc::now(),
                    client: None,
                };
                r.begin_session(&header).map(drop)
            }
            Op::Detach(i, s) => {
                let id = id_of(r, *i)?.unwrap();
                r.detach_session(id, *s).map(drop)
            }
            Op::Archive(s) => r.archive_session(*s),
        }
    })
}

fn pick(rng: &mut Rng, m: &Model, n: u64) -> Op {
    let i = rng.below(DIRS);
    let exists = m.pos(i).is_some();
    let sessions: Vec<SessionId> = m
        .workspaces
        .iter()
        .flat_map(|w| w.2.iter().copied())
        .collect();
    match rng.below(8) {
        0 | 1 => Op::Create(i, format!("t{n}")),
        2 if exists => Op::Delete(i),
        3 if exists => Op::Rename(i, format!("r{n}")),
        4 if exists => {
            let j = rng.below(DIRS + 1);
            Op::Move(i, (j < DIRS && m.pos(j).is_some()).then_some(j))
        }
        5 if exists && !m.workspaces[m.pos(i).unwrap()].2.is_empty() => {
            let list = &m.workspaces[m.pos(i).unwrap()].2;
            Op::Detach(i, list[rng.below(list.len())])
        }
        6 if !sessions.is_empty() => Op::Archive(sessions[rng.below(sessions.len())]),
        _ => Op::Begin(SessionId(Uuid::from_u64_pair(rng.next(), rng.next())), i),
    }
}

fn test_dirs(base: &Path) -> Vec<PathBuf> {
    (0..DIRS).map(|i| base.join(format!("d{i}"))).collect()
}

fn run_child(spec: &str) {
    let parts: Vec<&str> = spec.split('\n').collect();
    let store = Store::new(parts[1]);
    let dirs = test_dirs(Path::new(parts[2]));
    match parts[0] {
        "crash" => {
            let mut journal = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(parts[3])
                .unwrap();
            // Mixed, so that no child replays a stretch of the parent's sequence.
            let mut rng = Rng(parts[4]
                .parse::<u64>()
                .unwrap()
                .wrapping_mul(0x2545_f491_4f6c_dd1d)
                | 1);
            for n in 0.. {
                let model = observe(&store, &dirs);
                let op = pick(&mut rng, &model, n);
                journal
                    .write_all(format!("I {n} {}\n", op.encode()).as_bytes())
                    .unwrap();
                match apply(&store, &dirs, &op) {
                    Ok(()) => journal.write_all(format!("A {n}\n").as_bytes()).unwrap(),
                    Err(e) => journal
                        .write_all(format!("E {n} {} {e}\n", e.code()).as_bytes())
                        .unwrap(),
                }
            }
        }
        "concurrent" => {
            let k: u128 = parts[3].parse().unwrap();
            let count: u128 = parts[4].parse().unwrap();
            for n in 0..count {
                let s = SessionId(Uuid::from_u128(k * 1000 + n));
                let header = SessionHeader {
                    id: s,
                    cwd: Some(dirs[0].clone()),
                    created_at: chrono::Utc::now(),
                    client: None,
                };
                store.begin_session(&header).unwrap();
                let w = store.list_workspaces().unwrap()[0].id;
                store
                    .rename_workspace(w, &format!("writer {k} step {n}"))
                    .unwrap();
                store
                    .append_log(
                        s,
                        &workspace::LogEntry::new(chrono::Utc::now(), "bash", "", "OK", 1),
                    )
                    .unwrap();
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

#[test]
#[ignore = "the child process of the tests below; run only by them"]
fn child_process_entry() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        run_child(&spec);
    }
}

#[test]
fn sigkilled_writers_lose_nothing_acknowledged_and_invent_nothing() {
    let runs: usize = std::env::var("DSH_CRASH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let dirs = test_dirs(&base);
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    let store_dir = base.join("store");
    let store = Store::new(&store_dir);
    let mut model = Model::default();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut total_acked, mut interrupted) = (0, 0);
    for run in 0..runs {
        let journal = base.join(format!("journal-{run}"));
        let spec = format!(
            "crash\n{}\n{}\n{}\n{}",
            store_dir.display(),
            base.display(),
            journal.display(),
            rng.next()
        );
        let mut child = spawn_child(&spec);
        // Kill after a random number of journal lines: each operation
        // writes `I` before it starts and `A` once acknowledged, so an odd
        // count lands the kill inside an operation, an even one between
        // two. Waiting for lines, not for time, makes every run reach its
        // operations however slowly the child starts.
        let lines = 1 + rng.below(12);
        test_support::wait_until(
            &format!("run {run}: the child journals {lines} lines"),
            || {
                if let Some(status) = child.try_wait().unwrap() {
                    let mut err = String::new();
                    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err)
                        .unwrap();
                    panic!("run {run}: the child exited by itself: {status}\n{err}");
                }
                journal_lines(&journal) >= lines
            },
        );
        kill_and_reap(child);
        let text = std::fs::read_to_string(&journal).unwrap_or_default();
        let mut in_flight: Option<Op> = None;
        for line in text.lines() {
            let (kind, rest) = line.split_at(1);
            let rest = rest.trim_start();
            match kind {
                "I" => in_flight = Some(Op::decode(rest.split_once(' ').unwrap().1)),
                "A" => {
                    let op = in_flight.take().unwrap();
                    model = model.outcomes(&op).pop().unwrap();
                    total_acked += 1;
                }
                _ => panic!("run {run}: the child reported an error: {line}"),
            }
        }
        let observed = observe(&store, &dirs);
        match in_flight {
            None => assert_eq!(observed, model, "run {run}: acknowledged state differs"),
            Some(op) => {
                interrupted += 1;
                let mut allowed = vec![model.clone()];
                allowed.extend(model.outcomes(&op));
                assert!(
                    allowed.contains(&observed),
                    "run {run}: after {op:?} was interrupted, {observed:?} is none of {allowed:?}"
                );
                model = observed;
            }
        }
    }
    eprintln!(
        "{runs} SIGKILLed runs, {total_acked} acknowledged mutations, {interrupted} interrupted mid-operation"
    );
    assert!(
        total_acked > runs,
        "the children barely ran: {total_acked} acknowledged mutations"
    );
}

#[test]
fn two_processes_and_a_reader_share_one_store() {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let dirs = test_dirs(&base);
    std::fs::create_dir(&dirs[0]).unwrap();
    let store_dir = base.join("store");
    let count = 15u128;
    let children: Vec<Child> = (1..=2u128)
        .map(|k| {
            spawn_child(&format!(
                "concurrent\n{}\n{}\n{k}\n{count}",
                store_dir.display(),
                base.display()
            ))
        })
        .collect();
    // A person's CLI reads while both write.
    let store = Store::new(&store_dir);
    for _ in 0..10 {
        store.list_workspaces().unwrap();
        store.list_sessions(None).unwrap();
    }
    for child in children {
        let (ok, stderr) = wait_for_exit(child);
        assert!(ok, "a writer failed: {stderr}");
    }
    let listed = store.list_workspaces().unwrap();
    assert_eq!(listed.len(), 1);
    let got: BTreeSet<SessionId> = listed[0].session_ids.iter().copied().collect();
    let want: BTreeSet<SessionId> = (1..=2u128)
        .flat_map(|k| (0..count).map(move |n| SessionId(Uuid::from_u128(k * 1000 + n))))
        .collect();
    assert_eq!(got, want, "an attach was lost between processes");
    assert_eq!(
        store
            .show_session(SessionId(Uuid::from_u128(1000)))
            .unwrap()
            .log
            .len(),
        1
    );
}
