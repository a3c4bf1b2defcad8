//! The one-shot exchange: the daemon accepts a one-shot request at once
//! (so a client tells a slow operation from a daemon that does not
//! answer) and answers with a second line when the request is done.

use std::io::BufReader;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use super::framing::{LineError, read_line_blocking, write_line_blocking};
use super::{Hello, MAX_REPLY_LINE, Reply, Request};

/// How long a one-shot request may run in the daemon once accepted (a
/// registry operation waits for its flush; a stop, for every terminal and
/// job to end).
pub const RESULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Reads the result line that follows a one-shot request's acceptance.
pub fn read_result(stream: &mut BufReader<UnixStream>) -> Result<Reply, String> {
    stream
        .get_ref()
        .set_read_timeout(Some(RESULT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let reply: Reply = read_line_blocking(stream, MAX_REPLY_LINE).map_err(|e| match e {
        LineError::Closed => {
            "the daemon closed the connection before it answered (it stopped or died)".to_owned()
        }
        other @ (LineError::TooLong(_) | LineError::Malformed(_) | LineError::Io(_)) => {
            other.to_string()
        }
    })?;
    Ok(reply)
}

/// One request to the daemon at `socket`, without starting one and
/// without checking who listens there: its result, or why there is none.
/// A daemon uses it to reach another daemon (a hand-over, forwarded
/// records).
pub fn request_at(socket: &Path, request: Request) -> Result<Reply, String> {
    let stream = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut writer = &stream;
    write_line_blocking(&mut writer, &Hello::new(request)).map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let accepted: Reply =
        read_line_blocking(&mut reader, MAX_REPLY_LINE).map_err(|e| e.to_string())?;
    if accepted.error.is_some() {
        return Ok(accepted);
    }
    read_result(&mut reader)
}
