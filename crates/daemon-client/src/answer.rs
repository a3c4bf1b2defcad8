//! The client half of `dsh answer`: the person types the answer to a
//! program's secret prompt on their own terminal, with echo off, and it
//! goes to the daemon over the private socket, never through an agent.

use std::io::{BufRead as _, Write as _};

use nix::sys::termios::{LocalFlags, SetArg, tcgetattr, tcsetattr};
use zeroize::Zeroizing;

/// What `dsh answer` writes before reading: `question` (from the
/// daemon: the prompt, the executable that reads it and any warning),
/// then where to type.
pub fn question(id: &str, question: &str) -> String {
    format!("{question}\nanswer for {id} (not shown): ")
}

/// The person's own terminal (`/dev/tty`), opened to read and write; when
/// there is none, `why` says what needed it.
fn person_tty(why: impl Fn(&std::io::Error) -> String) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
        .map_err(|e| std::io::Error::new(e.kind(), why(&e)))
}

/// Reads one line from the person's terminal (`/dev/tty`) with echo off,
/// after writing `prompt` there; the terminal's modes are restored even
/// when reading fails. Ctrl-C is read as a key (no signal may leave the
/// terminal with echo off) and aborts; an empty answer or end of input is
/// refused. Fails when there is no terminal: an answer is never read from
/// a pipe an agent could fill.
pub fn read_secret(prompt: &str) -> std::io::Result<Zeroizing<String>> {
    let tty = person_tty(|e| {
        format!("dsh answer reads the answer from your terminal, and there is none: {e}")
    })?;
    let saved = tcgetattr(&tty).map_err(std::io::Error::from)?;
    let mut quiet = saved.clone();
    quiet.local_flags.remove(LocalFlags::ECHO);
    quiet.local_flags.remove(LocalFlags::ISIG);
    quiet.local_flags.insert(LocalFlags::ECHONL);
    tcsetattr(&tty, SetArg::TCSAFLUSH, &quiet).map_err(std::io::Error::from)?;
    let read = (|| -> std::io::Result<Zeroizing<String>> {
        (&tty).write_all(prompt.as_bytes())?;
        (&tty).flush()?;
        let mut line = Zeroizing::new(String::new());
        std::io::BufReader::new(&tty).read_line(&mut line)?;
        Ok(line)
    })();
    let restored = tcsetattr(&tty, SetArg::TCSAFLUSH, &saved);
    let mut line = read?;
    restored.map_err(std::io::Error::from)?;
    let ended = !line.ends_with('\n');
    while line.ends_with('\n') || line.ends_with('\r') {
        line.pop();
    }
    if line.contains('\u{3}') {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Interrupted,
            "aborted with Ctrl-C; nothing was sent",
        ));
    }
    if line.is_empty() || ended {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "no answer was typed (empty, or the input ended); nothing was sent",
        ));
    }
    Ok(line)
}

/// `dsh approve ap-N`: shows `question` on the person's terminal
/// (`/dev/tty`) and reads their decision there: `yes` runs the command,
/// `no` refuses it, anything else decides nothing (`None`). Fails when
/// there is no terminal: an approval is never read from a pipe an agent
/// could fill.
pub fn decide_on_tty(question: &str) -> std::io::Result<Option<bool>> {
    let tty = person_tty(|e| {
        format!(
            "dsh approve reads your decision from your terminal, and there is none: {e}; to refuse without one, add --refuse"
        )
    })?;
    (&tty).write_all(format!("{question}\nType yes to run it, no to refuse it: ").as_bytes())?;
    (&tty).flush()?;
    let mut line = String::new();
    std::io::BufReader::new(&tty).read_line(&mut line)?;
    Ok(match line.trim().to_ascii_lowercase().as_str() {
        "yes" | "y" => Some(true),
        "no" | "n" => Some(false),
        _ => None,
    })
}
