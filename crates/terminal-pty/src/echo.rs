//! Removing the terminal's echo of the sent text (and the continuation
//! prompts a REPL printed between its lines) from a send's output.

/// Prompts that may precede an echoed line: REPL continuation prompts,
/// Python's primary prompt (a multi-statement send), our shell's.
const PROMPTS: &[&str] = &["... ", ">>> ", "> ", "$ ", "...: ", ".. "];

/// How far past the previous echo a line's echo is searched for.
const SEARCH_WINDOW: usize = 16 * 1024;

/// The sent text as the lines a terminal echoes.
pub(crate) fn sent_lines(text: &str, submit: bool) -> Vec<String> {
    let mut normalized = text.replace("\r\n", "\n").replace('\r', "\n");
    if submit {
        normalized.push('\n');
    }
    let mut lines: Vec<String> = normalized.split('\n').map(str::to_owned).collect();
    // The piece after the last newline was not submitted: it is echoed
    // without a newline (kept as a line that may end the output).
    if lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines
}

/// Removes the echo of `lines` from `output`; returns the remaining text
/// and how many bytes were removed.
///
/// Each line's echo is looked for in order, at a line start, optionally
/// after a known prompt, followed by a newline (or the end of the output).
/// Text between echoes (what the program printed in between) is kept. A
/// line whose echo is not found ends the search (input read with echo off,
/// e.g. a password, has none).
pub(crate) fn strip_echo(output: &str, lines: &[String]) -> (String, usize) {
    let mut kept = String::with_capacity(output.len());
    let mut pos = 0;
    let mut all_found = !lines.is_empty();
    for line in lines {
        let Some((start, end)) = find_echo(output, pos, line) else {
            all_found = false;
            break;
        };
        let between = &output[pos..start];
        // Blank lines before the first echo are the tail of an earlier
        // prompt's redraw (after an interrupt, say), not output.
        if !(pos == 0 && between.bytes().all(|b| b == b'\n')) {
            kept.push_str(between);
        }
        pos = end;
    }
    // Type-ahead: text written while a command still ran is echoed by the
    // kernel, then again by the shell's line editor when it reads it.
    if all_found {
        let rest = &output[pos..];
        let skipped = rest.len() - rest.trim_start_matches('\n').len();
        let mut at = pos + skipped;
        let again = lines
            .iter()
            .all(|line| match echo_at(output, at, line, true) {
                Some(end) => {
                    at = end;
                    true
                }
                None => false,
            });
        if again {
            pos = at;
        }
    }
    kept.push_str(&output[pos..]);
    let removed = output.len() - kept.len();
    (kept, removed)
}

fn find_echo(output: &str, from: usize, line: &str) -> Option<(usize, usize)> {
    let mut limit = (from + SEARCH_WINDOW).min(output.len());
    while !output.is_char_boundary(limit) {
        limit -= 1;
    }
    let window = &output[from..limit];
    let mut candidate = 0;
    loop {
        let at = from + candidate;
        if let Some(end) = echo_at(output, at, line, false) {
            return Some((at, end));
        }
        let next = window[candidate..].find('\n')?;
        candidate += next + 1;
        if candidate > window.len() {
            return None;
        }
    }
}

fn echo_at(output: &str, at: usize, line: &str, need_prompt: bool) -> Option<usize> {
    let rest = &output[at..];
    let mut options: Vec<&str> = if need_prompt { Vec::new() } else { vec![rest] };
    options.extend(PROMPTS.iter().filter_map(|p| rest.strip_prefix(p)));
    for body in options {
        if let Some(after) = match_line(body, line) {
            let consumed = rest.len() - after.len();
            if let Some(after_newline) = after.strip_prefix('\n') {
                let _ = after_newline;
                return Some(at + consumed + 1);
            }
            if after.is_empty() && !line.is_empty() {
                return Some(at + consumed);
            }
        }
    }
    None
}

/// Matches the echo of `line` at the start of `text`; returns the rest.
/// A tab may come back as the spaces a line editor drew for it.
fn match_line<'t>(text: &'t str, line: &str) -> Option<&'t str> {
    if !line.contains('\t') {
        return text.strip_prefix(line);
    }
    let mut rest = text;
    for piece in line.split_inclusive('\t') {
        let (plain, tab) = match piece.strip_suffix('\t') {
            Some(plain) => (plain, true),
            None => (piece, false),
        };
        rest = rest.strip_prefix(plain)?;
        if tab {
            rest = match rest.strip_prefix('\t') {
                Some(after) => after,
                None => {
                    let spaces = rest.len() - rest.trim_start_matches(' ').len();
                    if spaces == 0 {
                        return None;
                    }
                    &rest[spaces.min(8)..]
                }
            };
        }
    }
    Some(rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn strip(output: &str, text: &str) -> String {
        strip_echo(output, &sent_lines(text, true)).0
    }

    #[test]
    fn removes_a_single_line_echo() {
        assert_eq!(strip("echo hi\nhi\n", "echo hi"), "hi\n");
        assert_eq!(strip("1+1\n2\n>>> ", "1+1"), "2\n>>> ");
    }

    #[test]
    fn removes_continuation_prompts_of_multi_line_input() {
        let text = "def f(x):\n    return x + 1\n";
        let output = "def f(x):\n...     return x + 1\n... \n>>> ";
        assert_eq!(strip(output, text), ">>> ");
    }

    #[test]
    fn a_tab_may_come_back_as_spaces() {
        let output = "for i in range(2):\n...     print(i)\n... \n0\n1\n>>> ";
        assert_eq!(
            strip(output, "for i in range(2):\n\tprint(i)\n"),
            "0\n1\n>>> "
        );
    }

    #[test]
    fn keeps_output_printed_between_echoed_lines() {
        let output = "print(1)\n1\n>>> print(2)\n2\n>>> ";
        assert_eq!(strip(output, "print(1)\nprint(2)"), "1\n2\n>>> ");
    }

    #[test]
    fn removes_the_second_echo_of_type_ahead() {
        assert_eq!(
            strip("echo back\n\n$ echo back\nback\n", "echo back"),
            "back\n"
        );
        assert_eq!(strip("\n$ echo back\nback\n", "echo back"), "back\n");
    }

    #[test]
    fn keeps_everything_when_nothing_was_echoed() {
        assert_eq!(strip("pw: ", "secret"), "pw: ");
        assert_eq!(strip("", "x"), "");
    }

    #[test]
    fn program_output_equal_to_the_input_survives() {
        assert_eq!(strip("hello\nhello\n", "hello"), "hello\n");
    }
}
