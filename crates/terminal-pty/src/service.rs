//! The session service: the registry of terminals and the ownership
//! discipline.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use terminal_seam::{
    BackgroundSend, BoxFuture, CloseKind, CloseOutcome, DEFAULT_COLS, DEFAULT_ROWS, MAX_CELLS,
    MAX_COLS, MAX_ROWS, MAX_SEND_TIMEOUT, MAX_UNTIL_BYTES, MIN_COLS, MIN_ROWS, MIN_SEND_TIMEOUT,
    OpenRequest, Opened, Owner, ReadOutcome, ReadRequest, SendRequest, SignalOutcome, StartedSend,
    StreamChunk, TerminalError, TerminalId, TerminalInfo, TerminalService, TerminalSignal,
};

use crate::interrupt::interrupt_for;
use crate::session::{Session, SessionSpec};
use crate::settle::{SendPlan, run_send};
use crate::spawn::{SHELL_ARGS, base_env, nonce, open_pty, shell_env, take_controlling_terminal};

/// Limits and defaults of a [`PtyTerminals`] service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalConfig {
    /// Open terminals per owner (`TERMINAL_LIMIT` beyond). Default 32.
    pub max_terminals_per_owner: usize,
    /// Sanitized scrollback kept per terminal, in bytes. Default 4 MiB.
    pub scrollback_bytes: usize,
    /// Largest send output or stream read, in bytes (head + tail beyond).
    /// Default 32 KiB.
    pub max_result_bytes: usize,
    /// Silence after which a send settles `idle`, used only where input
    /// waits cannot be observed. Default 3 s.
    pub idle_fallback: Duration,
    /// How long `open` waits for the startup to settle. Default 10 s.
    pub startup_timeout: Duration,
    /// The default shell program. Default `bash`.
    pub shell: String,
    /// Longest accepted send text, in bytes. Default 1 MiB.
    pub max_send_bytes: usize,
}

impl Default for TerminalConfig {
    fn default() -> Self {
        Self {
            max_terminals_per_owner: 32,
            scrollback_bytes: 4 * 1024 * 1024,
            max_result_bytes: 32 * 1024,
            idle_fallback: Duration::from_secs(3),
            startup_timeout: Duration::from_secs(10),
            shell: "bash".to_owned(),
            max_send_bytes: 1024 * 1024,
        }
    }
}

/// How many closed terminals are remembered (so a second close says
/// `already_closing` and a late send says `SESSION_CLOSING`).
const CLOSED_REMEMBERED: usize = 1024;

enum Entry {
    Live(Arc<Session>),
    Closed(Owner),
}

#[derive(Default)]
struct Registry {
    next_id: u64,
    entries: BTreeMap<u64, Entry>,
    closed_order: VecDeque<u64>,
    /// Opens in flight per owner, with their names.
    pending: HashMap<Owner, Vec<Option<String>>>,
}

struct Inner {
    config: TerminalConfig,
    registry: Mutex<Registry>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let registry = self.registry.get_mut().unwrap_or_else(|e| e.into_inner());
        for entry in registry.entries.values() {
            if let Entry::Live(session) = entry {
                session.kill_now();
            }
        }
        process_tree::reap_adopted();
    }
}

/// PTY terminals for many owners: the [`TerminalService`] on `pty-process`.
///
/// One long-lived value for the host; cloning shares it. The tool layer
/// borrows it, so rebuilding the tool layer leaves every terminal alive.
/// When the last clone drops, every terminal's processes are ended.
/// Create it inside a tokio runtime (terminals run tasks on it).
#[derive(Clone)]
pub struct PtyTerminals {
    inner: Arc<Inner>,
}

impl Default for PtyTerminals {
    fn default() -> Self {
        Self::new(TerminalConfig::default())
    }
}

impl std::fmt::Debug for PtyTerminals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PtyTerminals")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Reservation of an open in flight; released on drop.
struct Pending<'a> {
    inner: &'a Inner,
    owner: Owner,
    name: Option<String>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let mut registry = self.inner.lock();
        if let Some(names) = registry.pending.get_mut(&self.owner) {
            if let Some(at) = names.iter().position(|n| *n == self.name) {
                names.swap_remove(at);
            }
            if names.is_empty() {
                registry.pending.remove(&self.owner);
            }
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The owner's live session `id`, or the contract's error.
    fn session(&self, owner: &Owner, id: TerminalId) -> Result<Arc<Session>, TerminalError> {
        match self.lock().entries.get(&id.0) {
            None => Err(TerminalError::NoSession { id }),
            Some(Entry::Closed(o)) if o != owner => Err(TerminalError::ForeignSession { id }),
            Some(Entry::Closed(_)) => Err(TerminalError::SessionClosing { id }),
            Some(Entry::Live(s)) if s.spec.owner != *owner => {
                Err(TerminalError::ForeignSession { id })
            }
            Some(Entry::Live(s)) => Ok(Arc::clone(s)),
        }
    }

    fn reserve(&self, owner: &Owner, name: Option<String>) -> Result<Pending<'_>, TerminalError> {
        let mut registry = self.lock();
        let live: Vec<&Arc<Session>> = registry
            .entries
            .values()
            .filter_map(|e| match e {
                Entry::Live(s) if s.spec.owner == *owner && !s.is_closing() => Some(s),
                Entry::Live(_) | Entry::Closed(_) => None,
            })
            .collect();
        let pending = registry.pending.get(owner).map_or(&[][..], Vec::as_slice);
        if let Some(name) = &name
            && (live.iter().any(|s| s.spec.name.as_ref() == Some(name))
                || pending.iter().any(|n| n.as_ref() == Some(name)))
        {
            return Err(TerminalError::DuplicateName { name: name.clone() });
        }
        if live.len() + pending.len() >= self.config.max_terminals_per_owner {
            return Err(TerminalError::TerminalLimit {
                limit: self.config.max_terminals_per_owner,
            });
        }
        registry
            .pending
            .entry(owner.clone())
            .or_default()
            .push(name.clone());
        Ok(Pending {
            inner: self,
            owner: owner.clone(),
            name,
        })
    }

    fn mark_closed(&self, id: TerminalId, owner: &Owner) {
        let mut registry = self.lock();
        registry.entries.insert(id.0, Entry::Closed(owner.clone()));
        registry.closed_order.push_back(id.0);
        while registry.closed_order.len() > CLOSED_REMEMBERED {
            if let Some(old) = registry.closed_order.pop_front() {
                registry.entries.remove(&old);
            }
        }
    }
}

/// The longest single argument or environment entry (`KEY=VALUE`) the
/// kernel accepts: `MAX_ARG_STRLEN` less the terminating NUL.
const MAX_ARG_BYTES: usize = 128 * 1024 - 1;
/// The most arguments a terminal's command may have.
const MAX_ARGS: usize = 4096;
/// The most extra environment variables a terminal may be given.
const MAX_ENV_VARS: usize = 1024;
/// The most bytes of command and extra environment together (the kernel's
/// own limit for a whole `exec` is larger, but not by much on small stacks).
const MAX_EXEC_BYTES: usize = 1024 * 1024;
/// The longest terminal name, in characters.
const MAX_NAME_CHARS: usize = 64;

fn validate_open(request: &OpenRequest) -> Result<(), TerminalError> {
    if !(MIN_ROWS..=MAX_ROWS).contains(&request.rows) {
        return Err(TerminalError::invalid(
            "rows",
            format!("must be between {MIN_ROWS} and {MAX_ROWS}"),
        ));
    }
    if !(MIN_COLS..=MAX_COLS).contains(&request.cols) {
        return Err(TerminalError::invalid(
            "cols",
            format!("must be between {MIN_COLS} and {MAX_COLS}"),
        ));
    }
    let cells = u32::from(request.rows) * u32::from(request.cols);
    if cells > MAX_CELLS {
        return Err(TerminalError::invalid(
            "rows",
            format!(
                "{} rows × {} cols is {cells} cells, more than the {MAX_CELLS} a terminal may have; \
                 make it smaller (the default is {DEFAULT_ROWS} × {DEFAULT_COLS})",
                request.rows, request.cols
            ),
        ));
    }
    let mut exec_bytes = 0usize;
    if let Some(command) = &request.command {
        if command.first().is_none_or(String::is_empty) {
            return Err(TerminalError::invalid(
                "command",
                "must name a program: [program, args...]",
            ));
        }
        if command.iter().any(|a| a.contains('\0')) {
            return Err(TerminalError::invalid(
                "command",
                "must not contain NUL bytes",
            ));
        }
        if command.len() > MAX_ARGS {
            return Err(TerminalError::invalid(
                "command",
                format!(
                    "{} arguments is more than the {MAX_ARGS} allowed; write a script and run it",
                    command.len()
                ),
            ));
        }
        if let Some((at, arg)) = command
            .iter()
            .enumerate()
            .find(|(_, a)| a.len() > MAX_ARG_BYTES)
        {
            return Err(TerminalError::invalid(
                "command",
                format!(
                    "argument {at} is {} bytes, more than the {MAX_ARG_BYTES} one argument may have; \
                     write it to a file and pass the file's path",
                    arg.len()
                ),
            ));
        }
        exec_bytes += command.iter().map(|a| a.len() + 1).sum::<usize>();
    }
    if request.env.len() > MAX_ENV_VARS {
        return Err(TerminalError::invalid(
            "env",
            format!(
                "{} variables is more than the {MAX_ENV_VARS} allowed",
                request.env.len()
            ),
        ));
    }
    for (key, value) in &request.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(TerminalError::invalid(
                "env",
                format!(
                    "`{}` is not a valid variable name (or its value has a NUL byte)",
                    shorten(key)
                ),
            ));
        }
        let entry = key.len() + 1 + value.len();
        if entry > MAX_ARG_BYTES {
            return Err(TerminalError::invalid(
                "env",
                format!(
                    "`{}` is {entry} bytes with its value, more than the {MAX_ARG_BYTES} one \
                     variable may have; put the value in a file and pass the file's path",
                    shorten(key)
                ),
            ));
        }
        exec_bytes += entry + 1;
    }
    if exec_bytes > MAX_EXEC_BYTES {
        return Err(TerminalError::invalid(
            "env",
            format!(
                "the command and the environment are {exec_bytes} bytes together, more than the \
                 {MAX_EXEC_BYTES} allowed; put large values in files and pass their paths"
            ),
        ));
    }
    if let Some(name) = &request.name
        && (name.trim().is_empty()
            || name.chars().count() > MAX_NAME_CHARS
            || name.chars().any(char::is_control))
    {
        return Err(TerminalError::invalid(
            "name",
            format!("must be 1 to {MAX_NAME_CHARS} characters, without control characters"),
        ));
    }
    if let Some(cwd) = &request.cwd
        && !cwd.is_dir()
    {
        return Err(TerminalError::invalid(
            "cwd",
            format!("`{}` is not an existing directory", cwd.display()),
        ));
    }
    Ok(())
}

/// The start of a client-given string, for an error message.
fn shorten(value: &str) -> String {
    const SHOWN: usize = 64;
    if value.chars().count() <= SHOWN {
        return value.escape_debug().to_string();
    }
    let head: String = value.chars().take(SHOWN).collect();
    format!("{}…", head.escape_debug())
}

/// Compiles an `until` pattern within bounds: its length is checked before
/// compiling, and the compiled program and its lazy DFA are capped.
fn compile_until(pattern: &str) -> Result<regex::Regex, TerminalError> {
    if pattern.len() > MAX_UNTIL_BYTES {
        return Err(TerminalError::invalid(
            "until",
            format!(
                "the pattern is {} bytes, more than the {MAX_UNTIL_BYTES} allowed; match a \
                 shorter, distinctive part of the output",
                pattern.len()
            ),
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| TerminalError::invalid("until", e.to_string()))
}

impl PtyTerminals {
    /// The live session `id`, whoever owns it (for the person's views).
    pub(crate) fn any_session(&self, id: TerminalId) -> Result<Arc<Session>, TerminalError> {
        match self.inner.lock().entries.get(&id.0) {
            Some(Entry::Live(s)) => Ok(Arc::clone(s)),
            Some(Entry::Closed(_)) => Err(TerminalError::SessionClosing { id }),
            None => Err(TerminalError::NoSession { id }),
        }
    }

    /// A service with `config`.
    pub fn new(config: TerminalConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                config,
                registry: Mutex::new(Registry {
                    next_id: 1,
                    ..Registry::default()
                }),
            }),
        }
    }

    /// The service's configuration.
    pub fn config(&self) -> &TerminalConfig {
        &self.inner.config
    }

    async fn open_impl(
        &self,
        owner: &Owner,
        request: OpenRequest,
    ) -> Result<Opened, TerminalError> {
        validate_open(&request)?;
        let inner = &*self.inner;
        let pending = inner.reserve(owner, request.name.clone())?;
        let our_shell = request.command.is_none();
        let argv: Vec<String> = match &request.command {
            Some(command) => command.clone(),
            None => std::iter::once(inner.config.shell.clone())
                .chain(SHELL_ARGS.iter().map(|a| (*a).to_owned()))
                .collect(),
        };
        let cwd = match &request.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        };
        let spawn_failed = |e: std::io::Error| TerminalError::SpawnFailed {
            command: argv[0].clone(),
            reason: e.to_string(),
        };
        let pair = open_pty(
            request.rows,
            request.cols,
            request.pty_dir.as_ref().map(|d| d.0.as_fd()),
        )
        .map_err(spawn_failed)?;
        let nonce = nonce();
        let mut env = base_env();
        if our_shell {
            env.extend(shell_env(&nonce));
        }
        env.extend(request.env.iter().cloned());
        let mut command = process_tree::SessionCommand::new(&argv[0]);
        if let Some(base) = &request.base_env {
            command = command.env_clear().envs(base.iter().cloned());
        }
        let command = command
            .args(&argv[1..])
            .envs(env)
            .current_dir(&cwd)
            .stdin(pair.slave.try_clone().map_err(spawn_failed)?)
            .stdout(pair.slave.try_clone().map_err(spawn_failed)?)
            .stderr(pair.slave);
        // SAFETY: the step is a raw ioctl, async-signal-safe.
        let mut session = unsafe { command.pre_exec(take_controlling_terminal()) };
        if let Some(namespace) = &request.pid_namespace {
            // SAFETY: the entry step is async-signal-safe (its contract).
            session =
                unsafe { session.pid_namespace(namespace.enter.as_ref().map(|s| s.0.clone())) };
        }
        if let Some(step) = &request.pre_exec {
            // SAFETY: the request's step is async-signal-safe (its contract);
            // it runs after TIOCSCTTY, which a sandbox may forbid.
            session = unsafe { session.program_pre_exec(step.0.clone()) };
        }
        let spawned = session.spawn().map_err(spawn_failed)?;
        let sid = spawned.leader.pid();
        let pid = spawned.program as u32;
        let id = {
            let mut registry = inner.lock();
            let id = TerminalId(registry.next_id);
            registry.next_id += 1;
            id
        };
        let spec = SessionSpec {
            id,
            owner: owner.clone(),
            name: request.name.clone(),
            command: argv.clone(),
            cwd,
            pid: pid as i32,
            sid,
            our_shell,
            tty: pair.tty,
            rows: request.rows,
            cols: request.cols,
            result_limit: inner.config.max_result_bytes,
            idle_fallback: inner.config.idle_fallback,
        };
        let session = Session::start(
            spec,
            pair.master,
            spawned.leader,
            &nonce,
            inner.config.scrollback_bytes,
        )
        .map_err(spawn_failed)?;
        // The startup holds the send slot: a send racing it gets SEND_ACTIVE.
        let slot = session.acquire_startup();
        inner
            .lock()
            .entries
            .insert(id.0, Entry::Live(Arc::clone(&session)));
        drop(pending);
        if owner.is_ended() {
            // The owner went away while this was opening (`end_owner` marks
            // it first): its terminals are ended, this one too.
            drop(slot);
            session.close().await;
            inner.mark_closed(id, owner);
            return Err(TerminalError::SessionClosing { id });
        }
        let interrupt = interrupt_for(&session);
        let outcome = run_send(
            Arc::clone(&session),
            slot,
            SendPlan::startup(inner.config.startup_timeout),
            interrupt,
        )
        .await?;
        Ok(Opened {
            id,
            name: request.name,
            pid: sid as u32,
            program_pid: pid,
            status: outcome.status,
            output: outcome.output,
            reason: outcome.reason,
            echo: outcome.echo,
        })
    }

    /// Starts a send (see [`TerminalService::start_send`]).
    pub(crate) fn start_send_impl(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> Result<StartedSend, TerminalError> {
        let session = self.inner.session(owner, id)?;
        let until = match &request.until {
            Some(pattern) => Some(compile_until(pattern)?),
            None => None,
        };
        if request.text.len() > self.inner.config.max_send_bytes {
            return Err(TerminalError::invalid(
                "text",
                format!(
                    "{} bytes is more than the {} allowed; write a file and send a command that reads it",
                    request.text.len(),
                    self.inner.config.max_send_bytes
                ),
            ));
        }
        let slot = session.acquire()?;
        let start_cursor = session.lock().out.ring().end();
        let timeout = request.timeout.clamp(MIN_SEND_TIMEOUT, MAX_SEND_TIMEOUT);
        let plan = SendPlan::new(&request.text, request.submit, until, timeout);
        let interrupt = interrupt_for(&session);
        let settled = Box::pin(run_send(session, slot, plan, Arc::clone(&interrupt)));
        Ok(StartedSend {
            id,
            start_cursor,
            settled,
            interrupt,
        })
    }

    async fn close_impl(
        &self,
        owner: &Owner,
        id: TerminalId,
    ) -> Result<CloseOutcome, TerminalError> {
        let session = match self.inner.session(owner, id) {
            Ok(session) => session,
            Err(TerminalError::SessionClosing { .. }) => {
                return Ok(CloseOutcome {
                    outcome: CloseKind::AlreadyClosing,
                    exit: None,
                    survivors: Vec::new(),
                });
            }
            Err(other) => return Err(other),
        };
        let outcome = session.close().await;
        if outcome.outcome == CloseKind::Closed {
            self.inner.mark_closed(id, owner);
        }
        Ok(outcome)
    }

    async fn end_owner_impl(&self, owner: &Owner) {
        // From now on an open that completes for this owner closes its
        // terminal at once (see `open_impl`).
        owner.end();
        let ids: Vec<TerminalId> = self
            .inner
            .lock()
            .entries
            .values()
            .filter_map(|e| match e {
                Entry::Live(s) if s.spec.owner == *owner => Some(s.spec.id),
                Entry::Live(_) | Entry::Closed(_) => None,
            })
            .collect();
        let closes = ids.into_iter().map(|id| self.close_impl(owner, id));
        let _ = futures::future::join_all(closes).await;
    }

    fn list_impl(&self, owner: &Owner) -> Vec<TerminalInfo> {
        let sessions: Vec<Arc<Session>> = self
            .inner
            .lock()
            .entries
            .values()
            .filter_map(|e| match e {
                Entry::Live(s) if s.spec.owner == *owner => Some(Arc::clone(s)),
                Entry::Live(_) | Entry::Closed(_) => None,
            })
            .collect();
        sessions
            .iter()
            .map(|s| {
                let status = s.status(&s.lock());
                TerminalInfo {
                    id: s.spec.id,
                    name: s.spec.name.clone(),
                    pid: s.spec.sid as u32,
                    command: s.spec.command.clone(),
                    cwd: s.spec.cwd.clone(),
                    status,
                    active_send: s.is_busy(),
                    created_at: s.created_at,
                }
            })
            .collect()
    }

    fn read_impl(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: ReadRequest,
    ) -> Result<ReadOutcome, TerminalError> {
        let session = self.inner.session(owner, id)?;
        match request {
            ReadRequest::Stream { since, max_bytes } => session
                .read_stream(since, self.stream_limit(max_bytes))
                .map(ReadOutcome::Stream),
            ReadRequest::Screen => Ok(ReadOutcome::Screen(session.read_screen())),
        }
    }

    fn stream_limit(&self, max_bytes: Option<usize>) -> usize {
        max_bytes
            .unwrap_or(self.inner.config.max_result_bytes)
            .clamp(64, self.inner.config.scrollback_bytes.max(64))
    }

    fn signal_impl(
        &self,
        owner: &Owner,
        id: TerminalId,
        signal: TerminalSignal,
    ) -> Result<SignalOutcome, TerminalError> {
        self.inner.session(owner, id)?.signal(signal)
    }
}

impl TerminalService for PtyTerminals {
    fn open<'a>(
        &'a self,
        owner: &'a Owner,
        request: OpenRequest,
    ) -> BoxFuture<'a, Result<Opened, TerminalError>> {
        Box::pin(self.open_impl(owner, request))
    }

    fn start_send(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> Result<StartedSend, TerminalError> {
        self.start_send_impl(owner, id, request)
    }

    fn start_background_send(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> Result<BackgroundSend, TerminalError> {
        self.start_background(owner, id, request)
    }

    fn read<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        request: ReadRequest,
    ) -> BoxFuture<'a, Result<ReadOutcome, TerminalError>> {
        Box::pin(std::future::ready(self.read_impl(owner, id, request)))
    }

    fn read_wait<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        since: u64,
        max_bytes: Option<usize>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<StreamChunk, TerminalError>> {
        Box::pin(async move {
            let session = self.inner.session(owner, id)?;
            let max = self.stream_limit(max_bytes);
            session.read_stream_wait(since, max, wait).await
        })
    }

    fn signal<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        signal: TerminalSignal,
    ) -> BoxFuture<'a, Result<SignalOutcome, TerminalError>> {
        Box::pin(std::future::ready(self.signal_impl(owner, id, signal)))
    }

    fn close<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
    ) -> BoxFuture<'a, Result<CloseOutcome, TerminalError>> {
        Box::pin(self.close_impl(owner, id))
    }

    fn list<'a>(&'a self, owner: &'a Owner) -> BoxFuture<'a, Vec<TerminalInfo>> {
        Box::pin(std::future::ready(self.list_impl(owner)))
    }

    fn end_owner<'a>(&'a self, owner: &'a Owner) -> BoxFuture<'a, ()> {
        Box::pin(self.end_owner_impl(owner))
    }
}
