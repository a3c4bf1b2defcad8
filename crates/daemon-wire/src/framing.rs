//! Framing on the daemon's socket: one JSON value per line (the hello,
//! the replies), with a limit on the line's length, and the binary frames
//! that follow an `attach` reply.

use std::io::{BufRead, Write};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _};

/// Why a line could not be read.
#[derive(Debug, thiserror::Error)]
pub enum LineError {
    /// The peer closed the connection first.
    #[error("the connection closed before a complete line arrived")]
    Closed,
    /// The line exceeded the limit.
    #[error("a line longer than {0} bytes")]
    TooLong(u64),
    /// The line is not the JSON expected.
    #[error("malformed line: {0}")]
    Malformed(String),
    /// Reading failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads one JSON line of at most `limit` bytes.
pub async fn read_line<T, R>(reader: &mut R, limit: u64) -> Result<T, LineError>
where
    T: for<'de> Deserialize<'de>,
    R: tokio::io::AsyncBufRead + Unpin,
{
    let mut buf = Vec::new();
    let n = (&mut *reader)
        .take(limit + 1)
        .read_until(b'\n', &mut buf)
        .await?;
    decode_line(&buf, n, limit)
}

/// Writes one JSON line.
pub async fn write_line<T, W>(writer: &mut W, value: &T) -> std::io::Result<()>
where
    T: Serialize,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line).await?;
    writer.flush().await
}

/// [`read_line`] on a blocking reader.
pub fn read_line_blocking<T, R>(reader: &mut R, limit: u64) -> Result<T, LineError>
where
    T: for<'de> Deserialize<'de>,
    R: BufRead,
{
    let mut buf = Vec::new();
    let n = std::io::Read::take(&mut *reader, limit + 1).read_until(b'\n', &mut buf)?;
    decode_line(&buf, n, limit)
}

/// [`write_line`] on a blocking writer.
pub fn write_line_blocking<T: Serialize, W: Write>(
    writer: &mut W,
    value: &T,
) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    line.push(b'\n');
    writer.write_all(&line)?;
    writer.flush()
}

fn decode_line<T: for<'de> Deserialize<'de>>(
    buf: &[u8],
    n: usize,
    limit: u64,
) -> Result<T, LineError> {
    if n == 0 {
        return Err(LineError::Closed);
    }
    if buf.last() != Some(&b'\n') {
        return Err(if n as u64 > limit {
            LineError::TooLong(limit)
        } else {
            LineError::Closed
        });
    }
    serde_json::from_slice(buf).map_err(|e| LineError::Malformed(e.to_string()))
}

/// Frames of `attach` after the reply: one tag byte, a big-endian u32
/// length, the payload.
pub mod frame {
    /// Daemon → client: bytes the program wrote (the screen first).
    pub const OUTPUT: u8 = 1;
    /// Daemon → client: a one-line notice for the person (UTF-8).
    pub const NOTICE: u8 = 2;
    /// Daemon → client: the view ended; the payload says why (UTF-8).
    pub const END: u8 = 3;
    /// Client → daemon: keys the person typed (`--write` only).
    pub const INPUT: u8 = 4;
    /// The longest payload either side accepts.
    pub const MAX_PAYLOAD: u32 = 1024 * 1024;

    /// Encodes one frame.
    pub fn encode(tag: u8, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len().min(MAX_PAYLOAD as usize)).unwrap_or(MAX_PAYLOAD);
        let mut out = Vec::with_capacity(5 + len as usize);
        out.push(tag);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&payload[..len as usize]);
        out
    }

    /// Reads one frame; `None` at a clean end of the stream.
    pub async fn read<R: tokio::io::AsyncRead + Unpin>(
        reader: &mut R,
    ) -> std::io::Result<Option<(u8, Vec<u8>)>> {
        use tokio::io::AsyncReadExt as _;
        let mut head = [0u8; 5];
        match reader.read_exact(&mut head).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(e),
        }
        let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]);
        if len > MAX_PAYLOAD {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a frame of {len} bytes is over the limit"),
            ));
        }
        let mut payload = vec![0u8; len as usize];
        reader.read_exact(&mut payload).await?;
        Ok(Some((head[0], payload)))
    }
}
