//! In-memory providers, fault-injecting wrappers and the conformance suite
//! that every provider of the two seams runs (feature `testing`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::type_complexity,
    missing_docs
)]

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, TimeZone, Utc};
use pretty_assertions::assert_eq;
use uuid::Uuid;

use crate::registry::{ARCHIVED, Global, Pending, Row, WORKSPACES};
use crate::{
    DomainImage, DomainWrite, LOG_CAPACITY, LogEntry, Registry, SessionHeader, SessionId,
    SessionPersistence, Startup, StorageDomain, StorageError, WorkspaceError, WorkspaceId,
};

// ---- in-memory providers ----------------------------------------------------

#[derive(Default, Debug, Clone)]
struct MemoryState {
    domain: DomainImage,
    headers: HashMap<SessionId, SessionHeader>,
    logs: HashMap<SessionId, VecDeque<LogEntry>>,
}

/// One in-memory store; [`domain`](Self::domain) and [`sessions`](Self::sessions) are handles on it.
#[derive(Default, Clone)]
pub struct MemoryStore {
    state: Arc<Mutex<MemoryState>>,
}

impl MemoryStore {
    pub fn new() -> Self {
        Self::default()
    }
    fn lock(&self) -> MutexGuard<'_, MemoryState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub fn domain(&self) -> MemoryDomain {
        MemoryDomain {
            store: self.clone(),
        }
    }
    pub fn sessions(&self) -> MemorySessions {
        MemorySessions {
            store: self.clone(),
        }
    }
    /// A copy of the domain image.
    pub fn image(&self) -> DomainImage {
        self.lock().domain.clone()
    }
}

/// The in-memory storage domain.
pub struct MemoryDomain {
    store: MemoryStore,
}

pub(crate) fn apply(image: &mut DomainImage, write: DomainWrite) {
    match write {
        DomainWrite::PutGlobal(v) => image.global = Some(v),
        DomainWrite::PutRow { table, key, value } => {
            image.tables.entry(table).or_default().insert(key, value);
        }
        DomainWrite::DeleteRow { table, key } => {
            if let Some(t) = image.tables.get_mut(&table) {
                t.remove(&key);
            }
        }
    }
}

impl StorageDomain for MemoryDomain {
    fn load(&mut self) -> Result<DomainImage, StorageError> {
        Ok(self.store.image())
    }
    fn write(&mut self, write: DomainWrite) -> Result<(), StorageError> {
        apply(&mut self.store.lock().domain, write);
        Ok(())
    }
}

/// The in-memory session store.
pub struct MemorySessions {
    store: MemoryStore,
}

impl SessionPersistence for MemorySessions {
    fn list_headers(&mut self) -> Result<Vec<SessionHeader>, StorageError> {
        Ok(self.store.lock().headers.values().cloned().collect())
    }
    fn header(&mut self, id: SessionId) -> Result<Option<SessionHeader>, StorageError> {
        Ok(self.store.lock().headers.get(&id).cloned())
    }
    fn put_header(&mut self, header: &SessionHeader) -> Result<(), StorageError> {
        self.store.lock().headers.insert(header.id, header.clone());
        Ok(())
    }
    fn append_log(&mut self, id: SessionId, entry: &LogEntry) -> Result<(), StorageError> {
        let mut state = self.store.lock();
        let log = state.logs.entry(id).or_default();
        log.push_back(entry.clone());
        while log.len() > LOG_CAPACITY {
            log.pop_front();
        }
        Ok(())
    }
    fn read_log(&mut self, id: SessionId) -> Result<Vec<LogEntry>, StorageError> {
        Ok(self
            .store
            .lock()
            .logs
            .get(&id)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default())
    }
}

// ---- fault injection ----------------------------------------------------------

/// Which writes (1-based, counted from the wrapper's creation) fail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FaultPlan {
    /// Only the Nth write fails (a transient failure).
    Nth(usize),
    /// The Nth write and every later one fail (a persistent failure).
    FromNth(usize),
    /// Exactly these writes fail.
    Writes(BTreeSet<usize>),
}

/// A storage domain that fails planned writes.
pub struct FaultyDomain<D> {
    inner: D,
    plan: FaultPlan,
    /// When set, a failing write still reaches the medium (the acknowledgement is what is lost).
    pub applied: bool,
    writes: usize,
}

impl<D> FaultyDomain<D> {
    pub fn new(inner: D, plan: FaultPlan) -> Self {
        Self {
            inner,
            plan,
            applied: false,
            writes: 0,
        }
    }
    /// How many writes were attempted.
    pub fn writes(&self) -> usize {
        self.writes
    }
}

impl<D: StorageDomain> StorageDomain for FaultyDomain<D> {
    fn load(&mut self) -> Result<DomainImage, StorageError> {
        self.inner.load()
    }
    fn write(&mut self, write: DomainWrite) -> Result<(), StorageError> {
        self.writes += 1;
        let n = self.writes;
        let fails = match &self.plan {
            FaultPlan::Nth(k) => n == *k,
            FaultPlan::FromNth(k) => n >= *k,
            FaultPlan::Writes(set) => set.contains(&n),
        };
        if fails {
            if self.applied {
                let _ = self.inner.write(write);
            }
            return Err(StorageError::Io {
                message: format!("injected failure of write {n}"),
            });
        }
        self.inner.write(write)
    }
}

/// A store with a live and a durable image that loses power at one flush boundary.
///
/// Every write lands in the live image and is then flushed (copied to the
/// durable image). At flush number `cut_at` the power goes: that flush never
/// happens, the write fails, and so does everything after it.
pub struct PowerLossDomain {
    live: DomainImage,
    durable: Arc<Mutex<DomainImage>>,
    flushes: usize,
    cut_at: usize,
    dead: bool,
}

impl PowerLossDomain {
    /// Starts from `durable`, losing power at flush `cut_at` (1-based).
    pub fn new(durable: Arc<Mutex<DomainImage>>, cut_at: usize) -> Self {
        let live = durable.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Self {
            live,
            durable,
            flushes: 0,
            cut_at,
            dead: false,
        }
    }
    /// Whether the power went.
    pub fn lost_power(&self) -> bool {
        self.dead
    }
}

impl StorageDomain for PowerLossDomain {
    fn load(&mut self) -> Result<DomainImage, StorageError> {
        Ok(self
            .durable
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone())
    }
    fn write(&mut self, write: DomainWrite) -> Result<(), StorageError> {
        if self.dead {
            return Err(StorageError::Io {
                message: "no power".into(),
            });
        }
        apply(&mut self.live, write);
        self.flushes += 1;
        if self.flushes == self.cut_at {
            self.dead = true;
            return Err(StorageError::Io {
                message: format!("power lost at flush {}", self.flushes),
            });
        }
        *self.durable.lock().unwrap_or_else(|e| e.into_inner()) = self.live.clone();
        Ok(())
    }
}

// ---- helpers for suites -----------------------------------------------------------

/// A provider under test: every `open` returns handles on the same durable store.
pub trait Harness {
    type Domain: StorageDomain;
    type Sessions: SessionPersistence;
    /// Opens (or reopens) the store.
    fn open(&mut self) -> (Self::Domain, Self::Sessions);
}

impl Harness for MemoryStore {
    type Domain = MemoryDomain;
    type Sessions = MemorySessions;
    fn open(&mut self) -> (MemoryDomain, MemorySessions) {
        (self.domain(), self.sessions())
    }
}

/// A deterministic session id.
pub fn sid(n: u128) -> SessionId {
    SessionId(Uuid::from_u128(n))
}

/// A deterministic instant, `secs` after an epoch.
pub fn at(secs: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + secs, 0).single().unwrap()
}

/// A header with the given cwd.
pub fn header(n: u128, cwd: Option<&Path>, secs: i64) -> SessionHeader {
    SessionHeader {
        id: sid(n),
        cwd: cwd.map(Path::to_path_buf),
        created_at: at(secs),
        client: None,
    }
}

fn open_registry<H: Harness>(h: &mut H) -> Registry<H::Domain, H::Sessions> {
    let (d, s) = h.open();
    Registry::open(d, s).unwrap()
}

/// What a store holds, independent of generated ids and clocks: workspaces in
/// order as (path, title, member sessions), and the archived sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    pub workspaces: Vec<(PathBuf, String, Vec<SessionId>)>,
    pub archived: Vec<SessionId>,
}

/// The projection of a registry.
pub fn project<D: StorageDomain, S: SessionPersistence>(
    r: &Registry<D, S>,
    known: &[SessionId],
) -> Projection {
    Projection {
        workspaces: r
            .list()
            .into_iter()
            .map(|w| (w.path, w.title, w.session_ids))
            .collect(),
        archived: known
            .iter()
            .copied()
            .filter(|s| r.is_archived(*s))
            .collect(),
    }
}

/// The pending-mutation marker in a raw domain image, if any.
pub fn pending_marker(image: &DomainImage) -> Option<String> {
    let global: Global = serde_json::from_slice(image.global.as_ref()?).ok()?;
    global.pending.map(|p| format!("{p:?}"))
}

/// The raw (unfiltered) session list of a workspace row in a domain image.
pub fn raw_session_ids(image: &DomainImage, id: WorkspaceId) -> Option<Vec<SessionId>> {
    let bytes = image.tables.get(WORKSPACES)?.get(&id.to_string())?;
    serde_json::from_slice::<Row>(bytes)
        .ok()
        .map(|r| r.session_ids)
}

fn write_global(d: &mut impl StorageDomain, order: Vec<WorkspaceId>, pending: Option<Pending>) {
    let g = Global {
        version: crate::DOMAIN_VERSION,
        initialized: true,
        order,
        pending,
    };
    d.write(DomainWrite::PutGlobal(serde_json::to_vec(&g).unwrap()))
        .unwrap();
}

fn write_row(d: &mut impl StorageDomain, id: WorkspaceId, path: &Path) {
    let row = Row {
        id,
        path: path.to_owned(),
        title: "t".into(),
        created_at: at(0),
        updated_at: at(0),
        session_ids: Vec::new(),
    };
    d.write(DomainWrite::PutRow {
        table: WORKSPACES.into(),
        key: id.to_string(),
        value: serde_json::to_vec(&row).unwrap(),
    })
    .unwrap();
}

fn dirs(n: usize) -> (tempfile::TempDir, Vec<PathBuf>) {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let paths = (0..n)
        .map(|i| {
            let p = base.join(format!("d{i}"));
            std::fs::create_dir(&p).unwrap();
            p
        })
        .collect();
    (tmp, paths)
}

fn code<T: std::fmt::Debug>(r: Result<T, WorkspaceError>) -> &'static str {
    r.expect_err("expected an error").code()
}

// ---- the conformance suite --------------------------------------------------------

/// Every conformance case by name.
pub fn cases<H: Harness>() -> Vec<(&'static str, fn(&mut H))> {
    vec![
        (
            "create_prepends_and_survives_reopen",
            create_prepends_and_survives_reopen::<H>,
        ),
        (
            "spellings_of_one_directory_are_one_workspace",
            spellings_are_one_workspace::<H>,
        ),
        (
            "create_rejects_bad_paths_and_titles_without_writing",
            create_errors::<H>,
        ),
        (
            "delete_keeps_directory_and_headers",
            delete_keeps_directory_and_headers::<H>,
        ),
        (
            "insert_before_is_dom_insert_before",
            insert_before_semantics::<H>,
        ),
        ("attach_prepends_and_validates_cwd", attach_semantics::<H>),
        ("session_moves_and_detach", session_moves_and_detach::<H>),
        (
            "membership_filtered_on_read_pruned_on_mutation",
            filtered_then_pruned::<H>,
        ),
        ("archive_survives_restart", archive_survives_restart::<H>),
        ("bootstrap_orders_and_breaks_ties", bootstrap_ordering::<H>),
        (
            "pending_without_session_persistence",
            pending_without_persistence::<H>,
        ),
        (
            "interrupted_bootstrap_resumes_and_reuses",
            partial_bootstrap_reuse::<H>,
        ),
        ("only_marked_mutations_are_recovered", marked_recovery::<H>),
        (
            "unmarked_inconsistency_fails_start_up",
            unmarked_inconsistency_fails::<H>,
        ),
        ("log_is_bounded_and_ordered", log_bounded::<H>),
        (
            "log_batches_are_bounded_and_ordered",
            log_bounded_in_batches::<H>,
        ),
        (
            "a_newer_store_version_is_refused",
            newer_version_refused::<H>,
        ),
        (
            "begin_session_creates_then_attaches",
            begin_session_flow::<H>,
        ),
    ]
}

/// Runs every case on a fresh store from `make`.
pub fn run_conformance<H: Harness>(make: impl Fn() -> H) {
    for (name, case) in cases::<H>() {
        eprintln!("conformance: {name}");
        let mut h = make();
        case(&mut h);
    }
}

fn create_prepends_and_survives_reopen<H: Harness>(h: &mut H) {
    let (_t, d) = dirs(2);
    let mut r = open_registry(h);
    let a = r.create(&d[0], None).unwrap();
    let b = r.create(&d[1], Some("B title")).unwrap();
    assert_eq!(a.title, "d0");
    assert_eq!(a.created_at, a.updated_at);
    assert_eq!(b.title, "B title");
    assert_eq!(r.order(), vec![b.id, a.id]);
    let listed = r.list();
    drop(r);
    let r = open_registry(h);
    assert_eq!(r.list(), listed);
    assert_eq!(r.get(a.id), Some(a));
}

fn spellings_are_one_workspace<H: Harness>(h: &mut H) {
    let (t, d) = dirs(1);
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&d[0], &link).unwrap();
    std::fs::create_dir(d[0].join("sub")).unwrap();
    let mut r = open_registry(h);
    let w = r.create(&d[0], None).unwrap();
    let spellings = [
        link.clone(),
        PathBuf::from(format!("{}/", d[0].display())),
        d[0].join("sub").join(".."),
        d[0].join("."),
    ];
    for s in &spellings {
        assert_eq!(
            r.create(s, Some("other")).unwrap(),
            w,
            "create via {}",
            s.display()
        );
        assert_eq!(
            r.resolve_by_path(s).unwrap(),
            Some(w.clone()),
            "resolve via {}",
            s.display()
        );
    }
    assert_eq!(r.list(), vec![w]);
}

fn create_errors<H: Harness>(h: &mut H) {
    let (t, d) = dirs(1);
    let file = t.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let mut r = open_registry(h);
    assert_eq!(
        code(r.create(&t.path().join("missing"), None)),
        "PATH_NOT_FOUND"
    );
    assert_eq!(code(r.create(&file, None)), "NOT_A_DIRECTORY");
    assert_eq!(code(r.create(&d[0], Some("  "))), "INVALID_TITLE");
    assert_eq!(
        code(r.resolve_by_path(&t.path().join("missing"))),
        "PATH_NOT_FOUND"
    );
    assert_eq!(r.resolve_by_path(&d[0]).unwrap(), None);
    let a = r.create(&d[0], Some("same")).unwrap();
    assert_eq!(r.create(&d[0], Some("changed")).unwrap().title, "same");
    drop(r);
    let r = open_registry(h);
    assert_eq!(r.list(), vec![a]);
}

fn delete_keeps_directory_and_headers<H: Harness>(h: &mut H) {
    let (_t, d) = dirs(2);
    let mut r = open_registry(h);
    let hd = header(1, Some(&d[0]), 1);
    r.record_session(&hd).unwrap();
    let a = r.create(&d[0], None).unwrap();
    let b = r.create(&d[1], Some("same")).unwrap();
    let c = r.create(&d[1], Some("same")).unwrap();
    assert_eq!(b, c);
    r.attach_session(a.id, sid(1)).unwrap();
    r.session_store()
        .append_log(sid(1), &LogEntry::new(at(2), "bash", "ls", "OK", 3))
        .unwrap();
    assert!(r.delete(a.id).unwrap());
    assert!(!r.delete(a.id).unwrap());
    assert!(d[0].is_dir());
    assert_eq!(r.get(a.id), None);
    drop(r);
    let mut r = open_registry(h);
    assert_eq!(r.list(), vec![b]);
    let detail = r.session_detail(sid(1)).unwrap();
    assert_eq!(detail.session.workspace_id, None);
    assert_eq!(detail.session.cwd.as_deref(), Some(d[0].as_path()));
    assert_eq!(detail.log.len(), 1);
    // Deleted registrations can be made again.
    let again = r.create(&d[0], None).unwrap();
    assert_ne!(again.id, a.id);
    assert_eq!(again.session_ids, Vec::<SessionId>::new());
}

fn insert_before_semantics<H: Harness>(h: &mut H) {
    let (_t, d) = dirs(3);
    let mut r = open_registry(h);
    let a = r.create(&d[0], None).unwrap().id;
    let b = r.create(&d[1], None).unwrap().id;
    let c = r.create(&d[2], None).unwrap().id;
    assert_eq!(r.order(), vec![c, b, a]);
    assert_eq!(r.insert_before(a, Some(c)).unwrap(), vec![a, c, b]);
    assert_eq!(r.insert_before(c, None).unwrap(), vec![a, b, c]);
    assert_eq!(r.insert_before(b, Some(b)).unwrap(), vec![a, b, c]);
    assert_eq!(r.insert_before(a, Some(b)).unwrap(), vec![a, b, c]);
    let stranger = WorkspaceId(Uuid::from_u128(99));
    assert_eq!(
        code(r.insert_before(a, Some(stranger))),
        "WORKSPACE_ORDER_INVALID"
    );
    assert_eq!(code(r.insert_before(stranger, None)), "UNKNOWN_WORKSPACE");
    drop(r);
    assert_eq!(open_registry(h).order(), vec![a, b, c]);
}

fn attach_semantics<H: Harness>(h: &mut H) {
    let (t, d) = dirs(3);
    let file = t.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let mut r = open_registry(h);
    let w = r.create(&d[0], None).unwrap();
    for hd in [
        header(1, Some(&d[0]), 1),
        header(2, Some(&d[0].join(".")), 2),
        header(3, None, 3),
        header(4, Some(&d[2]), 4),
        header(5, Some(&file), 5),
        header(6, Some(&d[1]), 6),
    ] {
        r.record_session(&hd).unwrap();
    }
    std::fs::remove_dir(&d[2]).unwrap();
    let w1 = r.attach_session(w.id, sid(1)).unwrap();
    let w2 = r.attach_session(w.id, sid(2)).unwrap();
    assert_eq!(w2.session_ids, vec![sid(2), sid(1)]);
    let again = r.attach_session(w.id, sid(1)).unwrap();
    assert_eq!(again, w2, "an already-listed id resolves without writing");
    assert!(w1.updated_at <= w2.updated_at);
    assert_eq!(code(r.attach_session(w.id, sid(7))), "UNKNOWN_SESSION");
    assert_eq!(code(r.attach_session(w.id, sid(3))), "SESSION_CWD_MISSING");
    assert_eq!(
        code(r.attach_session(w.id, sid(4))),
        "SESSION_CWD_UNRESOLVABLE"
    );
    assert_eq!(
        code(r.attach_session(w.id, sid(5))),
        "SESSION_CWD_NOT_DIRECTORY"
    );
    assert_eq!(code(r.attach_session(w.id, sid(6))), "SESSION_CWD_MISMATCH");
    assert_eq!(
        code(r.attach_session(WorkspaceId(Uuid::from_u128(9)), sid(1))),
        "UNKNOWN_WORKSPACE"
    );
    assert_eq!(r.get(w.id), Some(w2.clone()));
    drop(r);
    assert_eq!(open_registry(h).get(w.id), Some(w2));
}

fn session_moves_and_detach<H: Harness>(h: &mut H) {
    let (_t, d) = dirs(1);
    let mut r = open_registry(h);
    let w = r.create(&d[0], None).unwrap().id;
    for n in 1..=3 {
        r.record_session(&header(n, Some(&d[0]), n as i64)).unwrap();
        r.attach_session(w, sid(n)).unwrap();
    }
    let ids = |r: &Registry<H::Domain, H::Sessions>| r.get(w).unwrap().session_ids;
    assert_eq!(ids(&r), vec![sid(3), sid(2), sid(1)]);
    r.insert_session_before(w, sid(1), Some(sid(3))).unwrap();
    assert_eq!(ids(&r), vec![sid(1), sid(3), sid(2)]);
    r.insert_session_before(w, sid(3), None).unwrap();
    assert_eq!(ids(&r), vec![sid(1), sid(2), sid(3)]);
    let before = r.get(w).unwrap();
    assert_eq!(
        r.insert_session_before(w, sid(1), Some(sid(2))).unwrap(),
        before,
        "no write for no move"
    );
    assert_eq!(
        r.insert_session_before(w, sid(2), Some(sid(2))).unwrap(),
        before
    );
    assert_eq!(
        code(r.insert_session_before(w, sid(9), None)),
        "WORKSPACE_MOVE_INVALID"
    );
    assert_eq!(
        code(r.insert_session_before(w, sid(1), Some(sid(9)))),
        "WORKSPACE_MOVE_INVALID"
    );
    r.session_store()
        .append_log(sid(2), &LogEntry::new(at(9), "bash", "", "OK", 1))
        .unwrap();
    r.detach_session(w, sid(2)).unwrap();
    assert_eq!(
        r.detach_session(w, sid(2)).unwrap().session_ids,
        vec![sid(1), sid(3)]
    );
    assert_eq!(
        r.session_detail(sid(2)).unwrap().log.len(),
        1,
        "detach never touches the log"
    );
    drop(r);
    let r = open_registry(h);
    assert_eq!(ids(&r), vec![sid(1), sid(3)]);
}

fn filtered_then_pruned<H: Harness>(h: &mut H) {
    let (t, d) = dirs(2);
    let link = t.path().join("link");
    std::os::unix::fs::symlink(&d[0], &link).unwrap();
    let mut r = open_registry(h);
    let w = r.create(&d[0], None).unwrap().id;
    r.record_session(&header(1, Some(&link), 1)).unwrap();
    r.record_session(&header(2, Some(&d[0]), 2)).unwrap();
    r.attach_session(w, sid(1)).unwrap();
    r.attach_session(w, sid(2)).unwrap();
    drop(r);
    // Session 1's cwd now resolves elsewhere: it is filtered on read ...
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(&d[1], &link).unwrap();
    let mut r = open_registry(h);
    assert_eq!(r.get(w).unwrap().session_ids, vec![sid(2)]);
    let (mut dom, _s) = h.open();
    assert_eq!(
        raw_session_ids(&dom.load().unwrap(), w),
        Some(vec![sid(2), sid(1)])
    );
    drop(dom);
    // ... and pruned durably by the next mutation.
    r.set_title(w, "renamed").unwrap();
    drop(r);
    let (mut dom, _s) = h.open();
    assert_eq!(raw_session_ids(&dom.load().unwrap(), w), Some(vec![sid(2)]));
}

fn archive_survives_restart<H: Harness>(h: &mut H) {
    let mut r = open_registry(h);
    r.record_session(&header(1, None, 1)).unwrap();
    r.record_session(&header(2, None, 2)).unwrap();
    assert_eq!(code(r.archive_session(sid(3))), "UNKNOWN_SESSION");
    r.archive_session(sid(1)).unwrap();
    r.archive_session(sid(1)).unwrap();
    r.archive_session(sid(2)).unwrap();
    r.unarchive_session(sid(2)).unwrap();
    drop(r);
    let mut r = open_registry(h);
    assert!(r.is_archived(sid(1)));
    assert!(!r.is_archived(sid(2)));
    let listed: Vec<(SessionId, bool)> = r
        .sessions(None)
        .unwrap()
        .into_iter()
        .map(|s| (s.id, s.archived))
        .collect();
    assert_eq!(listed, vec![(sid(2), false), (sid(1), true)]);
}

/// Headers for the bootstrap cases, and the projection bootstrap must produce.
fn bootstrap_fixture(d: &[PathBuf], t: &Path) -> (Vec<SessionHeader>, Projection) {
    let gone = t.join("gone");
    let headers = vec![
        header(1, Some(&d[0]), 10),
        header(2, Some(&d[0]), 30),
        header(3, Some(&d[1]), 30), // ties with 2 on time; id 2 < 3 puts d0 first
        header(4, Some(&d[1]), 20),
        header(5, Some(&d[2]), 5),
        header(6, Some(&d[2]), 5),  // same instant as 5: ordered by id
        header(7, None, 50),        // legacy: ungrouped
        header(8, Some(&gone), 60), // cwd missing: ungrouped
        header(9, Some(&d[3].join("..").join("d3")), 1),
    ];
    let expected = Projection {
        workspaces: vec![
            (d[0].clone(), "d0".into(), vec![sid(2), sid(1)]),
            (d[1].clone(), "d1".into(), vec![sid(3), sid(4)]),
            (d[2].clone(), "d2".into(), vec![sid(5), sid(6)]),
            (d[3].clone(), "d3".into(), vec![sid(9)]),
        ],
        archived: vec![],
    };
    (headers, expected)
}

fn seed_headers<H: Harness>(h: &mut H, headers: &[SessionHeader]) {
    let (_d, mut s) = h.open();
    for hd in headers {
        s.put_header(hd).unwrap();
    }
}

fn bootstrap_ordering<H: Harness>(h: &mut H) {
    let (t, d) = dirs(4);
    let (headers, expected) = bootstrap_fixture(&d, t.path());
    seed_headers(h, &headers);
    let mut r = open_registry(h);
    assert_eq!(project(&r, &[]), expected);
    // Bootstrap runs once: a later header joins only through attach.
    r.record_session(&header(10, Some(&d[0]), 100)).unwrap();
    drop(r);
    let r = open_registry(h);
    assert_eq!(project(&r, &[]), expected);
}

fn pending_without_persistence<H: Harness>(h: &mut H) {
    let (t, d) = dirs(4);
    let (headers, expected) = bootstrap_fixture(&d, t.path());
    seed_headers(h, &headers);
    let (mut dom, s) = h.open();
    let before = dom.load().unwrap();
    let pending = match Registry::<H::Domain, H::Sessions>::start(dom, None).unwrap() {
        Startup::Pending(p) => p,
        Startup::Ready(_) => panic!("started without session persistence"),
    };
    let r = pending.resume(s).unwrap();
    assert_eq!(
        before,
        DomainImage::default(),
        "nothing was initialized while pending"
    );
    assert_eq!(project(&r, &[]), expected);
}

fn partial_bootstrap_reuse<H: Harness>(h: &mut H) {
    let (t, d) = dirs(4);
    let (headers, expected) = bootstrap_fixture(&d, t.path());
    seed_headers(h, &headers);
    // Interrupt the bootstrap at every write in turn, then start cleanly.
    let mut n = 1;
    loop {
        let (dom, s) = h.open();
        match Registry::open(FaultyDomain::new(dom, FaultPlan::FromNth(n)), s) {
            Ok(r) => {
                assert_eq!(project(&r, &[]), expected);
                break;
            }
            Err(e) => assert!(
                matches!(
                    e,
                    WorkspaceError::Storage(_) | WorkspaceError::RollbackFailed { .. }
                ),
                "{e}"
            ),
        }
        let r = open_registry(h);
        assert_eq!(
            project(&r, &[]),
            expected,
            "after an interruption at write {n}"
        );
        drop(r);
        let (mut dom, _s) = h.open();
        assert_eq!(pending_marker(&dom.load().unwrap()), None);
        n += 1;
        assert!(n < 100, "bootstrap never completed");
    }
}

fn marked_recovery<H: Harness>(h: &mut H) {
    let (_t, d) = dirs(3);
    let mut r = open_registry(h);
    let keep = r.create(&d[0], None).unwrap();
    drop(r);
    let (created, deleted) = (
        WorkspaceId(Uuid::from_u128(1)),
        WorkspaceId(Uuid::from_u128(2)),
    );
    {
        let (mut dom, _s) = h.open();
        // An interrupted create: marker and row, not yet in the order.
        write_row(&mut dom, created, &d[1]);
        // An interrupted delete of a second record would need a second marker;
        // test it in a second round below.
        write_global(
            &mut dom,
            vec![keep.id],
            Some(Pending::Create { id: created }),
        );
    }
    let r = open_registry(h);
    assert_eq!(r.list(), vec![keep.clone()]);
    drop(r);
    {
        let (mut dom, _s) = h.open();
        assert_eq!(pending_marker(&dom.load().unwrap()), None);
        // An interrupted delete: already out of the order, row still there.
        write_row(&mut dom, deleted, &d[2]);
        write_global(
            &mut dom,
            vec![keep.id],
            Some(Pending::Delete { id: deleted }),
        );
    }
    let mut r = open_registry(h);
    assert_eq!(r.list(), vec![keep.clone()]);
    // The directories can be registered again.
    r.create(&d[1], None).unwrap();
    r.create(&d[2], None).unwrap();
    drop(r);
    let (mut dom, _s) = h.open();
    let image = dom.load().unwrap();
    assert_eq!(pending_marker(&image), None);
    assert_eq!(image.tables.get(WORKSPACES).map(|t| t.len()), Some(3));
}

fn unmarked_inconsistency_fails<H: Harness>(h: &mut H) {
    let (_t, d) = dirs(2);
    let mut r = open_registry(h);
    let keep = r.create(&d[0], None).unwrap();
    drop(r);
    let stray = WorkspaceId(Uuid::from_u128(7));
    let ghost = WorkspaceId(Uuid::from_u128(8));
    {
        let (mut dom, _s) = h.open();
        write_row(&mut dom, stray, &d[0]);
        write_global(&mut dom, vec![keep.id, ghost], None);
    }
    let (dom, s) = h.open();
    let err = Registry::open(dom, s).err().expect("start-up must fail");
    let WorkspaceError::Inconsistent { problems } = err else {
        panic!("expected STORE_INCONSISTENT, got {err}");
    };
    assert_eq!(
        problems,
        vec![
            format!("order entry {ghost} has no workspace row"),
            format!("workspace row {stray} is not in the order"),
            format!(
                "path {} is claimed by workspaces {} and {}",
                d[0].display(),
                keep.id.min(stray),
                keep.id.max(stray)
            ),
        ]
    );
    // Start-up failed without writing anything: it fails the same way again.
    let (dom, s) = h.open();
    assert_eq!(
        Registry::open(dom, s).err().map(|e| e.code()),
        Some("STORE_INCONSISTENT")
    );
}

fn newer_version_refused<H: Harness>(h: &mut H) {
    {
        let (mut dom, _s) = h.open();
        let newer = br#"{"version":2,"initialized":true,"order":[],"pending":null}"#.to_vec();
        dom.write(DomainWrite::PutGlobal(newer)).unwrap();
    }
    let (dom, s) = h.open();
    let err = Registry::open(dom, s)
        .err()
        .expect("a newer store must be refused");
    assert_eq!(
        err.to_string(),
        "the workspace store has version 2; this build reads version 1"
    );
}

fn log_bounded<H: Harness>(h: &mut H) {
    let (_d, mut s) = h.open();
    s.put_header(&header(1, None, 0)).unwrap();
    let total = LOG_CAPACITY + 5;
    for i in 0..total {
        s.append_log(
            sid(1),
            &LogEntry::new(at(i as i64), "bash", &"x".repeat(1000), "OK", i as u64),
        )
        .unwrap();
    }
    drop(s);
    drop(_d);
    let (_d, mut s) = h.open();
    let log = s.read_log(sid(1)).unwrap();
    assert_eq!(log.len(), LOG_CAPACITY);
    assert_eq!(log.first().map(|e| e.duration_ms), Some(5));
    assert_eq!(log.last().map(|e| e.duration_ms), Some(total as u64 - 1));
    assert_eq!(log[0].argument_summary.len(), crate::MAX_SUMMARY_BYTES);
    assert_eq!(s.read_log(sid(2)).unwrap(), Vec::new());
}

fn log_bounded_in_batches<H: Harness>(h: &mut H) {
    let entry = |i: usize| LogEntry::new(at(i as i64), "bash", "ls", "OK", i as u64);
    let (_d, mut s) = h.open();
    s.put_header(&header(1, None, 0)).unwrap();
    // Singles, a batch that overflows the log, an empty batch, a batch
    // longer than the whole log: the log is the last entries, in order.
    let mut next = 0;
    for size in [3, 600, 0, 402, LOG_CAPACITY + 7, 5] {
        let batch: Vec<LogEntry> = (next..next + size).map(entry).collect();
        s.append_logs(sid(1), &batch).unwrap();
        next += size;
        let log = s.read_log(sid(1)).unwrap();
        let want: Vec<u64> = (next.saturating_sub(LOG_CAPACITY)..next)
            .map(|i| i as u64)
            .collect();
        assert_eq!(
            log.iter().map(|e| e.duration_ms).collect::<Vec<_>>(),
            want,
            "after a batch of {size}"
        );
    }
    s.append_log(sid(1), &entry(next)).unwrap();
    drop(s);
    drop(_d);
    let (_d, mut s) = h.open();
    let log = s.read_log(sid(1)).unwrap();
    assert_eq!(log.len(), LOG_CAPACITY);
    assert_eq!(log.last().map(|e| e.duration_ms), Some(next as u64));
}

fn begin_session_flow<H: Harness>(h: &mut H) {
    let (_t, d) = dirs(1);
    let mut r = open_registry(h);
    let mut first = header(1, Some(&d[0]), 1);
    first.client = Some(crate::ClientInfo {
        name: "client".into(),
        version: "1.0".into(),
    });
    let started = r.begin_session(&first).unwrap();
    let w = started.workspace.clone().expect("attached");
    assert_eq!(w.session_ids, vec![sid(1)]);
    assert_eq!(started.session.workspace_id, Some(w.id));
    let second = r
        .begin_session(&header(2, Some(&d[0].join(".")), 2))
        .unwrap();
    assert_eq!(
        second.workspace.map(|w| w.session_ids),
        Some(vec![sid(2), sid(1)])
    );
    let legacy = r.begin_session(&header(3, None, 3)).unwrap();
    assert_eq!(
        (legacy.workspace, legacy.ungrouped_reason.is_some()),
        (None, true)
    );
    assert_eq!(code(r.begin_session(&header(1, None, 9))), "SESSION_EXISTS");
    drop(r);
    let mut r = open_registry(h);
    let members: Vec<SessionId> = r
        .sessions(Some(w.id))
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(members, vec![sid(2), sid(1)]);
    assert_eq!(r.sessions(None).unwrap().len(), 3);
}

// ---- fault injection over every mutation -------------------------------------------

/// One mutation under fault injection: a deterministic setup and the operation.
pub struct Scenario<H: Harness> {
    pub name: &'static str,
    pub setup: fn(&mut Registry<H::Domain, H::Sessions>, &[PathBuf]),
    pub op: fn(
        &mut Registry<FaultyDomain<H::Domain>, H::Sessions>,
        &[PathBuf],
    ) -> Result<(), WorkspaceError>,
}

fn ws_at<D: StorageDomain, S: SessionPersistence>(r: &Registry<D, S>, p: &Path) -> WorkspaceId {
    r.resolve_by_path(p).unwrap().unwrap().id
}

fn base_setup<D: StorageDomain, S: SessionPersistence>(r: &mut Registry<D, S>, d: &[PathBuf]) {
    let a = r.create(&d[0], None).unwrap().id;
    r.create(&d[1], None).unwrap();
    for n in 1..=3 {
        r.record_session(&header(n, Some(&d[0]), n as i64)).unwrap();
        r.attach_session(a, sid(n)).unwrap();
    }
    r.record_session(&header(4, Some(&d[0]), 4)).unwrap();
    r.record_session(&header(5, Some(&d[2]), 5)).unwrap();
    r.archive_session(sid(5)).unwrap();
}

/// Every mutation the registry has. (`begin_session` is a sequence of them —
/// record, create, attach — each acknowledged on its own, so it is not one.)
pub fn scenarios<H: Harness>() -> Vec<Scenario<H>> {
    vec![
        Scenario {
            name: "create",
            setup: base_setup,
            op: |r, d| r.create(&d[2], Some("new")).map(drop),
        },
        Scenario {
            name: "delete",
            setup: base_setup,
            op: |r, d| r.delete(ws_at(r, &d[0])).map(drop),
        },
        Scenario {
            name: "insert_before",
            setup: base_setup,
            op: |r, d| r.insert_before(ws_at(r, &d[1]), None).map(drop),
        },
        Scenario {
            name: "set_title",
            setup: base_setup,
            op: |r, d| r.set_title(ws_at(r, &d[0]), "T").map(drop),
        },
        Scenario {
            name: "attach_session",
            setup: base_setup,
            op: |r, d| r.attach_session(ws_at(r, &d[0]), sid(4)).map(drop),
        },
        Scenario {
            name: "insert_session_before",
            setup: base_setup,
            op: |r, d| {
                r.insert_session_before(ws_at(r, &d[0]), sid(1), Some(sid(3)))
                    .map(drop)
            },
        },
        Scenario {
            name: "detach_session",
            setup: base_setup,
            op: |r, d| r.detach_session(ws_at(r, &d[0]), sid(2)).map(drop),
        },
        Scenario {
            name: "archive_session",
            setup: base_setup,
            op: |r, _| r.archive_session(sid(1)),
        },
        Scenario {
            name: "unarchive_session",
            setup: base_setup,
            op: |r, _| r.unarchive_session(sid(5)),
        },
    ]
}

const KNOWN: [u128; 6] = [1, 2, 3, 4, 5, 6];

fn known() -> Vec<SessionId> {
    KNOWN.iter().map(|n| sid(*n)).collect()
}

fn after_clean_reopen<H: Harness>(h: &mut H) -> Projection {
    let r = open_registry(h);
    let p = project(&r, &known());
    drop(r);
    let (mut dom, _s) = h.open();
    assert_eq!(
        pending_marker(&dom.load().unwrap()),
        None,
        "a marker was left after start-up"
    );
    p
}

/// Runs `scenario` once under `plan` and checks the outcome; returns how many writes were attempted.
pub fn check_under_faults<H: Harness>(
    make: &impl Fn() -> H,
    scenario: &Scenario<H>,
    plan: FaultPlan,
    applied: bool,
    d: &[PathBuf],
) -> (bool, usize) {
    // The expected result, from a run without faults.
    let mut clean = make();
    let mut r = open_registry(&mut clean);
    (scenario.setup)(&mut r, d);
    let before = project(&r, &known());
    let (dom, s) = r.into_parts();
    let mut r = Registry::open(
        FaultyDomain::new(dom, FaultPlan::Writes(BTreeSet::new())),
        s,
    )
    .unwrap();
    (scenario.op)(&mut r, d).unwrap();
    let expected = project(&r, &known());
    drop(r);

    let mut h = make();
    let mut r = open_registry(&mut h);
    (scenario.setup)(&mut r, d);
    let (dom, s) = r.into_parts();
    let mut faulty = FaultyDomain::new(dom, plan.clone());
    faulty.applied = applied;
    let mut r = Registry::open(faulty, s).unwrap();
    let outcome = (scenario.op)(&mut r, d);
    let in_memory = project(&r, &known());
    if matches!(outcome, Err(WorkspaceError::RollbackFailed { .. })) {
        assert_eq!(code(r.archive_session(sid(1))), "REGISTRY_POISONED");
    }
    let (faulty, s) = r.into_parts();
    let writes = faulty.writes();
    drop((faulty, s));
    let after = after_clean_reopen(&mut h);
    let what = format!("{} under {plan:?} (applied: {applied})", scenario.name);
    match &outcome {
        Ok(()) => {
            assert_eq!(
                after, expected,
                "{what}: an acknowledged mutation is missing"
            );
            assert_eq!(in_memory, expected, "{what}: memory disagrees");
        }
        Err(WorkspaceError::RollbackFailed { .. }) => {
            assert!(
                after == before || after == expected,
                "{what}: half a mutation is there: {after:?}"
            );
        }
        Err(e) => {
            assert!(
                matches!(e, WorkspaceError::Storage(_)),
                "{what}: unexpected error {e}"
            );
            assert!(
                after == before || after == expected,
                "{what}: half a mutation is there: {after:?}"
            );
            if !applied {
                assert_eq!(after, before, "{what}: an unacknowledged mutation appeared");
            }
            assert_eq!(
                in_memory, before,
                "{what}: a rolled-back mutation stayed in memory"
            );
        }
    }
    (outcome.is_ok(), writes)
}

/// Fault injection over every mutation: write N = 1, 2, … fails, transiently
/// and persistently, with and without the write reaching the medium.
pub fn fault_injection_suite<H: Harness>(make: impl Fn() -> H) {
    let (_t, d) = dirs(3);
    for scenario in scenarios::<H>() {
        for applied in [false, true] {
            for persistent in [false, true] {
                let mut n = 1;
                loop {
                    let plan = if persistent {
                        FaultPlan::FromNth(n)
                    } else {
                        FaultPlan::Nth(n)
                    };
                    let (ok, writes) = check_under_faults(&make, &scenario, plan, applied, &d);
                    if ok && writes < n {
                        break;
                    }
                    n += 1;
                    assert!(n < 50, "{}: never succeeded", scenario.name);
                }
            }
        }
    }
}

/// Every combination of failing writes among the first five, for create and delete
/// (their writes and their rollback writes).
pub fn rollback_combinations_suite<H: Harness>(make: impl Fn() -> H) {
    let (_t, d) = dirs(3);
    for scenario in scenarios::<H>()
        .into_iter()
        .filter(|s| s.name == "create" || s.name == "delete")
    {
        for mask in 0u32..32 {
            let set: BTreeSet<usize> = (1..=5).filter(|i| mask & (1 << (i - 1)) != 0).collect();
            check_under_faults(&make, &scenario, FaultPlan::Writes(set), false, &d);
        }
    }
}

/// Keeps `ARCHIVED` referenced for readers of this module.
pub const ARCHIVED_TABLE: &str = ARCHIVED;
