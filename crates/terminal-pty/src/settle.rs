//! The settle ladder of a send: write the text, then wait for the first
//! rung that holds (output quiet, the program waiting for input, its
//! exit, the timeout) and render what came out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use regex::Regex;
use terminal_seam::{InputCut, LineCut, SendOutcome, SettleReason, TerminalError};

use crate::canon;
use crate::echo::{sent_lines, strip_echo};
use crate::holders::{Holder, Mark, holders, remote_peer, waits_on_another_process};
use crate::inner::{self, Verdict};
use crate::interrupt::{Interrupt, SettledOnDrop};
use crate::output::Marker;
use crate::probe::{
    Tty, WaitState, group_members, switches_and_threads, thread_ids, thread_state, wait_set,
    wait_state,
};
use crate::session::{Session, SlotGuard, switch_counts};

/// How long the watch spins (yielding) after a write or new output.
const TIGHT_PHASE: Duration = Duration::from_millis(2);

/// For how long after a write new output renews the tight phase: a
/// program that answers and then blocks for more input (a REPL printing
/// `2` then `>>> `) is caught at once even when it was scheduled late,
/// while a command that prints for longer is watched by backed-off probes.
const TIGHT_AFTER_OUTPUT_UNTIL: Duration = Duration::from_millis(50);

/// The longest a watch spins before its task goes back to the runtime.
const SPIN_SLICE: Duration = Duration::from_millis(2);

/// The pause of a watch that would spin while as many watches as may
/// spin at once already do ([`SpinTurn`]): it looks again after it, or
/// at once when output comes.
const SPIN_TURN_WAIT: Duration = Duration::from_millis(1);

/// The longest pause between two input-wait probes.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// A fresh input wait must hold this long, with no new output, to count:
/// output the program wrote just before blocking may still be in flight
/// inside the kernel.
const INPUT_WAIT_CONFIRM: Duration = Duration::from_micros(150);

/// A wait on the terminal with a time limit this short is the program
/// waiting a moment for more input of its own accord — the rest of an
/// escape sequence after `Esc` (vim: 100 ms), the answer to a terminal
/// query — and it will go on by itself when the time runs out. It counts
/// as an input wait only once a whole limit passed with no output: a
/// program that polls its input in short waits and prints nothing is
/// waiting for input all the same. Longer limits are ordinary waits:
/// prompt_toolkit (ipython) waits at its prompt in 500 ms rounds.
const SHORT_TIMED_WAIT: Duration = Duration::from_millis(250);

/// Added to a short wait's limit before it counts: the time the program
/// needs to print once its wait ran out.
const TIMED_WAIT_MARGIN: Duration = Duration::from_millis(25);

/// How long a wait seen only from outside must hold, with no output and
/// the process not woken, to count: a set-uid program's password prompt
/// (`sudo`, `su` run by a regular user), whose system call is closed to
/// us, seen asleep on the terminal while the terminal is in canonical
/// mode with echo off (see `Session::hidden_prompt`).
/// Longer than [`INPUT_WAIT_CONFIRM`]: what it sleeps in is not seen, and
/// a program that turned echo off may sleep a moment before it reads.
const INFERRED_WAIT_HOLD: Duration = Duration::from_millis(100);

/// How often, at most, the whole foreground group is scanned from /proc
/// (the leader is probed on every step); backing off to
/// [`MAX_GROUP_SCAN_PAUSE`] as the command runs on.
const GROUP_SCAN_EVERY: Duration = Duration::from_millis(50);

/// The longest pause between two scans of the foreground group.
const MAX_GROUP_SCAN_PAUSE: Duration = Duration::from_secs(1);

/// When, after the write, the processes outside the foreground group
/// that hold the terminal are first looked for (a multiplexer's server,
/// a dialog a daemon started), and the shortest pause between two such
/// scans, backing off to [`MAX_HOLDER_SCAN_PAUSE`]. Processes found once
/// are probed on every step after, and counted before the next write.
const HOLDER_SCAN_AFTER: Duration = Duration::from_millis(20);
const HOLDER_SCAN_EVERY: Duration = Duration::from_millis(100);
const MAX_HOLDER_SCAN_PAUSE: Duration = Duration::from_secs(2);

/// A wait of a process that keeps a connection to another process
/// (ssh's link, a debugger's inspector socket, a separate evaluator) is
/// provisional: the answer to what was sent may still be on its way. It
/// counts once the output stayed quiet for a hold adapted to the quiet
/// stretches seen before answers in this terminal: this many times the
/// longest of the latest, between [`REMOTE_HOLD_MIN`] and
/// [`REMOTE_HOLD_MAX`]; [`REMOTE_HOLD_FIRST`] before any was seen.
const REMOTE_HOLD_FACTOR: u32 = 2;
const REMOTE_HOLD_MIN: Duration = Duration::from_millis(150);
const REMOTE_HOLD_MAX: Duration = Duration::from_secs(3);
const REMOTE_HOLD_FIRST: Duration = Duration::from_millis(800);

/// How often, at most, the terminals inside a multiplexer are looked at
/// while its wait is held (see `inner`): a look walks the server's
/// descendants in /proc.
const INNER_LOOK_EVERY: Duration = Duration::from_millis(5);

/// How long a wait of our shell must hold when the shell took the
/// foreground back since the write (a job ended): long enough for the
/// prompt it is about to print, whose marker settles the send as
/// `prompt` with the job's status. Readline may look for type-ahead on
/// the terminal before it draws the prompt; a builtin `read` run after
/// the job (`cmd; read x`) waits this much longer to count.
const SHELL_BACK_HOLD: Duration = Duration::from_millis(50);

/// How long a wait's confirmation is put off while another thread of the
/// waiting process, or another process of the foreground job, runs (a
/// runtime still starting up on its other threads, a debugger's target
/// still loading): after that, the wait counts all the same (a pipe's
/// producer may compute for as long as it likes while its pager waits
/// for keys).
const BUSY_LIMIT: Duration = Duration::from_secs(2);

/// After an interrupt, how long a send waits for a natural settle.
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);

/// How much recent output an `until` pattern sees once the head is full.
const PATTERN_WINDOW: usize = 16 * 1024;

/// A send ready to run.
pub(crate) struct SendPlan {
    /// The bytes to write; `None` for the startup of a new terminal.
    pub bytes: Option<Vec<u8>>,
    /// The sent text as echoed lines.
    pub lines: Vec<String>,
    pub until: Option<Regex>,
    pub timeout: Duration,
}

impl SendPlan {
    /// The plan for a model's send.
    pub fn new(text: &str, submit: bool, until: Option<Regex>, timeout: Duration) -> Self {
        let mut bytes = text.as_bytes().to_vec();
        if submit {
            bytes.push(b'\r');
        }
        Self {
            bytes: Some(bytes),
            lines: sent_lines(text, submit),
            until,
            timeout,
        }
    }

    /// The plan for waiting out a new terminal's startup.
    pub fn startup(timeout: Duration) -> Self {
        Self {
            bytes: None,
            lines: Vec::new(),
            until: None,
            timeout,
        }
    }
}

/// Candidate for an input-wait settle, awaiting confirmation.
#[derive(Clone, Copy, PartialEq, Eq)]
struct WaitSeen {
    /// The waiting process.
    pid: i32,
    /// The waiting thread (the process's id for its main thread).
    tid: i32,
    switches: Option<u64>,
    since: Instant,
    generation: u64,
    /// How long the wait must hold, from `since`, with no new output.
    hold: Duration,
    /// The time limit of a short timed wait (see [`SHORT_TIMED_WAIT`]).
    timed: Option<Duration>,
    /// Seen only from outside (see [`INFERRED_WAIT_HOLD`]).
    inferred: bool,
    /// Provisional: the process keeps a connection to another process
    /// (see [`REMOTE_HOLD_FACTOR`]).
    remote: bool,
    /// Whether the checks made once the hold first ran out (a connection
    /// to another process, see [`Watch::confirm`]) were made.
    checked: bool,
    /// When a wait of this process was first seen with this output: the
    /// hold restarts while the job is busy, for [`BUSY_LIMIT`] at most.
    first: Instant,
    /// How many threads the process has (0: unknown).
    threads: usize,
    /// Whether the wait is a `read` of the terminal alone.
    alone: bool,
}

/// A thread found waiting on the terminal, fresh since the write.
#[derive(Clone, Copy)]
struct Found {
    pid: i32,
    tid: i32,
    switches: Option<u64>,
    limit: Option<Duration>,
    inferred: bool,
    /// Our shell, back in the foreground since the write: a job ended and
    /// the shell is about to print its prompt (see [`SHELL_BACK_HOLD`]).
    shell_back: bool,
    /// How many threads the process has (0: unknown).
    threads: usize,
    /// Whether the wait is a `read` of the terminal alone.
    alone: bool,
}

impl WaitSeen {
    /// A wait just found; `remote_hold` is the hold of a provisional one
    /// (`None`: not provisional).
    fn new(found: Found, remote_hold: Option<Duration>, now: Instant, generation: u64) -> Self {
        let timed = found.limit.filter(|l| *l <= SHORT_TIMED_WAIT);
        let hold = match timed {
            Some(limit) => limit + TIMED_WAIT_MARGIN,
            None if found.inferred => INFERRED_WAIT_HOLD,
            None if found.shell_back => SHELL_BACK_HOLD,
            None => INPUT_WAIT_CONFIRM,
        };
        Self {
            pid: found.pid,
            tid: found.tid,
            switches: found.switches,
            since: now,
            generation,
            hold: remote_hold.map_or(hold, |r| r.max(hold)),
            timed,
            inferred: found.inferred,
            remote: remote_hold.is_some(),
            checked: false,
            first: now,
            threads: found.threads,
            alone: found.alone,
        }
    }
}

/// Writes the text and waits for the first rung of the settle ladder.
pub(crate) async fn run_send(
    session: Arc<Session>,
    slot: SlotGuard,
    plan: SendPlan,
    interrupt: Arc<Interrupt>,
) -> Result<SendOutcome, TerminalError> {
    let _settled = SettledOnDrop(Arc::clone(&interrupt));
    let started = Instant::now();
    let deadline = started + plan.timeout;
    let tty = session.spec.tty;
    let fresh_required = plan.bytes.is_some();

    // Baseline before the write: the foreground group, the
    // context-switch counts of its leader's threads and of every thread
    // of the processes earlier sends saw holding the terminal, and the
    // moment (a process or thread born after it waits anew).
    let fg_at_write = session.foreground_pgid();
    let mut baseline: HashMap<i32, Option<u64>> = HashMap::new();
    if let Some(fg) = fg_at_write {
        // A program may read the terminal from another thread (see
        // `probe::wait_state`): their counts too, before the write.
        baseline = switch_counts(fg);
    }
    // The terminals inside a multiplexer among them (see `inner`).
    let mut inner = inner::Baseline::default();
    for holder in session.known_holders(fg_at_write) {
        baseline.extend(switch_counts(holder.pid));
        inner.add(holder.pid, &tty);
    }
    let mark = Mark::now();
    {
        let mut st = session.lock();
        session.drain(&mut st);
        // A new terminal's startup continues the capture its session
        // began with (`Session::start`); a send begins its own.
        if plan.bytes.is_some() || st.out.capture().is_none() {
            st.out.begin_capture();
        }
    }
    let (input_cut, line_cut) = match &plan.bytes {
        Some(bytes) => write_text(&session, bytes, deadline, &mut baseline).await,
        None => (None, None),
    };

    let mut watch = Watch {
        session: &session,
        plan: &plan,
        interrupt: &interrupt,
        tty: &tty,
        deadline,
        fresh_required,
        fg_at_write,
        baseline,
        mark,
        write_done: Instant::now(),
        last_generation: u64::MAX,
        pattern_generation: u64::MAX,
        activity: Instant::now(),
        unobservable: false,
        wait_seen: None,
        last_probe: None,
        last_group_scan: None,
        group: Vec::new(),
        holders: session
            .known_holders(fg_at_write)
            .iter()
            .map(|h| h.pid)
            .collect(),
        last_holder_scan: None,
        remote: HashMap::new(),
        gap: Duration::ZERO,
        answered: HashMap::new(),
        inner,
        multiplexer: false,
    };
    // Spinning (probing without a pause) blocks the thread: on a
    // multi-thread runtime it is done in `block_in_place`, so the worker's
    // other tasks move to another thread meanwhile.
    let can_block = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);

    let (reason, exit_code) = loop {
        let notified = session.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let pause = match watch.step(Instant::now()) {
            Step::Settled(reason, code) => break (reason, code),
            Step::Spin if can_block => match SpinTurn::take() {
                Some(turn) => {
                    let spun = tokio::task::block_in_place(|| watch.spin());
                    drop(turn);
                    match spun {
                        Some((reason, code)) => break (reason, code),
                        // Back to the runtime between two slices, so a
                        // caller that gave up on the send (or a
                        // cancellation) is seen.
                        None => {
                            tokio::task::yield_now().await;
                            continue;
                        }
                    }
                }
                None => SPIN_TURN_WAIT.min(deadline.saturating_duration_since(Instant::now())),
            },
            Step::Spin => {
                std::thread::yield_now();
                tokio::task::yield_now().await;
                continue;
            }
            Step::Pause(pause) => pause,
        };
        let _ = tokio::time::timeout(pause, notified).await;
    };

    let mut outcome = render(&session, &plan, reason, exit_code, started);
    outcome.input_cut = input_cut;
    outcome.line_cut = line_cut;
    if reason == SettleReason::InputWait {
        outcome.echo = session.echoes();
        if let Some(seen) = watch.wait_seen {
            if outcome.echo == Some(true) && session.secret_dialog(seen.pid) {
                outcome.echo = Some(false);
            }
            if seen.remote {
                session.note_remote_gap(watch.gap);
            }
        }
    }
    let fg = session.foreground_pgid();
    session.remember_holders(
        watch
            .group
            .iter()
            .chain(&watch.holders)
            .filter(|pid| Some(**pid) != fg)
            .filter_map(|pid| Holder::of(*pid)),
    );
    drop(slot);
    Ok(outcome)
}

/// The right to spin: held by at most one watch fewer than the machine
/// has cores (at least one). Spinning buys a send its quickest settle
/// while a core is free; many watches spinning at once (many agents'
/// sends on one daemon) would take the cores from the very programs they
/// wait for, so the others look again after [`SPIN_TURN_WAIT`], or at
/// once when output comes.
struct SpinTurn;

/// How many watches spin now.
static SPINNING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl SpinTurn {
    /// A turn, when one is free.
    fn take() -> Option<SpinTurn> {
        static MOST: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let most = *MOST.get_or_init(|| {
            std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1))
                .max(1)
        });
        SPINNING
            .fetch_update(
                std::sync::atomic::Ordering::AcqRel,
                std::sync::atomic::Ordering::Acquire,
                |n| (n < most).then_some(n + 1),
            )
            .ok()
            .map(|_| SpinTurn)
    }
}

impl Drop for SpinTurn {
    fn drop(&mut self) {
        SPINNING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Writes a send's text: whole, or a line longer than a canonical-mode
/// terminal keeps in pieces (or reported; see `canon`). `baseline` holds
/// the counts taken before the write; after pieces, those taken before
/// the last one. Returns what was cut, if anything.
async fn write_text(
    session: &Session,
    bytes: &[u8],
    deadline: Instant,
    baseline: &mut HashMap<i32, Option<u64>>,
) -> (Option<InputCut>, Option<LineCut>) {
    let tty = session.spec.tty;
    let mut line_cut = None;
    // A line longer than a canonical-mode terminal keeps is passed on
    // in pieces, or reported (see `canon`).
    let long = bytes.len() > canon::PIECE;
    let pieces = match long
        .then(|| session.modes())
        .flatten()
        .map(|m| canon::plan(bytes, &m))
    {
        Some(canon::Plan::Pieces(pieces)) => Some(pieces),
        Some(canon::Plan::Cut(cut)) => {
            line_cut = Some(cut);
            None
        }
        Some(canon::Plan::AsIs) | None => None,
    };
    let pieces: Vec<&[u8]> = match &pieces {
        Some(pieces) => pieces.iter().map(Vec::as_slice).collect(),
        None => vec![bytes],
    };
    let mut write = InputWrite {
        session,
        total: pieces.iter().map(|p| p.len()).sum(),
        written: 0,
        done: false,
    };
    // A program that is not reading its input fills the terminal's
    // buffer, and the write waits; it is bounded by the send's timeout.
    // A failed write means the terminal is gone: the ladder sees `exit`.
    let mut before = HashMap::new();
    for (i, piece) in pieces.iter().enumerate() {
        if i > 0 && !session.piece_taken(&tty, &before, deadline).await {
            break;
        }
        if i == 0 {
            before.clone_from(baseline);
        } else if let Some(fg) = session.foreground_pgid() {
            // The counts before this write: for the next piece, and
            // for the watch after the last one (a wait between two
            // pieces is not new since the last write).
            before = switch_counts(fg);
            baseline.clone_from(&before);
        }
        let mut done = 0;
        let wrote =
            tokio::time::timeout_at(deadline.into(), session.write_input(piece, &mut done)).await;
        write.written += done;
        if !matches!(wrote, Ok(Ok(()))) {
            break;
        }
    }
    (write.finish(), line_cut)
}

/// What the watch does next.
enum Step {
    Settled(SettleReason, Option<i32>),
    /// Probe again at once (the tight phase, or a wait being confirmed).
    Spin,
    /// Wait this long for output before the next probe.
    Pause(Duration),
}

/// A send's watch over its program, one step at a time (the settle
/// ladder, in order).
struct Watch<'a> {
    session: &'a Session,
    plan: &'a SendPlan,
    interrupt: &'a Interrupt,
    tty: &'a Tty,
    deadline: Instant,
    fresh_required: bool,
    fg_at_write: Option<i32>,
    baseline: HashMap<i32, Option<u64>>,
    /// The moment before the write: a thread born since waits anew.
    mark: Mark,
    write_done: Instant,
    last_generation: u64,
    pattern_generation: u64,
    activity: Instant,
    unobservable: bool,
    wait_seen: Option<WaitSeen>,
    last_probe: Option<Instant>,
    last_group_scan: Option<Instant>,
    group: Vec<i32>,
    /// Processes outside the foreground group that hold the terminal.
    holders: Vec<i32>,
    last_holder_scan: Option<Instant>,
    /// Whether each waiting process seen keeps a connection to another.
    remote: HashMap<i32, bool>,
    /// The longest quiet stretch before output since the write.
    gap: Duration,
    /// A copy of the session's `answered`.
    answered: HashMap<i32, Option<u64>>,
    /// The terminals inside the multiplexers known before the write.
    inner: inner::Baseline,
    /// Whether the wait held is a multiplexer's (its inner terminals
    /// were looked at).
    multiplexer: bool,
}

impl Watch<'_> {
    /// Steps with no pause until the watch settles or wants one.
    ///
    /// The thread gives its core away between the steps (`sched_yield`),
    /// not only its time: the program just woken by the write is often
    /// queued on this very core (the scheduler puts a wakee near its
    /// waker), and a program that waited there for the tight phase to end
    /// was the whole settle tail. Spinning as a task that yields to the
    /// runtime did the same harm another way: each return woke an idle
    /// worker to steal the task, and workers taking turns on the core kept
    /// the program from it. Not enough when every CPU is busy: there a
    /// trace showed the program queued a whole slice behind the spin, its
    /// `sched_yield`s notwithstanding (docs/subsystems/terminal.md,
    /// Throughput).
    ///
    /// Returns after at most [`SPIN_SLICE`] all the same (`None`, as when
    /// a pause is due), so the task is polled by its runtime now and then.
    fn spin(&mut self) -> Option<(SettleReason, Option<i32>)> {
        let began = Instant::now();
        loop {
            std::thread::yield_now();
            let now = Instant::now();
            match self.step(now) {
                Step::Settled(reason, code) => return Some((reason, code)),
                Step::Spin if now - began < SPIN_SLICE => {}
                Step::Spin | Step::Pause(_) => return None,
            }
        }
    }

    /// The tight phase: the first moments after the write, renewed by
    /// output for a while.
    fn tight(&self, now: Instant) -> bool {
        let since_write = now - self.write_done;
        since_write < TIGHT_PHASE
            || (since_write < TIGHT_AFTER_OUTPUT_UNTIL && now - self.activity < TIGHT_PHASE)
    }

    /// One step of the ladder: the rungs in order, the first that holds
    /// settles the send.
    // Long on purpose: the rungs are tried in the order the ladder defines
    // and share what this step read (output, the probe, the clock); the
    // order is the design, and it reads best in one place.
    fn step(&mut self, now: Instant) -> Step {
        let session = self.session;
        let plan = self.plan;
        // Right after the write, or while a wait is being confirmed, the
        // watch reads the terminal itself rather than wait for the reader
        // task to be scheduled; later the reader's notifications suffice.
        let eager = self.wait_seen.is_some() || self.tight(now);
        let (generation, marker, exit, pattern_hit) = {
            let mut st = session.lock();
            if eager {
                session.drain(&mut st);
            }
            let generation = st.out.generation;
            let marker: Option<Marker> =
                st.out.capture().and_then(|c| c.last_marker).map(|(_, m)| m);
            let mut hit = false;
            if let (Some(re), Some(capture)) = (&plan.until, st.out.capture())
                && generation != self.pattern_generation
            {
                self.pattern_generation = generation;
                hit = if capture.is_whole() {
                    re.is_match(&strip_echo(&capture.head, &plan.lines).0)
                } else {
                    re.is_match(&capture.tail_text(PATTERN_WINDOW))
                };
            }
            if st.answered != self.answered {
                self.answered.clone_from(&st.answered);
            }
            (generation, marker, st.exit, hit)
        };
        if generation != self.last_generation {
            if self.last_generation != u64::MAX {
                self.gap = self.gap.max(now - self.activity);
            }
            self.last_generation = generation;
            self.activity = now;
        }

        // 1. prompt: our marker came back and the shell is reading again.
        if let Some(marker) = marker
            && session.spec.our_shell
        {
            match wait_state(session.spec.pid, self.tty) {
                WaitState::OnTerminal { .. } | WaitState::Unobservable | WaitState::Gone => {
                    return Step::Settled(SettleReason::Prompt, Some(marker.status));
                }
                WaitState::Other => {}
            }
        }
        // 2. the `until` pattern.
        if pattern_hit {
            return Step::Settled(SettleReason::Pattern, None);
        }
        // 3. exit.
        if let Some(exit) = exit {
            return Step::Settled(SettleReason::Exit, exit.code);
        }
        // 4. input wait, fresh since the write. The leader of the
        // foreground group is probed on every step; the whole group is
        // scanned from /proc only after the tight phase, now and then.
        // (Tight again: output this step may have renewed it.)
        let since_write = now - self.write_done;
        let tight = self.tight(now);
        let probe_due = self.wait_seen.is_some()
            || tight
            || self
                .last_probe
                .is_none_or(|t| now - t >= probe_pause(now - self.activity));
        if probe_due {
            self.last_probe = Some(now);
            let found = self.find_wait(now, since_write);
            match (found, self.wait_seen.as_mut()) {
                // The same wait, still with no output: confirmed once it
                // held long enough. A program waiting in short timed
                // waits is followed from one to the next (its switches
                // move each time); a longer one starts the hold again.
                (Some(found), Some(seen))
                    if seen.tid == found.tid
                        && seen.inferred == found.inferred
                        && seen.generation == generation
                        && (seen.switches == found.switches
                            || seen.remote
                            || (seen.timed.is_some()
                                && found.limit.is_some_and(|l| l <= SHORT_TIMED_WAIT))) =>
                {
                    match (seen.timed, found.limit) {
                        (Some(held), Some(new)) if new > held => {
                            let remote_hold = seen.remote.then_some(seen.hold);
                            let first = seen.first;
                            *seen = WaitSeen::new(found, remote_hold, now, generation);
                            seen.first = first;
                        }
                        _ => {
                            // A multiplexer's provisional wait ends as
                            // soon as its windows answered (see `inner`);
                            // what they say is looked at once a step, and
                            // the confirmation takes it from here.
                            let mut seen_now = *seen;
                            let inside = (seen_now.remote
                                && now - seen_now.since >= INPUT_WAIT_CONFIRM)
                                .then(|| self.inner_verdict(seen_now.pid));
                            if inside == Some(Some(Verdict::Answered))
                                || now - seen_now.since >= seen_now.hold
                            {
                                let confirmed = self.confirm(&mut seen_now, now, inside);
                                if confirmed {
                                    return Step::Settled(SettleReason::InputWait, None);
                                }
                                if let Some(seen) = self.wait_seen.as_mut() {
                                    *seen = seen_now;
                                }
                            }
                            if let Some(seen) = self.wait_seen.as_mut() {
                                seen.switches = found.switches;
                            }
                        }
                    }
                }
                (Some(found), _) => {
                    let remote_hold = self.remote_hold(found.pid, None);
                    self.wait_seen = Some(WaitSeen::new(found, remote_hold, now, generation));
                }
                // Between two short timed waits of a program that prints
                // nothing: still the same quiet stretch.
                (None, Some(seen)) if seen.timed.is_some() && seen.generation == generation => {}
                (None, _) => self.wait_seen = None,
            }
        }
        // 5. idle, only where waits cannot be observed.
        if self.unobservable
            && self.wait_seen.is_none()
            && now - self.activity >= session.spec.idle_fallback
        {
            return Step::Settled(SettleReason::Idle, None);
        }
        // 6. interrupted and nothing answered; 7. timeout.
        self.interrupt.follow(session);
        if self
            .interrupt
            .since()
            .is_some_and(|t| now - t >= INTERRUPT_GRACE)
            || now >= self.deadline
        {
            return Step::Settled(SettleReason::Timeout, None);
        }
        match self.wait_seen {
            // Confirming a wait: spin, the answer is a moment away.
            Some(seen) if seen.hold <= INPUT_WAIT_CONFIRM => return Step::Spin,
            // A short timed wait, one seen from outside, or a provisional
            // one: look again as its hold runs out.
            Some(seen) if !tight => {
                let left = (seen.since + seen.hold).saturating_duration_since(now);
                let most = if seen.remote && !self.multiplexer {
                    MAX_PAUSE
                } else if seen.remote {
                    INNER_LOOK_EVERY
                } else {
                    Duration::from_millis(5)
                };
                return Step::Pause(
                    left.clamp(Duration::from_micros(200), most)
                        .min(self.deadline.saturating_duration_since(now)),
                );
            }
            _ if tight => return Step::Spin,
            _ => {}
        }
        Step::Pause(
            probe_pause(now - self.activity).min(self.deadline.saturating_duration_since(now)),
        )
    }
}

impl Watch<'_> {
    /// Rung 4's search: a thread of a process that holds the terminal,
    /// blocked reading it, in a wait fresh since the write. The leader of
    /// the foreground group first (probed on every step), then the other
    /// members (the group is scanned from /proc after the tight phase, now
    /// and then), then the processes outside the group that hold the
    /// terminal (known from earlier sends, or found by a scan of /proc
    /// once the command ran a while with no wait found).
    fn find_wait(&mut self, now: Instant, since_write: Duration) -> Option<Found> {
        let session = self.session;
        let fg = session.foreground_pgid()?;
        if since_write >= TIGHT_PHASE
            && self.last_group_scan.is_none_or(|t| {
                now - t >= (since_write / 4).clamp(GROUP_SCAN_EVERY, MAX_GROUP_SCAN_PAUSE)
            })
        {
            self.group = group_members(session.spec.sid, fg);
            self.last_group_scan = Some(now);
        }
        let others = self.group.iter().copied().filter(|p| *p != fg);
        let outside = self
            .holders
            .iter()
            .copied()
            .filter(|p| *p != fg && !self.group.contains(p));
        let candidates: Vec<i32> = std::iter::once(fg).chain(others).chain(outside).collect();
        if let Some(found) = candidates.into_iter().find_map(|pid| self.probe(pid, fg)) {
            return Some(found);
        }
        if since_write >= HOLDER_SCAN_AFTER
            && self.last_holder_scan.is_none_or(|t| {
                now - t >= (since_write / 2).clamp(HOLDER_SCAN_EVERY, MAX_HOLDER_SCAN_PAUSE)
            })
        {
            self.last_holder_scan = Some(now);
            let fresh: Vec<i32> = holders(self.tty, session.spec.sid, session.terminal_session())
                .into_iter()
                .map(|h| h.pid)
                .filter(|p| !self.holders.contains(p))
                .collect();
            self.holders.extend(&fresh);
            return fresh.into_iter().find_map(|pid| self.probe(pid, fg));
        }
        None
    }

    /// Probes process `pid` (`fg`: the foreground group): its thread
    /// waiting on the terminal, when the wait is fresh since the write.
    fn probe(&mut self, pid: i32, fg: i32) -> Option<Found> {
        let (state, inferred) = match wait_state(pid, self.tty) {
            WaitState::Unobservable => {
                self.unobservable = true;
                // A set-uid program's password prompt: asleep on the
                // terminal, canonical with echo off.
                if self.session.hidden_prompt(pid) {
                    let wait = WaitState::OnTerminal {
                        tid: pid,
                        limit: None,
                        alone: false,
                    };
                    (wait, true)
                } else {
                    (WaitState::Unobservable, false)
                }
            }
            state @ (WaitState::OnTerminal { .. } | WaitState::Other | WaitState::Gone) => {
                (state, false)
            }
        };
        let WaitState::OnTerminal { tid, limit, alone } = state else {
            return None;
        };
        let (switches, threads) = switches_and_threads(tid);
        // Not woken since the terminal answered its query: it has the
        // answer still to read.
        if self.answered.get(&tid) == Some(&switches) {
            return None;
        }
        // Fresh: a new foreground job, a thread woken since the counts
        // taken before the write, or one born since the write. A thread
        // first seen now that existed before (no count of it was taken)
        // counts once it wakes.
        let fresh = !self.fresh_required
            || Some(fg) != self.fg_at_write
            || match self.baseline.get(&tid) {
                Some(before) => *before != switches,
                None if self.mark.born_after(tid) => true,
                None => {
                    self.baseline.insert(tid, switches);
                    false
                }
            };
        let shell_back = self.session.spec.our_shell
            && pid == self.session.spec.pid
            && Some(fg) != self.fg_at_write;
        fresh.then_some(Found {
            pid,
            tid,
            switches,
            limit,
            inferred,
            shell_back,
            threads,
            alone,
        })
    }

    /// Whether a wait whose hold ran out counts (else its hold starts
    /// again, or is lengthened):
    ///
    /// * the program read what was sent (else it was busy, or
    ///   descheduled, when it looked like it waited);
    /// * once: a process that keeps a connection to another process waits
    ///   provisionally, for the longer hold of an answer on its way —
    ///   unless it is a multiplexer whose windows answered, and never
    ///   while one of them is busy (see `inner`);
    /// * no other thread of the process, and no other process of the
    ///   foreground job, is running (for [`BUSY_LIMIT`] at most).
    ///
    /// `inside`: the verdict of the multiplexer's windows when the step
    /// already looked (`None`: not looked at yet).
    fn confirm(
        &mut self,
        seen: &mut WaitSeen,
        now: Instant,
        inside: Option<Option<Verdict>>,
    ) -> bool {
        if self.session.unread_input().is_some_and(|n| n > 0) {
            seen.since = now;
            return false;
        }
        // A process with one thread (as its status said) is listed
        // without a look at /proc.
        let threads = if seen.threads == 1 {
            vec![seen.tid]
        } else {
            thread_ids(seen.pid)
        };
        let mut now_provisional = false;
        if !seen.checked {
            seen.checked = true;
            if !seen.remote
                && let Some(hold) =
                    self.remote_hold(seen.pid, Some((seen.tid, seen.alone, threads.len())))
            {
                seen.remote = true;
                seen.hold = seen.hold.max(hold);
                now_provisional = true;
            }
        }
        // A provisional wait of a multiplexer: its windows say whether the
        // answer is complete (see `inner`); busy there, the wait holds on,
        // however long; answered there, it needs no hold.
        if seen.remote {
            let verdict = match inside {
                Some(verdict) => verdict,
                None => self.inner_verdict(seen.pid),
            };
            match verdict {
                Some(Verdict::Busy) => {
                    seen.since = now;
                    seen.hold = seen.hold.max(INNER_LOOK_EVERY);
                    return false;
                }
                Some(Verdict::Answered) => {}
                Some(Verdict::Untouched | Verdict::Relaying) | None if now_provisional => {
                    return false;
                }
                Some(Verdict::Untouched | Verdict::Relaying) | None => {}
            }
        }
        if now - seen.first < BUSY_LIMIT && self.job_busy(seen.pid, seen.tid, &threads) {
            seen.since = now;
            return false;
        }
        true
    }

    /// What the terminals inside process `pid` say of the send, when it is
    /// a multiplexer (see `inner`).
    fn inner_verdict(&mut self, pid: i32) -> Option<Verdict> {
        let verdict = self.inner.verdict(pid, self.tty);
        self.multiplexer = verdict.is_some();
        verdict
    }

    /// Whether a thread of process `pid` other than `tid`, or a thread of
    /// another process of the foreground job, is running (or in an
    /// uninterruptible wait, as on the disk).
    /// (`threads`: those of `pid`, listed by the caller.)
    fn job_busy(&self, pid: i32, tid: i32, threads: &[i32]) -> bool {
        let running = |p: i32, t: i32| t != tid && matches!(thread_state(p, t), Some('R' | 'D'));
        threads.iter().any(|t| running(pid, *t))
            || self
                .group
                .iter()
                .filter(|p| **p != pid)
                .any(|p| thread_ids(*p).into_iter().any(|t| running(*p, t)))
    }

    /// The hold of a wait of process `pid` when it is provisional, else
    /// `None`. Provisional: the waiting thread `tid` waits, beside the
    /// terminal, on a pipe or socket to another process (see
    /// `holders::waits_on_another_process`), or the process has other
    /// threads and keeps an established TCP connection (another thread
    /// may wait on it: jshell's link to its evaluator). Looked up in
    /// `/proc` only when `waiter` (the thread and how many threads the
    /// process has) is given; a connection seen once is remembered for
    /// the rest of the send and, by the terminal, for its later sends.
    fn remote_hold(&mut self, pid: i32, waiter: Option<(i32, bool, usize)>) -> Option<Duration> {
        // Seen by an earlier send of this terminal too (ssh, caught once
        // between its poll and its read, looks like a reader of the
        // terminal alone).
        let known =
            self.remote.get(&pid).copied().unwrap_or(false) || self.session.was_remote_reader(pid);
        let remote = known
            || waiter.is_some_and(|(tid, alone, threads)| {
                (!alone && waits_on_another_process(pid, &wait_set(pid, tid)))
                    || (threads > 1 && remote_peer(pid).unwrap_or(false))
            });
        if remote {
            self.remote.insert(pid, true);
            self.session.note_remote_reader(pid);
        }
        remote.then(|| {
            self.session.remote_gap().map_or(REMOTE_HOLD_FIRST, |gap| {
                (gap * REMOTE_HOLD_FACTOR).clamp(REMOTE_HOLD_MIN, REMOTE_HOLD_MAX)
            })
        })
    }
}

/// A send's write in progress. Text the program did not take in time is
/// never left half-typed: when only part of it was written (the write
/// timed out, or the send was dropped mid-write), the terminal's unread
/// input is discarded, so no partial line runs later glued to the next
/// send.
struct InputWrite<'a> {
    session: &'a Session,
    total: usize,
    written: usize,
    done: bool,
}

impl InputWrite<'_> {
    /// What to report: `None` when everything was written.
    fn finish(&mut self) -> Option<InputCut> {
        self.done = true;
        if self.written >= self.total {
            return None;
        }
        let discarded = self.written > 0 && self.session.discard_unread_input();
        Some(InputCut {
            written_bytes: self.written as u64,
            total_bytes: self.total as u64,
            unread_discarded: discarded,
        })
    }
}

impl Drop for InputWrite<'_> {
    fn drop(&mut self) {
        if !self.done && self.written > 0 && self.written < self.total {
            self.session.discard_unread_input();
        }
    }
}

/// The pause between input-wait probes after `quiet` without output:
/// short right after output, backing off to [`MAX_PAUSE`].
fn probe_pause(quiet: Duration) -> Duration {
    (quiet / 4).clamp(Duration::from_millis(1), MAX_PAUSE)
}

fn render(
    session: &Session,
    plan: &SendPlan,
    reason: SettleReason,
    exit_code: Option<i32>,
    started: Instant,
) -> SendOutcome {
    let mut st = session.lock();
    session.drain(&mut st);
    let capture = st.out.end_capture();
    let status = session.status(&st);
    let limit = session.spec.result_limit;
    let Some(capture) = capture else {
        return SendOutcome {
            output: String::new(),
            reason,
            exit_code,
            status,
            truncated: false,
            total_bytes: 0,
            duration: started.elapsed(),
            input_cut: None,
            echo: None,
            line_cut: None,
        };
    };
    let end = match (reason, capture.last_marker) {
        (SettleReason::Prompt, Some((at, _))) => at,
        _ => capture.total,
    };
    st.unread = st.unread.max(capture.start_cursor + end);
    drop(st);
    let (head, gap, tail) = capture.parts(end);
    let (head, _removed) = strip_echo(&head, &plan.lines);
    let rendered = render_parts(&head, gap, &tail, limit);
    SendOutcome {
        output: rendered.text,
        reason,
        exit_code,
        status,
        truncated: rendered.truncated,
        total_bytes: rendered.total_bytes,
        duration: started.elapsed(),
        input_cut: None,
        echo: None,
        line_cut: None,
    }
}

/// Renders `head`, `gap` unseen bytes and `tail` within about `limit`
/// bytes: whole when it fits, else head + one marker line + tail.
pub(crate) fn render_parts(
    head: &str,
    gap: u64,
    tail: &str,
    limit: usize,
) -> output_text::Rendered {
    let total = head.len() as u64 + gap + tail.len() as u64;
    if gap == 0 && (head.len() + tail.len()) <= limit {
        let mut text = head.to_owned();
        text.push_str(tail);
        return output_text::Rendered {
            text,
            truncated: false,
            total_bytes: total,
            omitted_bytes: 0,
        };
    }
    let half = (limit / 2).max(16);
    let joined;
    let (head_src, tail_src) = if gap == 0 {
        joined = format!("{head}{tail}");
        (joined.as_str(), joined.as_str())
    } else {
        (head, tail)
    };
    let mut head_cut = half.min(head_src.len());
    while !head_src.is_char_boundary(head_cut) {
        head_cut -= 1;
    }
    let mut tail_cut = tail_src.len().saturating_sub(half);
    if gap == 0 {
        tail_cut = tail_cut.max(head_cut);
    }
    while !tail_src.is_char_boundary(tail_cut) {
        tail_cut += 1;
    }
    let kept_head = &head_src[..head_cut];
    let kept_tail = &tail_src[tail_cut..];
    let omitted = total - kept_head.len() as u64 - kept_tail.len() as u64;
    let mut text = String::with_capacity(kept_head.len() + kept_tail.len() + 48);
    text.push_str(kept_head);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&output_text::omission_marker(omitted));
    text.push('\n');
    text.push_str(kept_tail);
    output_text::Rendered {
        text,
        truncated: true,
        total_bytes: total,
        omitted_bytes: omitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn renders_whole_or_head_marker_tail_with_exact_totals() {
        let whole = render_parts("abc\n", 0, "", 100);
        assert_eq!(whole.text, "abc\n");
        assert!(!whole.truncated);
        let cut = render_parts(&"a".repeat(100), 1000, &"z".repeat(100), 64);
        assert_eq!(cut.total_bytes, 1200);
        assert_eq!(
            cut.text,
            format!(
                "{}\n[… 1136 bytes omitted …]\n{}",
                "a".repeat(32),
                "z".repeat(32)
            )
        );
        let long = render_parts(&"x".repeat(50), 0, "", 40);
        assert_eq!(long.omitted_bytes, 10);
        assert!(long.truncated);
    }
}
