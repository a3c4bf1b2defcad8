//! `dsh attach pty-N [--write]`: a person's live view of an agent's
//! terminal, in the person's own terminal.
//!
//! The daemon sends the screen, then the output as it arrives (frames, see
//! [`crate::protocol::frame`]); the view moves none of the owning agent's
//! cursors and nothing its settle detection reads. Read-only, `q` or
//! Ctrl-C leaves. With `--write` the person's keys go to the program
//! through the terminal's send slot: refused while an agent's send is
//! active, and holding the slot (so an agent's send gets `SEND_ACTIVE`)
//! until the person stopped typing and the program waits for input
//! again; Ctrl-] leaves.

use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;
use std::time::Duration;

use terminal_seam::{TerminalError, TerminalId};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::client::{ClientError, connect};
use crate::host::Host;
use crate::paths::DaemonPaths;
use crate::protocol::{Hello, Reply, Request, frame, write_line};

/// The key that leaves a writable view (Ctrl-]).
pub const DETACH_KEY: u8 = 0x1d;

async fn send_frame<W: AsyncWrite + Unpin>(w: &mut W, tag: u8, payload: &[u8]) -> bool {
    w.write_all(&frame::encode(tag, payload)).await.is_ok() && w.flush().await.is_ok()
}

/// Serves one `attach` connection (after its hello).
pub async fn serve<R, W>(
    host: &Host,
    id: &str,
    writable: bool,
    mut reader: R,
    mut writer: W,
    stop: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let fail = |e: TerminalError| Reply::failed(e.code(), e.to_string());
    let id: TerminalId = match id.parse() {
        Ok(id) => id,
        Err(e) => {
            let _ = write_line(&mut writer, &fail(e)).await;
            return;
        }
    };
    let terminals = host.terminals();
    let watch = match terminals.watch(id) {
        Ok(w) => w,
        Err(e) => {
            let _ = write_line(&mut writer, &fail(e)).await;
            return;
        }
    };
    let typing = if writable {
        match terminals.person_typing(id) {
            Ok(t) => Some(t),
            Err(e) => {
                let _ = write_line(&mut writer, &fail(e)).await;
                return;
            }
        }
    } else {
        None
    };
    let reply = Reply::ok(serde_json::json!({
        "rows": watch.size.0,
        "cols": watch.size.1,
        "write": writable,
    }));
    if write_line(&mut writer, &reply).await.is_err() {
        return;
    }
    tracing::info!(terminal = %id, write = writable, "a person attached");
    if !send_frame(&mut writer, frame::OUTPUT, &watch.screen).await {
        return;
    }
    let mut output = watch.output;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let end = loop {
        tokio::select! {
            chunk = output.recv() => match chunk {
                Ok(bytes) => {
                    if !send_frame(&mut writer, frame::OUTPUT, &bytes).await {
                        return;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // Too far behind: redraw the screen instead.
                    let Ok(screen) = terminals.screen_now(id) else { break format!("{id} ended") };
                    if !send_frame(&mut writer, frame::OUTPUT, &screen).await {
                        return;
                    }
                }
                Err(RecvError::Closed) => break format!("{id} ended"),
            },
            incoming = frame::read(&mut reader) => match incoming {
                Ok(Some((frame::INPUT, keys))) => {
                    let notice = match &typing {
                        None => Some("this view is read-only (attach with --write to type)".to_owned()),
                        Some(typing) => match typing.write(&keys).await {
                            Ok(()) => None,
                            Err(TerminalError::SendActive { .. }) => Some(format!(
                                "an agent's send is active on {id}; your keys were not sent — try again when it settles"
                            )),
                            Err(e) => Some(e.to_string()),
                        },
                    };
                    if let Some(notice) = notice
                        && !send_frame(&mut writer, frame::NOTICE, notice.as_bytes()).await
                    {
                        return;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    tracing::info!(terminal = %id, "a person detached");
                    return;
                }
            },
            _ = tick.tick() => {
                if terminals.is_over(id) {
                    // Let the last output through first.
                    while let Ok(bytes) = output.try_recv() {
                        if !send_frame(&mut writer, frame::OUTPUT, &bytes).await {
                            return;
                        }
                    }
                    break format!("{id} ended");
                }
            }
            () = stop.cancelled() => break "the dsh daemon is stopping".to_owned(),
        }
    };
    let _ = send_frame(&mut writer, frame::END, end.as_bytes()).await;
}

/// Restores the person's terminal mode when dropped.
struct RawMode {
    saved: Option<nix::sys::termios::Termios>,
}

impl RawMode {
    fn enter() -> Self {
        let stdin = std::io::stdin();
        let Ok(saved) = nix::sys::termios::tcgetattr(stdin.as_fd()) else {
            return Self { saved: None };
        };
        let mut raw = saved.clone();
        nix::sys::termios::cfmakeraw(&mut raw);
        let _ =
            nix::sys::termios::tcsetattr(stdin.as_fd(), nix::sys::termios::SetArg::TCSANOW, &raw);
        Self { saved: Some(saved) }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin().as_fd(),
                nix::sys::termios::SetArg::TCSANOW,
                saved,
            );
        }
    }
}

/// Runs `dsh attach`: returns the line to print when the view ends.
pub fn run(paths: &DaemonPaths, id: &str, writable: bool) -> Result<String, ClientError> {
    let hello = Hello::new(Request::Attach {
        id: id.to_owned(),
        write: writable,
    });
    let connected = connect(paths, &hello, None)?;
    let leftover = connected.stream.buffer().to_vec();
    let socket = connected.stream.into_inner();
    socket
        .set_nonblocking(true)
        .map_err(|e| ClientError::Unreachable(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ClientError::Unreachable(e.to_string()))?;
    let (keys_tx, mut keys) = tokio::sync::mpsc::channel::<Vec<u8>>(64);
    let raw = RawMode::enter();
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if keys_tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let leave_keys: &[u8] = if writable { &[DETACH_KEY] } else { b"q\x03" };
    let ended = runtime.block_on(async move {
        let stream = tokio::net::UnixStream::from_std(socket)
            .map_err(|e| ClientError::Unreachable(e.to_string()))?;
        let (read, mut write) = stream.into_split();
        let mut read = tokio::io::AsyncReadExt::chain(&leftover[..], read);
        let mut stdout = tokio::io::stdout();
        loop {
            tokio::select! {
                incoming = frame::read(&mut read) => match incoming {
                    Ok(Some((frame::OUTPUT, bytes))) => {
                        let _ = stdout.write_all(&bytes).await;
                        let _ = stdout.flush().await;
                    }
                    Ok(Some((frame::NOTICE, text))) => {
                        let line = format!("\r\n[dsh: {}]\r\n", String::from_utf8_lossy(&text));
                        let _ = stdout.write_all(line.as_bytes()).await;
                        let _ = stdout.flush().await;
                    }
                    Ok(Some((frame::END, text))) => {
                        return Ok(format!("{}", String::from_utf8_lossy(&text)));
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return Ok("the dsh daemon closed the view".to_owned()),
                },
                key = keys.recv() => match key {
                    Some(bytes) => {
                        if let Some(at) = bytes.iter().position(|b| leave_keys.contains(b)) {
                            if writable && at > 0 {
                                let _ = write.write_all(&frame::encode(frame::INPUT, &bytes[..at])).await;
                            }
                            return Ok(format!("detached from {id}; the program goes on"));
                        }
                        if !writable {
                            let line = "\r\n[dsh: this view is read-only (attach with --write to type); q or Ctrl-C leaves]\r\n";
                            let _ = stdout.write_all(line.as_bytes()).await;
                            let _ = stdout.flush().await;
                        } else if write.write_all(&frame::encode(frame::INPUT, &bytes)).await.is_err() {
                            return Ok("the dsh daemon closed the view".to_owned());
                        }
                    }
                    None => return Ok(format!("detached from {id}")),
                },
            }
        }
    });
    drop(raw);
    runtime.shutdown_background();
    let mut stdout = std::io::stdout();
    let _ = stdout.write_all(b"\r\n");
    let _ = stdout.flush();
    ended
}
