//! The daemon's half of `dsh attach`: a live view of a terminal. The
//! screen first, then the output as it arrives (frames, see
//! [`crate::protocol::frame`]); the view moves none of the owning agent's
//! cursors and nothing its settle detection reads. With `write`, the
//! person's keys go to the program through the terminal's send slot:
//! refused while an agent's send is active, and holding the slot (so an
//! agent's send gets `SEND_ACTIVE`) until the person stopped typing and
//! the program waits for input again.

use std::time::Duration;

use terminal_seam::{TerminalError, TerminalId, WatchEvent};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use crate::host::Host;
use crate::protocol::replies::AttachAccepted;
use crate::protocol::{Reply, frame, write_line};

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
    let reply = Reply::of(&AttachAccepted {
        rows: watch.size.0,
        cols: watch.size.1,
        write: writable,
    });
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
            event = output.next() => match event {
                WatchEvent::Output(bytes) => {
                    if !send_frame(&mut writer, frame::OUTPUT, &bytes).await {
                        return;
                    }
                }
                WatchEvent::Lagged => {
                    // Too far behind: redraw the screen instead.
                    let Ok(screen) = terminals.screen_now(id) else { break format!("{id} ended") };
                    if !send_frame(&mut writer, frame::OUTPUT, &screen).await {
                        return;
                    }
                }
                WatchEvent::Ended => break format!("{id} ended"),
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
                    while let Some(WatchEvent::Output(bytes)) = output.try_next() {
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
