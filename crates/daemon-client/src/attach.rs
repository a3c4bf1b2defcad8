//! `dsh attach pty-N [--write]`: a person's live view of an agent's
//! terminal, in the person's own terminal (the client's half; the
//! daemon's is `server::attach`).
//!
//! The daemon draws the terminal's screen (frames, see
//! [`daemon_wire::frame`]): what reaches the person's terminal is
//! drawing, never the program's own output, so nothing the program prints
//! sets the person's clipboard or title or makes their terminal answer a
//! query. Read-only, `q` or Ctrl-C leaves. With `--write` the person's
//! keys go to the program (refused while an agent's send is active);
//! Ctrl-] leaves. What the person's terminal sends that is not a key — a
//! report or answer a terminal gives (device attributes, cursor position,
//! a color, a setting, a window size) — is dropped, not typed
//! ([`Keys`]).

use std::io::{Read as _, Write as _};
use std::os::fd::AsFd as _;

use tokio::io::AsyncWriteExt as _;

use super::{ClientError, connect};
use crate::paths::DaemonPaths;
use daemon_wire::{Hello, Request, frame};

/// The key that leaves a writable view (Ctrl-]).
pub const DETACH_KEY: u8 = 0x1d;

/// What leaves the person's terminal as the view ends: plain colors, the
/// cursor shown, normal cursor keys (the view may have set them).
const RESET: &[u8] = b"\x1b[0m\x1b[?25h\x1b[?1l\r\n";

/// Where [`Keys`] is in an escape sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seq {
    /// Not in one.
    Ground,
    /// After ESC.
    Escape,
    /// In a control sequence (`ESC [`), with its bytes so far.
    Csi(Vec<u8>),
    /// In a string (OSC, DCS, APC, PM, SOS), dropped to its end.
    Text,
    /// After ESC in a string.
    TextEscape,
}

/// The person's keys, without what their terminal sends that no key does:
/// answers and reports (strings — OSC, DCS, APC, PM, SOS — and the
/// control sequences of device attributes, status and cursor position
/// reports, mode and window reports). A sequence split across reads is
/// judged whole; an ESC that ends a read is a key (Escape) and goes at
/// once.
#[derive(Debug)]
pub(crate) struct Keys {
    seq: Seq,
}

impl Keys {
    /// A filter at the start of input.
    pub(crate) fn new() -> Self {
        Self { seq: Seq::Ground }
    }

    /// The keys in `bytes`, the person's terminal's answers left out.
    pub(crate) fn keys(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        for &b in bytes {
            self.seq = match std::mem::replace(&mut self.seq, Seq::Ground) {
                Seq::Ground if b == 0x1b => Seq::Escape,
                Seq::Ground => {
                    out.push(b);
                    Seq::Ground
                }
                Seq::Escape => match b {
                    b'[' => Seq::Csi(Vec::new()),
                    b']' | b'P' | b'_' | b'^' | b'X' => Seq::Text,
                    0x1b => {
                        out.push(0x1b);
                        Seq::Escape
                    }
                    _ => {
                        out.extend([0x1b, b]);
                        Seq::Ground
                    }
                },
                Seq::Csi(mut body) => {
                    body.push(b);
                    if (0x40..=0x7e).contains(&b) {
                        if is_a_key(&body) {
                            out.extend([0x1b, b'[']);
                            out.extend(body);
                        }
                        Seq::Ground
                    } else if body.len() > 64 {
                        // No key is this long.
                        Seq::Ground
                    } else {
                        Seq::Csi(body)
                    }
                }
                Seq::Text if b == 0x07 => Seq::Ground,
                Seq::Text if b == 0x1b => Seq::TextEscape,
                Seq::Text => Seq::Text,
                Seq::TextEscape if b == b'\\' => Seq::Ground,
                Seq::TextEscape => Seq::Text,
            };
        }
        if self.seq == Seq::Escape {
            out.push(0x1b);
            self.seq = Seq::Ground;
        }
        out
    }
}

/// Whether a control sequence (its bytes after `ESC [`) is one a key
/// sends, not a terminal's answer: no private marker `?` `>` `=` (device
/// attributes, mode and key-protocol reports), no `$` (mode reports), and
/// not a status (`n`), window (`t`), parameters (`x`) or cursor position
/// (`R`) report. A modified F3 (`ESC [ 1 ; m R`) is a key.
fn is_a_key(body: &[u8]) -> bool {
    let Some((&last, params)) = body.split_last() else {
        return false;
    };
    if matches!(params.first(), Some(b'?' | b'>' | b'=')) || params.contains(&b'$') {
        return false;
    }
    match last {
        b'c' | b'n' | b't' | b'x' | b'y' => false,
        b'R' => params.is_empty() || params.starts_with(b"1;") && params.len() <= 4,
        _ => true,
    }
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
    let mut filter = Keys::new();
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
                        let bytes = filter.keys(&bytes);
                        if bytes.is_empty() {
                            continue;
                        }
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
    let _ = stdout.write_all(RESET);
    let _ = stdout.flush();
    ended
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(chunks: &[&[u8]]) -> Vec<u8> {
        let mut filter = Keys::new();
        chunks.iter().flat_map(|c| filter.keys(c)).collect()
    }

    #[test]
    fn keys_go_through() {
        for key in [
            &b"ls -l\r"[..],
            b"\x1b[A",
            b"\x1bOA",
            b"\x1b[1;5A",
            b"\x1b[15~",
            b"\x1b[200~pasted\x1b[201~",
            b"\x1b[1;5R",
            b"\x1bx",
            b"\x1b",
            b"\x1b[<0;3;4M",
        ] {
            assert_eq!(keys(&[key]), key, "{key:?}");
        }
    }

    #[test]
    fn a_terminals_answers_are_dropped() {
        for answer in [
            &b"\x1b[?64;1;2;6;9;15;18;21;22c"[..],
            b"\x1b[>41;354;0c",
            b"\x1b[0n",
            b"\x1b[24;80R",
            b"\x1b[?24;80R",
            b"\x1b]11;rgb:0000/0000/0000\x07",
            b"\x1b]10;rgb:ffff/ffff/ffff\x1b\\",
            b"\x1bP1$r0m\x1b\\",
            b"\x1bP>|xterm(354)\x1b\\",
            b"\x1b[?1;2$y",
            b"\x1b[8;24;80t",
            b"\x1b[?1u",
            b"\x1b_Gi=1;OK\x1b\\",
        ] {
            assert_eq!(keys(&[b"a", answer, b"b"]), b"ab", "{answer:?}");
        }
    }

    #[test]
    fn an_answer_split_across_reads_is_dropped_whole() {
        assert_eq!(keys(&[b"a\x1b[?64;", b"1c", b"b"]), b"ab");
        assert_eq!(keys(&[b"a\x1b]11;rgb:00", b"00/0000\x07b"]), b"ab");
    }
}
