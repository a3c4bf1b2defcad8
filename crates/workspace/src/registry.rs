//! The registry: an in-memory cache over one storage domain, mutated only
//! through durable writes.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::path::{canonical_dir, canonical_path, default_title, header_canonical_cwd};
use crate::seam::{
    DomainWrite, LogEntry, SessionHeader, SessionId, SessionPersistence, StorageDomain,
    StorageError,
};
use crate::{ClientInfo, WorkspaceError};

/// The storage-domain version this build writes and reads.
pub const DOMAIN_VERSION: u32 = 1;

pub(crate) const WORKSPACES: &str = "workspaces";
pub(crate) const ARCHIVED: &str = "archived";
const MAX_TITLE_BYTES: usize = 1024;
const MAX_PROBLEMS: usize = 20;

/// A workspace id: a generated UUID, never derived from the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WorkspaceId(pub Uuid);

impl fmt::Display for WorkspaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for WorkspaceId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s.trim()).map(Self)
    }
}

/// Whether a workspace's directory is there right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceStatus {
    /// The path exists and is a directory.
    Ok,
    /// The path is missing or not a directory (the record is never changed for it).
    MissingDir,
}

/// A workspace as consumers see it (also the CLI's JSON record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workspace {
    /// Stable id.
    pub id: WorkspaceId,
    /// Canonical directory path, fixed at create.
    pub path: PathBuf,
    /// Display title (duplicates allowed).
    pub title: String,
    /// When the workspace was created.
    pub created_at: DateTime<Utc>,
    /// When its last durable mutation happened.
    pub updated_at: DateTime<Utc>,
    /// Member sessions in their manual order, already filtered by header.
    pub session_ids: Vec<SessionId>,
}

impl Workspace {
    /// Live, uncached check of the directory.
    pub fn status(&self) -> WorkspaceStatus {
        if self.path.is_dir() {
            WorkspaceStatus::Ok
        } else {
            WorkspaceStatus::MissingDir
        }
    }
}

/// A session as the CLI lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Session id.
    pub id: SessionId,
    /// The header's cwd, if any.
    pub cwd: Option<PathBuf>,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// The client that opened it.
    pub client: Option<ClientInfo>,
    /// Whether it is archived.
    pub archived: bool,
    /// The workspace it is a member of, if any.
    pub workspace_id: Option<WorkspaceId>,
}

/// One session with its log, for `dsh session show`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionDetail {
    /// The session.
    #[serde(flatten)]
    pub session: SessionRecord,
    /// Its logged tool calls, oldest first.
    pub log: Vec<LogEntry>,
}

/// What [`Registry::begin_session`] did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SessionStart {
    /// The recorded session.
    pub session: SessionRecord,
    /// The workspace it was attached to (created on first use).
    pub workspace: Option<Workspace>,
    /// Why it stayed ungrouped, when it did.
    pub ungrouped_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Global {
    pub(crate) version: u32,
    pub(crate) initialized: bool,
    pub(crate) order: Vec<WorkspaceId>,
    pub(crate) pending: Option<Pending>,
}

impl Default for Global {
    fn default() -> Self {
        Self {
            version: DOMAIN_VERSION,
            initialized: false,
            order: Vec::new(),
            pending: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Pending {
    Create { id: WorkspaceId },
    Delete { id: WorkspaceId },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Row {
    pub(crate) id: WorkspaceId,
    pub(crate) path: PathBuf,
    pub(crate) title: String,
    pub(crate) created_at: DateTime<Utc>,
    pub(crate) updated_at: DateTime<Utc>,
    pub(crate) session_ids: Vec<SessionId>,
}

#[derive(Debug, Clone)]
struct Indexed {
    header: SessionHeader,
    canonical_cwd: Option<PathBuf>,
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(value).map_err(|e| StorageError::Corrupt {
        what: format!("cannot encode a record: {e}"),
    })
}

/// The outcome of starting a registry.
pub enum Startup<D, S> {
    /// Session persistence was available: the registry is active.
    Ready(Box<Registry<D, S>>),
    /// No session persistence yet: nothing was read or written.
    Pending(PendingRegistry<D>),
}

/// A registry waiting for session persistence; it never treats that as an empty history.
pub struct PendingRegistry<D> {
    domain: D,
}

impl<D: StorageDomain> PendingRegistry<D> {
    /// Completes start-up once session persistence is available.
    pub fn resume<S: SessionPersistence>(
        self,
        sessions: S,
    ) -> Result<Registry<D, S>, WorkspaceError> {
        Registry::open(self.domain, sessions)
    }
}

/// The workspace registry over one storage domain and one session store.
pub struct Registry<D, S> {
    domain: D,
    sessions: S,
    global: Global,
    rows: HashMap<WorkspaceId, Row>,
    by_path: HashMap<PathBuf, WorkspaceId>,
    archived: BTreeSet<SessionId>,
    headers: HashMap<SessionId, Option<Indexed>>,
    /// Canonical forms of header cwds, resolved once per distinct cwd per registry.
    canonical: HashMap<PathBuf, Option<PathBuf>>,
    poisoned: bool,
}

impl<D: StorageDomain, S: SessionPersistence> Registry<D, S> {
    /// Starts the registry, or returns [`Startup::Pending`] when `sessions` is not available yet.
    pub fn start(domain: D, sessions: Option<S>) -> Result<Startup<D, S>, WorkspaceError> {
        match sessions {
            None => Ok(Startup::Pending(PendingRegistry { domain })),
            Some(sessions) => Ok(Startup::Ready(Box::new(Self::open(domain, sessions)?))),
        }
    }

    /// Loads the domain, resolves a marked interrupted mutation, checks
    /// consistency, indexes listed headers and bootstraps once from headers.
    pub fn open(mut domain: D, sessions: S) -> Result<Self, WorkspaceError> {
        let image = domain.load()?;
        let mut problems = Vec::new();
        let global = match &image.global {
            None => Global::default(),
            Some(bytes) => serde_json::from_slice::<Global>(bytes).map_err(|e| {
                WorkspaceError::Inconsistent {
                    problems: vec![format!("the global record cannot be decoded: {e}")],
                }
            })?,
        };
        if global.version != DOMAIN_VERSION {
            return Err(WorkspaceError::UnsupportedVersion {
                found: global.version,
                supported: DOMAIN_VERSION,
            });
        }
        let marked = match global.pending {
            Some(Pending::Create { id } | Pending::Delete { id }) => Some(id),
            None => None,
        };
        let mut rows = HashMap::new();
        if let Some(table) = image.tables.get(WORKSPACES) {
            for (key, bytes) in table {
                if marked.is_some_and(|id| id.to_string() == *key) {
                    // The marked row is resolved below whatever its content.
                    if let Ok(row) = serde_json::from_slice::<Row>(bytes) {
                        rows.insert(row.id, row);
                    }
                    continue;
                }
                match serde_json::from_slice::<Row>(bytes) {
                    Ok(row) if row.id.to_string() == *key => {
                        rows.insert(row.id, row);
                    }
                    Ok(row) => problems.push(format!("workspace row {key} holds id {}", row.id)),
                    Err(e) => problems.push(format!("workspace row {key} cannot be decoded: {e}")),
                }
            }
        }
        let mut archived = BTreeSet::new();
        if let Some(table) = image.tables.get(ARCHIVED) {
            for key in table.keys() {
                match SessionId::from_str(key) {
                    Ok(id) => {
                        archived.insert(id);
                    }
                    Err(_) => problems.push(format!("archived entry {key:?} is not a session id")),
                }
            }
        }
        let mut registry = Self {
            domain,
            sessions,
            global,
            rows,
            by_path: HashMap::new(),
            archived,
            headers: HashMap::new(),
            canonical: HashMap::new(),
            poisoned: false,
        };
        if let Some(id) = marked {
            registry.recover_marked(id)?;
        }
        registry.check_consistency(&mut problems);
        if !problems.is_empty() {
            problems.truncate(MAX_PROBLEMS);
            return Err(WorkspaceError::Inconsistent { problems });
        }
        registry.by_path = registry
            .rows
            .values()
            .map(|r| (r.path.clone(), r.id))
            .collect();
        if registry.global.initialized {
            let listed: Vec<SessionId> = registry
                .rows
                .values()
                .flat_map(|r| r.session_ids.iter().copied())
                .collect();
            for id in listed {
                registry.index_header(id)?;
            }
        } else {
            registry.bootstrap()?;
        }
        Ok(registry)
    }

    /// Completes an interrupted delete or rolls back an interrupted create:
    /// both mean "the row and its order entry are gone, then the marker".
    fn recover_marked(&mut self, id: WorkspaceId) -> Result<(), WorkspaceError> {
        self.domain.write(DomainWrite::DeleteRow {
            table: WORKSPACES.into(),
            key: id.to_string(),
        })?;
        self.rows.remove(&id);
        let mut global = self.global.clone();
        global.order.retain(|x| *x != id);
        global.pending = None;
        self.domain
            .write(DomainWrite::PutGlobal(encode(&global)?))?;
        self.global = global;
        Ok(())
    }

    fn check_consistency(&self, problems: &mut Vec<String>) {
        let mut seen = HashSet::new();
        for id in &self.global.order {
            if !seen.insert(*id) {
                problems.push(format!("workspace {id} appears twice in the order"));
            }
            if !self.rows.contains_key(id) {
                problems.push(format!("order entry {id} has no workspace row"));
            }
        }
        let mut paths: HashMap<&Path, WorkspaceId> = HashMap::new();
        let mut rows: Vec<&Row> = self.rows.values().collect();
        rows.sort_by_key(|r| r.id);
        for row in rows {
            if !seen.contains(&row.id) {
                problems.push(format!("workspace row {} is not in the order", row.id));
            }
            if !row.path.is_absolute() {
                problems.push(format!(
                    "workspace {} has a relative path {}",
                    row.id,
                    row.path.display()
                ));
            }
            if let Some(other) = paths.insert(&row.path, row.id) {
                let (first, second) = (other.min(row.id), other.max(row.id));
                problems.push(format!(
                    "path {} is claimed by workspaces {first} and {second}",
                    row.path.display()
                ));
            }
            let mut sessions = HashSet::new();
            for sid in &row.session_ids {
                if !sessions.insert(*sid) {
                    problems.push(format!(
                        "session {sid} is listed twice in workspace {}",
                        row.id
                    ));
                }
            }
        }
    }

    fn index_header(&mut self, id: SessionId) -> Result<Option<&Indexed>, WorkspaceError> {
        if !matches!(self.headers.get(&id), Some(Some(_))) {
            let header = self.sessions.header(id)?;
            let indexed = header.map(|header| Indexed {
                canonical_cwd: self.canonical_cwd(&header),
                header,
            });
            self.headers.insert(id, indexed);
        }
        Ok(self.headers.get(&id).and_then(Option::as_ref))
    }

    fn canonical_cwd(&mut self, header: &SessionHeader) -> Option<PathBuf> {
        let cwd = header.cwd.as_ref()?;
        self.canonical
            .entry(cwd.clone())
            .or_insert_with(|| header_canonical_cwd(Some(cwd)))
            .clone()
    }

    fn bootstrap(&mut self) -> Result<(), WorkspaceError> {
        let headers = self.sessions.list_headers()?;
        let mut groups: HashMap<PathBuf, Vec<SessionHeader>> = HashMap::new();
        for header in headers {
            let canonical = self.canonical_cwd(&header);
            if let Some(dir) = header.cwd.as_deref().and_then(|c| canonical_dir(c).ok()) {
                groups.entry(dir).or_default().push(header.clone());
            }
            self.headers.insert(
                header.id,
                Some(Indexed {
                    canonical_cwd: canonical,
                    header,
                }),
            );
        }
        let newest_first = |a: &SessionHeader, b: &SessionHeader| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| a.id.cmp(&b.id))
        };
        let mut groups: Vec<(PathBuf, Vec<SessionHeader>)> = groups.into_iter().collect();
        for (_, members) in &mut groups {
            members.sort_by(newest_first);
        }
        groups.sort_by(|(pa, a), (pb, b)| match (a.first(), b.first()) {
            (Some(x), Some(y)) => newest_first(x, y).then_with(|| pa.cmp(pb)),
            (None, Some(_) | None) | (Some(_), None) => pa.cmp(pb),
        });
        let mut bootstrapped = Vec::new();
        for (path, members) in groups {
            let workspace = self.create(&path, None)?;
            let ids: Vec<SessionId> = members.iter().map(|h| h.id).collect();
            if let Some(row) = self.rows.get(&workspace.id)
                && row.session_ids != ids
            {
                let mut row = row.clone();
                row.session_ids = ids;
                row.updated_at = Utc::now();
                self.write_row(row)?;
            }
            bootstrapped.push(workspace.id);
        }
        let mut global = self.global.clone();
        let rest: Vec<WorkspaceId> = global
            .order
            .iter()
            .copied()
            .filter(|id| !bootstrapped.contains(id))
            .collect();
        global.order = bootstrapped.into_iter().chain(rest).collect();
        global.initialized = true;
        self.domain
            .write(DomainWrite::PutGlobal(encode(&global)?))?;
        self.global = global;
        Ok(())
    }

    fn is_member(&self, row: &Row, id: SessionId) -> bool {
        matches!(self.headers.get(&id), Some(Some(ix)) if ix.canonical_cwd.as_deref() == Some(row.path.as_path()))
    }

    fn pruned(&self, row: &Row) -> Vec<SessionId> {
        row.session_ids
            .iter()
            .copied()
            .filter(|id| self.is_member(row, *id))
            .collect()
    }

    fn view(&self, row: &Row) -> Workspace {
        Workspace {
            id: row.id,
            path: row.path.clone(),
            title: row.title.clone(),
            created_at: row.created_at,
            updated_at: row.updated_at,
            session_ids: self.pruned(row),
        }
    }

    fn check_usable(&self) -> Result<(), WorkspaceError> {
        if self.poisoned {
            Err(WorkspaceError::Poisoned)
        } else {
            Ok(())
        }
    }

    fn row(&self, id: WorkspaceId) -> Result<&Row, WorkspaceError> {
        self.rows
            .get(&id)
            .ok_or(WorkspaceError::UnknownWorkspace(id))
    }

    fn write_row(&mut self, row: Row) -> Result<Workspace, WorkspaceError> {
        self.domain.write(DomainWrite::PutRow {
            table: WORKSPACES.into(),
            key: row.id.to_string(),
            value: encode(&row)?,
        })?;
        let view = self.view(&row);
        self.rows.insert(row.id, row);
        Ok(view)
    }

    /// Fails with `RollbackFailed` (and poisons the registry) when `rollback` fails.
    fn rolled_back(&mut self, error: StorageError, rollback: &[DomainWrite]) -> WorkspaceError {
        for write in rollback {
            if let Err(rollback) = self.domain.write(write.clone()) {
                self.poisoned = true;
                return WorkspaceError::RollbackFailed { error, rollback };
            }
        }
        WorkspaceError::Storage(error)
    }

    // ---- reads -------------------------------------------------------------

    /// One workspace from the cache.
    pub fn get(&self, id: WorkspaceId) -> Option<Workspace> {
        self.rows.get(&id).map(|r| self.view(r))
    }

    /// Every workspace, in durable display order.
    pub fn list(&self) -> Vec<Workspace> {
        self.global
            .order
            .iter()
            .filter_map(|id| self.get(*id))
            .collect()
    }

    /// The durable display order.
    pub fn order(&self) -> Vec<WorkspaceId> {
        self.global.order.clone()
    }

    /// The workspace owning `path`'s canonical directory; never creates one.
    pub fn resolve_by_path(&self, path: &Path) -> Result<Option<Workspace>, WorkspaceError> {
        let canonical = canonical_path(path)?;
        Ok(self.by_path.get(&canonical).and_then(|id| self.get(*id)))
    }

    /// Live check of a workspace's directory.
    pub fn status(&self, id: WorkspaceId) -> Result<WorkspaceStatus, WorkspaceError> {
        Ok(self.view(self.row(id)?).status())
    }

    // ---- registry mutations -----------------------------------------------

    /// Creates a workspace for `path`'s canonical directory (prepended to the
    /// order), or returns the one that already owns it, unchanged.
    pub fn create(
        &mut self,
        path: &Path,
        title: Option<&str>,
    ) -> Result<Workspace, WorkspaceError> {
        self.check_usable()?;
        let title = title.map(valid_title).transpose()?;
        let canonical = canonical_dir(path)?;
        if let Some(existing) = self.by_path.get(&canonical).and_then(|id| self.get(*id)) {
            return Ok(existing);
        }
        let now = Utc::now();
        let id = WorkspaceId(Uuid::new_v4());
        let row = Row {
            id,
            title: title.unwrap_or_else(|| default_title(&canonical)),
            path: canonical,
            created_at: now,
            updated_at: now,
            session_ids: Vec::new(),
        };
        let prior = self.global.clone();
        let marked = Global {
            pending: Some(Pending::Create { id }),
            ..prior.clone()
        };
        let mut done = prior.clone();
        done.order.insert(0, id);
        // Encode everything before the first write, so no encoding failure can
        // interrupt the sequence half way.
        let restore = DomainWrite::PutGlobal(encode(&prior)?);
        let mark = DomainWrite::PutGlobal(encode(&marked)?);
        let put = DomainWrite::PutRow {
            table: WORKSPACES.into(),
            key: id.to_string(),
            value: encode(&row)?,
        };
        let publish = DomainWrite::PutGlobal(encode(&done)?);
        let drop_row = DomainWrite::DeleteRow {
            table: WORKSPACES.into(),
            key: id.to_string(),
        };
        // A failed write may still have reached the medium, so every rollback
        // re-asserts the marker before undoing anything: whatever the rollback
        // leaves behind is either the prior state or explained by the marker.
        if let Err(e) = self.domain.write(mark.clone()) {
            return Err(self.rolled_back(e, &[restore]));
        }
        if let Err(e) = self.domain.write(put) {
            return Err(self.rolled_back(e, &[drop_row, restore]));
        }
        if let Err(e) = self.domain.write(publish) {
            return Err(self.rolled_back(e, &[mark, drop_row, restore]));
        }
        self.global = done;
        self.by_path.insert(row.path.clone(), id);
        let view = self.view(&row);
        self.rows.insert(id, row);
        Ok(view)
    }

    /// Removes a registration (never the directory, files, headers or logs).
    /// `false` for an unknown id.
    pub fn delete(&mut self, id: WorkspaceId) -> Result<bool, WorkspaceError> {
        self.check_usable()?;
        let Some(row) = self.rows.get(&id).cloned() else {
            return Ok(false);
        };
        let prior = self.global.clone();
        let mut marked = prior.clone();
        marked.order.retain(|x| *x != id);
        marked.pending = Some(Pending::Delete { id });
        let done = Global {
            pending: None,
            ..marked.clone()
        };
        let restore = DomainWrite::PutGlobal(encode(&prior)?);
        let mark = DomainWrite::PutGlobal(encode(&marked)?);
        let finish = DomainWrite::PutGlobal(encode(&done)?);
        let put_back = DomainWrite::PutRow {
            table: WORKSPACES.into(),
            key: id.to_string(),
            value: encode(&row)?,
        };
        let drop_row = DomainWrite::DeleteRow {
            table: WORKSPACES.into(),
            key: id.to_string(),
        };
        if let Err(e) = self.domain.write(mark.clone()) {
            return Err(self.rolled_back(e, &[restore]));
        }
        if let Err(e) = self.domain.write(drop_row) {
            return Err(self.rolled_back(e, &[put_back, restore]));
        }
        if let Err(e) = self.domain.write(finish) {
            return Err(self.rolled_back(e, &[mark, put_back, restore]));
        }
        self.global = done;
        self.by_path.remove(&row.path);
        self.rows.remove(&id);
        Ok(true)
    }

    /// Moves a workspace before `before` (or to the end), like DOM
    /// `insertBefore`; returns the committed order.
    pub fn insert_before(
        &mut self,
        id: WorkspaceId,
        before: Option<WorkspaceId>,
    ) -> Result<Vec<WorkspaceId>, WorkspaceError> {
        self.check_usable()?;
        self.row(id)?;
        if let Some(anchor) = before
            && !self.rows.contains_key(&anchor)
        {
            return Err(WorkspaceError::WorkspaceOrderInvalid {
                reason: format!("anchor workspace {anchor} is not in the order"),
            });
        }
        let order = dom_insert_before(&self.global.order, id, before);
        if order == self.global.order {
            return Ok(order);
        }
        let global = Global {
            order,
            ..self.global.clone()
        };
        self.domain
            .write(DomainWrite::PutGlobal(encode(&global)?))?;
        self.global = global;
        Ok(self.global.order.clone())
    }

    /// Archives a stored session; an archived one resolves without writing.
    pub fn archive_session(&mut self, id: SessionId) -> Result<(), WorkspaceError> {
        self.set_archived(id, true)
    }

    /// Un-archives a stored session; a non-archived one resolves without writing.
    pub fn unarchive_session(&mut self, id: SessionId) -> Result<(), WorkspaceError> {
        self.set_archived(id, false)
    }

    fn set_archived(&mut self, id: SessionId, archived: bool) -> Result<(), WorkspaceError> {
        self.check_usable()?;
        if self.index_header(id)?.is_none() {
            return Err(WorkspaceError::UnknownSession(id));
        }
        if self.archived.contains(&id) == archived {
            return Ok(());
        }
        let (table, key) = (ARCHIVED.to_owned(), id.to_string());
        let write = if archived {
            DomainWrite::PutRow {
                table,
                key,
                value: encode(&Utc::now())?,
            }
        } else {
            DomainWrite::DeleteRow { table, key }
        };
        self.domain.write(write)?;
        if archived {
            self.archived.insert(id);
        } else {
            self.archived.remove(&id);
        }
        Ok(())
    }

    // ---- workspace mutations ----------------------------------------------

    /// Replaces a workspace's title durably.
    pub fn set_title(&mut self, id: WorkspaceId, title: &str) -> Result<Workspace, WorkspaceError> {
        self.check_usable()?;
        let title = valid_title(title)?;
        let row = self.row(id)?;
        let row = Row {
            title,
            session_ids: self.pruned(row),
            updated_at: Utc::now(),
            ..row.clone()
        };
        self.write_row(row)
    }

    /// Prepends a session whose header cwd resolves to this workspace's directory.
    pub fn attach_session(
        &mut self,
        id: WorkspaceId,
        session: SessionId,
    ) -> Result<Workspace, WorkspaceError> {
        self.check_usable()?;
        let pruned = self.pruned(self.row(id)?);
        if pruned.contains(&session) {
            return self.commit_list(id, pruned);
        }
        let Some(indexed) = self.index_header(session)?.cloned() else {
            return Err(WorkspaceError::UnknownSession(session));
        };
        let Some(cwd) = indexed.header.cwd.clone() else {
            return Err(WorkspaceError::SessionCwdMissing { session });
        };
        let canonical =
            std::fs::canonicalize(&cwd).map_err(|e| WorkspaceError::SessionCwdUnresolvable {
                session,
                cwd: cwd.clone(),
                reason: e.to_string(),
            })?;
        if !canonical.is_dir() {
            return Err(WorkspaceError::SessionCwdNotDirectory { session, cwd });
        }
        let path = self.row(id)?.path.clone();
        if canonical != path {
            return Err(WorkspaceError::SessionCwdMismatch {
                session,
                cwd: canonical,
                path,
            });
        }
        self.headers.insert(
            session,
            Some(Indexed {
                canonical_cwd: Some(canonical),
                ..indexed
            }),
        );
        let list = std::iter::once(session).chain(pruned).collect();
        self.commit_list(id, list)
    }

    /// Moves a listed session before `before` (or to the end), like DOM `insertBefore`.
    pub fn insert_session_before(
        &mut self,
        id: WorkspaceId,
        session: SessionId,
        before: Option<SessionId>,
    ) -> Result<Workspace, WorkspaceError> {
        self.check_usable()?;
        let pruned = self.pruned(self.row(id)?);
        if !pruned.contains(&session) {
            return Err(WorkspaceError::WorkspaceMoveInvalid {
                reason: format!("session {session} is not in workspace {id}"),
            });
        }
        if let Some(anchor) = before
            && !pruned.contains(&anchor)
        {
            return Err(WorkspaceError::WorkspaceMoveInvalid {
                reason: format!("anchor session {anchor} is not in workspace {id}"),
            });
        }
        let list = dom_insert_before(&pruned, session, before);
        self.commit_list(id, list)
    }

    /// Removes a session from the list; idempotent; never touches its log.
    pub fn detach_session(
        &mut self,
        id: WorkspaceId,
        session: SessionId,
    ) -> Result<Workspace, WorkspaceError> {
        self.check_usable()?;
        let mut list = self.pruned(self.row(id)?);
        list.retain(|s| *s != session);
        self.commit_list(id, list)
    }

    /// Writes `list` as the workspace's sessions unless it already is the durable list.
    fn commit_list(
        &mut self,
        id: WorkspaceId,
        list: Vec<SessionId>,
    ) -> Result<Workspace, WorkspaceError> {
        let row = self.row(id)?;
        if row.session_ids == list {
            return Ok(self.view(row));
        }
        let row = Row {
            session_ids: list,
            updated_at: Utc::now(),
            ..row.clone()
        };
        self.write_row(row)
    }

    // ---- sessions -----------------------------------------------------------

    /// Stores a new session header (an identical one already stored is accepted).
    pub fn record_session(&mut self, header: &SessionHeader) -> Result<(), WorkspaceError> {
        self.check_usable()?;
        match self.sessions.header(header.id)? {
            Some(existing) if existing == *header => {}
            Some(_) => return Err(WorkspaceError::SessionExists(header.id)),
            None => self.sessions.put_header(header)?,
        }
        self.headers.insert(
            header.id,
            Some(Indexed {
                canonical_cwd: header_canonical_cwd(header.cwd.as_deref()),
                header: header.clone(),
            }),
        );
        Ok(())
    }

    /// Records a session and attaches it to the workspace owning its cwd,
    /// creating that workspace on first use. A session whose cwd cannot be
    /// attached is still recorded, ungrouped, with the reason.
    pub fn begin_session(
        &mut self,
        header: &SessionHeader,
    ) -> Result<SessionStart, WorkspaceError> {
        self.record_session(header)?;
        let mut ungrouped_reason = None;
        let mut workspace = None;
        match header.cwd.as_deref() {
            None => ungrouped_reason = Some("the session has no cwd".to_owned()),
            Some(cwd) => match self.create(cwd, None) {
                Ok(ws) => workspace = Some(self.attach_session(ws.id, header.id)?),
                Err(
                    e @ (WorkspaceError::PathNotFound { .. }
                    | WorkspaceError::PathUnresolvable { .. }
                    | WorkspaceError::NotADirectory { .. }),
                ) => ungrouped_reason = Some(e.to_string()),
                Err(e) => return Err(e),
            },
        }
        let session = self.record_for(header);
        Ok(SessionStart {
            session,
            workspace,
            ungrouped_reason,
        })
    }

    fn membership(&self) -> HashMap<SessionId, WorkspaceId> {
        let mut map = HashMap::new();
        for row in self.rows.values() {
            for sid in self.pruned(row) {
                map.insert(sid, row.id);
            }
        }
        map
    }

    fn record_for(&self, header: &SessionHeader) -> SessionRecord {
        let workspace_id = self
            .rows
            .values()
            .find(|row| row.session_ids.contains(&header.id) && self.is_member(row, header.id))
            .map(|row| row.id);
        SessionRecord {
            id: header.id,
            cwd: header.cwd.clone(),
            created_at: header.created_at,
            client: header.client.clone(),
            archived: self.archived.contains(&header.id),
            workspace_id,
        }
    }

    /// Sessions: every stored one newest first, or one workspace's members in its order.
    pub fn sessions(
        &mut self,
        workspace: Option<WorkspaceId>,
    ) -> Result<Vec<SessionRecord>, WorkspaceError> {
        if let Some(id) = workspace {
            let members = self.pruned(self.row(id)?);
            let mut out = Vec::with_capacity(members.len());
            for sid in members {
                if let Some(ix) = self.index_header(sid)?.cloned() {
                    out.push(self.record_for(&ix.header));
                }
            }
            return Ok(out);
        }
        let mut headers = self.sessions.list_headers()?;
        headers.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| a.id.cmp(&b.id))
        });
        let membership = self.membership();
        Ok(headers
            .into_iter()
            .map(|h| SessionRecord {
                archived: self.archived.contains(&h.id),
                workspace_id: membership.get(&h.id).copied(),
                id: h.id,
                cwd: h.cwd,
                created_at: h.created_at,
                client: h.client,
            })
            .collect())
    }

    /// One session with its log.
    pub fn session_detail(&mut self, id: SessionId) -> Result<SessionDetail, WorkspaceError> {
        let Some(ix) = self.index_header(id)?.cloned() else {
            return Err(WorkspaceError::UnknownSession(id));
        };
        let log = self.sessions.read_log(id)?;
        Ok(SessionDetail {
            session: self.record_for(&ix.header),
            log,
        })
    }

    /// Whether a session is archived.
    pub fn is_archived(&self, id: SessionId) -> bool {
        self.archived.contains(&id)
    }

    /// The session seam, for log appends and reads that need no registry state.
    pub fn session_store(&mut self) -> &mut S {
        &mut self.sessions
    }

    /// Gives the providers back.
    pub fn into_parts(self) -> (D, S) {
        (self.domain, self.sessions)
    }
}

fn valid_title(title: &str) -> Result<String, WorkspaceError> {
    if title.trim().is_empty() {
        return Err(WorkspaceError::InvalidTitle {
            reason: "a title cannot be empty".into(),
        });
    }
    if title.len() > MAX_TITLE_BYTES {
        return Err(WorkspaceError::InvalidTitle {
            reason: format!(
                "a title is at most {MAX_TITLE_BYTES} bytes, got {}",
                title.len()
            ),
        });
    }
    Ok(title.to_owned())
}

/// DOM `insertBefore` on a list: only `item` moves; a missing anchor means the end.
pub(crate) fn dom_insert_before<T: Copy + PartialEq>(
    list: &[T],
    item: T,
    before: Option<T>,
) -> Vec<T> {
    if before == Some(item) {
        return list.to_vec();
    }
    let mut out: Vec<T> = list.iter().copied().filter(|x| *x != item).collect();
    let at = before
        .and_then(|b| out.iter().position(|x| *x == b))
        .unwrap_or(out.len());
    out.insert(at, item);
    out
}
