//! Logging: `tracing` to stderr (stdout is the MCP protocol), and
//! optionally appended to a file that only its owner can read.
//!
//! Tool payloads never reach the log: the MCP library logs whole requests
//! and responses at `debug`, so its target stays at `info` or quieter unless
//! the filter names it.
//!
//! No statement floods the log: [`RateLimited`] lets each log statement
//! (each call site) write at most [`BURST`] lines per [`WINDOW`]; the
//! repeats beyond that are counted, and once the window is over one line
//! says how many were suppressed. Anyone who can reach the daemon (its
//! page's port, its socket) can make it log a refusal per attempt; the
//! log stays small however many attempts come.

use std::collections::HashMap;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tracing::callsite::Identifier;
use tracing::level_filters::LevelFilter;
use tracing::{Dispatch, Event, Level, Metadata, Subscriber, span};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The filter when neither `DSH_LOG` nor `[log] level` is set.
const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// The MCP library's tracing target.
const MCP_TARGET: &str = "rmcp";

/// Installs the global subscriber. `DSH_LOG` wins over `level`.
pub fn init(level: Option<&str>, file: Option<&Path>) -> anyhow::Result<()> {
    let filter = std::env::var("DSH_LOG")
        .ok()
        .or_else(|| level.map(str::to_owned))
        .unwrap_or_else(|| DEFAULT_FILTER.to_owned());
    let filter = with_quiet_mcp(&filter);
    let filter =
        EnvFilter::try_new(&filter).with_context(|| format!("invalid log filter {filter:?}"))?;
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let file_layer = match file {
        Some(path) => Some(
            tracing_subscriber::fmt::layer()
                .with_writer(std::sync::Mutex::new(open_private(path)?))
                .with_ansi(false),
        ),
        None => None,
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(RateLimited::new(stderr.and_then(file_layer), BURST, WINDOW))
        .try_init()
        .context("logging was already set up")?;
    Ok(())
}

/// The most lines one log statement writes per [`WINDOW`].
pub const BURST: u32 = 20;
/// The window of [`BURST`].
pub const WINDOW: Duration = Duration::from_secs(10);
/// The target of the lines that count suppressed repeats (never limited).
const SUMMARY_TARGET: &str = "dsh::log";

/// One call site's current window.
struct Window {
    started: Instant,
    written: u32,
    suppressed: u64,
    level: Level,
    /// The message of the line repeated, for the summary.
    what: String,
}

#[derive(Default)]
struct Windows {
    sites: HashMap<Identifier, Window>,
    /// Whether the thread that writes the summaries runs.
    flusher: bool,
}

struct Limiter {
    burst: u32,
    window: Duration,
    windows: Mutex<Windows>,
    wake: Condvar,
    /// The subscriber the summaries are written through.
    dispatch: Mutex<Option<tracing::dispatcher::WeakDispatch>>,
}

/// A layer that passes at most `burst` events of each call site per
/// `window` to `inner`; see the module's documentation.
pub struct RateLimited<L> {
    inner: L,
    limiter: Arc<Limiter>,
}

impl<L> RateLimited<L> {
    /// `inner`, limited.
    pub fn new(inner: L, burst: u32, window: Duration) -> Self {
        Self {
            inner,
            limiter: Arc::new(Limiter {
                burst,
                window,
                windows: Mutex::new(Windows::default()),
                wake: Condvar::new(),
                dispatch: Mutex::new(None),
            }),
        }
    }
}

/// The `message` of an event, at most 200 characters of it.
fn message_of(event: &Event<'_>) -> String {
    struct Message(String);
    impl tracing::field::Visit for Message {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                self.0 = format!("{value:?}");
            }
        }
    }
    let mut m = Message(String::new());
    event.record(&mut m);
    if m.0.is_empty() {
        m.0 = event.metadata().name().to_owned();
    }
    match m.0.char_indices().nth(200) {
        Some((at, _)) => format!("{}…", &m.0[..at]),
        None => m.0,
    }
}

impl Limiter {
    /// Whether `event` may be written now.
    fn admit(self: &Arc<Self>, event: &Event<'_>) -> bool {
        let meta = event.metadata();
        if meta.target() == SUMMARY_TARGET {
            return true;
        }
        let now = Instant::now();
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let window = windows
            .sites
            .entry(meta.callsite())
            .or_insert_with(|| Window {
                started: now,
                written: 0,
                suppressed: 0,
                level: *meta.level(),
                what: String::new(),
            });
        if now.duration_since(window.started) >= self.window && window.suppressed == 0 {
            window.started = now;
            window.written = 0;
        }
        if window.written < self.burst && window.suppressed == 0 {
            window.written += 1;
            return true;
        }
        if window.suppressed == 0 {
            window.what = message_of(event);
        }
        window.suppressed += 1;
        if !windows.flusher {
            windows.flusher = true;
            let limiter = self.clone();
            let spawned = std::thread::Builder::new()
                .name("dsh-log-limit".to_owned())
                .spawn(move || limiter.flush_forever());
            if spawned.is_err() {
                windows.flusher = false;
            }
        }
        self.wake.notify_one();
        false
    }

    /// Writes the count of each window that suppressed lines, once it is
    /// over; ends with the subscriber.
    fn flush_forever(&self) {
        loop {
            let due = {
                let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    let next = windows
                        .sites
                        .values()
                        .filter(|w| w.suppressed > 0)
                        .map(|w| w.started + self.window)
                        .min();
                    let now = Instant::now();
                    match next {
                        Some(at) if at <= now => break,
                        Some(at) => {
                            windows = self
                                .wake
                                .wait_timeout(windows, at - now)
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                        }
                        None => {
                            windows = self
                                .wake
                                .wait_timeout(windows, self.window)
                                .unwrap_or_else(|p| p.into_inner())
                                .0;
                            if !self.subscriber_alive() {
                                windows.flusher = false;
                                return;
                            }
                        }
                    }
                }
                let now = Instant::now();
                let mut due = Vec::new();
                for window in windows.sites.values_mut() {
                    if window.suppressed > 0 && now.duration_since(window.started) >= self.window {
                        due.push((
                            window.level,
                            window.suppressed,
                            std::mem::take(&mut window.what),
                        ));
                        // The next window starts now, with nothing written.
                        window.started = now;
                        window.written = 0;
                        window.suppressed = 0;
                    }
                }
                due
            };
            let Some(dispatch) = self.dispatch() else {
                return;
            };
            tracing::dispatcher::with_default(&dispatch, || {
                for (level, repeats, what) in due {
                    summary(level, repeats, &what, self.burst, self.window);
                }
            });
        }
    }

    fn dispatch(&self) -> Option<Dispatch> {
        self.dispatch
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(tracing::dispatcher::WeakDispatch::upgrade)
    }

    fn subscriber_alive(&self) -> bool {
        self.dispatch().is_some()
    }
}

/// The line that counts a window's suppressed repeats, at the level of
/// the line repeated.
fn summary(level: Level, repeats: u64, what: &str, burst: u32, window: Duration) {
    let secs = window.as_secs_f64();
    macro_rules! line {
        ($m:ident) => {
            tracing::$m!(target: SUMMARY_TARGET, "suppressed {repeats} repeats of a log line within {secs} s (at most {burst} are written): {what}")
        };
    }
    match level {
        Level::ERROR => line!(error),
        Level::WARN => line!(warn),
        Level::INFO => line!(info),
        Level::DEBUG => line!(debug),
        Level::TRACE => line!(trace),
    }
}

impl<S, L> Layer<S> for RateLimited<L>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    L: Layer<S>,
{
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        *self
            .limiter
            .dispatch
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(subscriber.downgrade());
        self.inner.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.inner.on_layer(subscriber);
    }

    fn register_callsite(
        &self,
        metadata: &'static Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        self.inner.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_new_span(attrs, id, ctx);
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        self.inner.max_level_hint()
    }

    fn on_record(&self, span: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        self.inner.on_record(span, values, ctx);
    }

    fn on_follows_from(&self, span: &span::Id, follows: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.inner.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        if self.limiter.admit(event) {
            self.inner.on_event(event, ctx);
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_exit(id, ctx);
    }

    fn on_close(&self, id: span::Id, ctx: Context<'_, S>) {
        self.inner.on_close(id, ctx);
    }

    fn on_id_change(&self, old: &span::Id, new: &span::Id, ctx: Context<'_, S>) {
        self.inner.on_id_change(old, new, ctx);
    }
}

/// Opens the log file for appending, readable and writable by its owner
/// only: created 0600, and an existing file's mode tightened to 0600.
fn open_private(path: &Path) -> anyhow::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open log file {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read log file {}", path.display()))?;
    if meta.is_file() && meta.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot make log file {} private", path.display()))?;
    }
    Ok(file)
}

/// `filter` with the MCP library's target capped at `info` when the filter
/// would let its `debug` or `trace` events through without naming it: those
/// events carry whole tool calls and results (commands, typed text, output).
fn with_quiet_mcp(filter: &str) -> String {
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.iter().any(|d| d.starts_with(MCP_TARGET)) {
        return filter.to_owned();
    }
    // The default for every target is the directive that names no target.
    let default = directives
        .iter()
        .rev()
        .find_map(|d| d.parse::<LevelFilter>().ok());
    match default {
        Some(level) if level > LevelFilter::INFO => format!("{filter},{MCP_TARGET}=info"),
        Some(_) | None => filter.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
        }
    }

    #[test]
    fn a_repeated_line_is_written_burst_times_then_counted() {
        let out = Buffer::default();
        let writer = out.clone();
        let fmt = tracing_subscriber::fmt::layer()
            .with_writer(move || writer.clone())
            .with_ansi(false);
        let window = Duration::from_millis(300);
        let subscriber = tracing_subscriber::registry().with(RateLimited::new(fmt, 5, window));
        let dispatch = Dispatch::new(subscriber);
        tracing::dispatcher::with_default(&dispatch, || {
            for i in 0..1000 {
                tracing::warn!(host = i, "refused a request");
            }
            tracing::warn!("another line");
        });
        let text = out.text();
        assert_eq!(text.matches("refused a request").count(), 5, "{text}");
        assert_eq!(text.matches("another line").count(), 1, "{text}");
        // Once the window is over, one line counts the rest.
        let began = Instant::now();
        while !out.text().contains("suppressed 995 repeats") {
            assert!(began.elapsed() < Duration::from_secs(30), "{}", out.text());
            std::thread::yield_now();
        }
        let text = out.text();
        assert!(
            text.contains("suppressed 995 repeats of a log line within 0.3 s (at most 5 are written): refused a request"),
            "{text}"
        );
        // Then the line is written again.
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::warn!(host = 0, "refused a request");
        });
        assert_eq!(out.text().matches("refused a request").count(), 5 + 1 + 1);
        drop(dispatch);
    }

    #[test]
    fn the_mcp_library_stays_at_info_unless_named() {
        assert_eq!(with_quiet_mcp("debug"), "debug,rmcp=info");
        assert_eq!(
            with_quiet_mcp("trace,dsh=debug"),
            "trace,dsh=debug,rmcp=info"
        );
        assert_eq!(with_quiet_mcp("info,rmcp=warn"), "info,rmcp=warn");
        assert_eq!(with_quiet_mcp("debug,rmcp=trace"), "debug,rmcp=trace");
        assert_eq!(with_quiet_mcp("warn"), "warn");
        assert_eq!(with_quiet_mcp("dsh=debug"), "dsh=debug");
    }
}
