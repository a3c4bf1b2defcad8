//! `dsh attach pty-N [--write]`: a person's live view of an agent's
//! terminal, in the person's own terminal (the client's half; the
//! daemon's is `server::attach`).
//!
//! The daemon sends the screen, then the output as it arrives (frames, see
//! [`crate::protocol::frame`]). Read-only, `q` or Ctrl-C leaves. With
//! `--write` the person's keys go to the program (refused while an
//! agent's send is active); Ctrl-] leaves.

use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;

use tokio::io::AsyncWriteExt as _;

use super::{ClientError, connect};
use crate::paths::DaemonPaths;
use crate::protocol::{Hello, Request, frame};

/// The key that leaves a writable view (Ctrl-]).
pub const DETACH_KEY: u8 = 0x1d;

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
