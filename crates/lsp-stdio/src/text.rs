//! Lines, columns and identifiers: conversions between the model's 1-based
//! Unicode-scalar columns and the server's negotiated encoding.

use lsp_seam::{Address, LspError, ReadAccess};

/// The position encoding agreed with a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Offsets in UTF-8 bytes.
    Utf8,
    /// Offsets in UTF-16 code units (the LSP default).
    Utf16,
}

/// Reads a UTF-8 file of at most `max_bytes` without reading more than
/// that: a bigger file is refused (`INVALID_ARGUMENT` naming
/// `path`), not read whole. Nothing is read that `access` refuses
/// (`SANDBOX_READ_DENIED`): it is asked about the file the kernel would
/// open (symlinks followed) before the file is opened, and about the file
/// actually opened when that is another one (a symlink swapped in
/// between).
pub fn read_capped(
    path: &std::path::Path,
    max_bytes: u64,
    access: &ReadAccess,
) -> Result<String, LspError> {
    let real = path.canonicalize().map_err(|_| LspError::FileNotFound {
        path: path.to_owned(),
    })?;
    read_resolved(path, &real, max_bytes, access)
}

/// [`read_capped`] of `path` once it has been canonicalized to `real`
/// (errors name `path`).
pub fn read_resolved(
    path: &std::path::Path,
    real: &std::path::Path,
    max_bytes: u64,
    access: &ReadAccess,
) -> Result<String, LspError> {
    use std::io::Read as _;
    use std::os::fd::AsRawFd as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let not_found = || LspError::FileNotFound {
        path: path.to_owned(),
    };
    access.check(real)?;
    // Non-blocking, so that a FIFO cannot hold the query; it is refused
    // below as not a regular file. `real` has no symlink left: one
    // swapped in since is not followed.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_NOFOLLOW)
        .open(real)
        .map_err(|_| not_found())?;
    if let Ok(opened) = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
        && opened != real
    {
        access.check(&opened)?;
    }
    let meta = file.metadata().map_err(|_| not_found())?;
    if !meta.is_file() {
        return Err(not_found());
    }
    let len = meta.len();
    let too_large = |len: u64| LspError::InvalidArgument {
        field: "path".into(),
        message: format!(
            "{} is {len} bytes, more than the {max_bytes} bytes a language-server query reads ([lsp] max_file_bytes); query a smaller file",
            path.display()
        ),
    };
    if len > max_bytes {
        return Err(too_large(len));
    }
    let mut bytes = Vec::new();
    file.take(max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|_| not_found())?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(bytes.len() as u64));
    }
    String::from_utf8(bytes).map_err(|_| LspError::InvalidArgument {
        field: "path".into(),
        message: format!("{} is not UTF-8 text", path.display()),
    })
}

/// The text of 0-based line `index`, without its line terminator.
pub fn line_at(text: &str, index: usize) -> Option<&str> {
    let line = text.split('\n').nth(index)?;
    Some(line.strip_suffix('\r').unwrap_or(line))
}

/// Number of lines as an editor counts them.
pub fn line_count(text: &str) -> usize {
    let n = text.split('\n').count();
    if text.ends_with('\n') { n - 1 } else { n }
}

/// Encodes the 0-based scalar offset `chars` on `line` as a server offset.
pub fn to_server_offset(line: &str, chars: usize, encoding: Encoding) -> u32 {
    let prefix = line.chars().take(chars);
    let n: usize = match encoding {
        Encoding::Utf8 => prefix.map(char::len_utf8).sum(),
        Encoding::Utf16 => prefix.map(char::len_utf16).sum(),
    };
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Decodes a server offset on `line` to a 0-based scalar offset (clamped to
/// the line's end; an offset inside a character rounds down).
pub fn from_server_offset(line: &str, offset: u32, encoding: Encoding) -> usize {
    let mut units = 0usize;
    for (i, c) in line.chars().enumerate() {
        let w = match encoding {
            Encoding::Utf8 => c.len_utf8(),
            Encoding::Utf16 => c.len_utf16(),
        };
        if units + w > offset as usize {
            return i;
        }
        units += w;
    }
    line.chars().count()
}

/// Lines scanned at most by [`c_construct_end`].
const CONSTRUCT_SCAN_LINES: usize = 5000;

/// The last line (0-based) of the C-family construct (C, C++) whose name
/// is at scalar column `column` of 0-based line `line`, read from the text
/// alone: a preprocessor directive ends with its last continued line;
/// otherwise the scan, from the name on, skips comments, string and
/// character literals and preprocessor lines, and the construct ends at a
/// `;` outside brackets, at the `}` closing a block opened outside
/// brackets (a function's or a type's body), at a `,` outside brackets
/// before any parenthesised group (an enumerator, one of several
/// declarators), or before a bracket it did not open (the last enumerator
/// of an `enum`). `None` when no end is found within a few thousand
/// lines.
pub fn c_construct_end(text: &str, line: usize, column: usize) -> Option<usize> {
    let lines: Vec<&str> = text
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if lines.get(line)?.trim_start().starts_with('#') {
        let mut end = line;
        while end + 1 < lines.len() && lines[end].ends_with('\\') {
            end += 1;
        }
        return Some(end);
    }
    let mut depth = 0usize;
    let mut braced = false;
    let mut grouped = false;
    let mut in_comment = false;
    let mut in_directive = false;
    let mut last_seen = line;
    for (n, text) in lines
        .iter()
        .enumerate()
        .skip(line)
        .take(CONSTRUCT_SCAN_LINES)
    {
        if n != line && !in_comment && (in_directive || text.trim_start().starts_with('#')) {
            in_directive = text.ends_with('\\');
            continue;
        }
        let mut chars = text
            .chars()
            .skip(if n == line { column } else { 0 })
            .peekable();
        let mut quote: Option<char> = None;
        while let Some(c) = chars.next() {
            if in_comment {
                if c == '*' && chars.peek() == Some(&'/') {
                    chars.next();
                    in_comment = false;
                }
                continue;
            }
            if let Some(q) = quote {
                if c == '\\' {
                    chars.next();
                } else if c == q {
                    quote = None;
                }
                continue;
            }
            match c {
                '/' if chars.peek() == Some(&'/') => break,
                '/' if chars.peek() == Some(&'*') => {
                    chars.next();
                    in_comment = true;
                    continue;
                }
                '"' | '\'' => quote = Some(c),
                '(' | '[' | '{' => {
                    braced |= depth == 0 && c == '{';
                    depth += 1;
                }
                ')' | ']' | '}' => {
                    if depth == 0 {
                        return Some(last_seen);
                    }
                    depth -= 1;
                    if depth == 0 {
                        if c == '}' && braced {
                            return Some(n);
                        }
                        grouped |= c == ')';
                    }
                }
                ';' if depth == 0 => return Some(n),
                ',' if depth == 0 && !grouped => return Some(n),
                _ => {}
            }
            if !c.is_whitespace() {
                last_seen = n;
            }
        }
    }
    None
}

fn is_ident_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The identifier covering 0-based scalar offset `chars` on `line`.
pub fn identifier_at(line: &str, chars: usize) -> Option<String> {
    let v: Vec<char> = line.chars().collect();
    if chars >= v.len() || !is_ident_char(v[chars]) {
        return None;
    }
    let mut start = chars;
    while start > 0 && is_ident_char(v[start - 1]) {
        start -= 1;
    }
    let mut end = chars;
    while end < v.len() && is_ident_char(v[end]) {
        end += 1;
    }
    Some(v[start..end].iter().collect())
}

/// A position resolved on a line: 0-based scalar offset and the symbol
/// there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinePosition {
    /// 0-based Unicode-scalar offset.
    pub chars: usize,
    /// The identifier at that offset, if any.
    pub symbol: Option<String>,
}

/// Resolves `address` on 1-based line `line` of `text`, or
/// `LSP_INVALID_POSITION` echoing the line.
pub fn resolve(text: &str, line: u32, address: &Address) -> Result<LinePosition, LspError> {
    let count = line_count(text);
    let line_text = if line == 0 {
        None
    } else {
        line_at(text, line as usize - 1).filter(|_| (line as usize) <= count.max(1))
    };
    let Some(line_text) = line_text else {
        return Err(LspError::InvalidPosition {
            message: format!("line {line} is out of range: the file has {count} lines"),
            line_text: None,
        });
    };
    let invalid = |message: String| LspError::InvalidPosition {
        message,
        line_text: Some(line_text.to_owned()),
    };
    match address {
        Address::Column(column) => {
            let len = line_text.chars().count();
            if *column == 0 || *column as usize > len + 1 {
                return Err(invalid(format!(
                    "column {column} is out of range: line {line} has {len} characters (columns are 1-based)"
                )));
            }
            let chars = *column as usize - 1;
            Ok(LinePosition {
                chars,
                symbol: identifier_at(line_text, chars),
            })
        }
        Address::Symbol { name, occurrence } => {
            if name.is_empty() {
                return Err(LspError::InvalidArgument {
                    field: "symbol".into(),
                    message: "must not be empty".into(),
                });
            }
            if *occurrence == 0 {
                return Err(LspError::InvalidArgument {
                    field: "occurrence".into(),
                    message: "is 1-based".into(),
                });
            }
            let hits = find_symbol(line_text, name);
            match hits.get(*occurrence as usize - 1) {
                Some(&chars) => Ok(LinePosition {
                    chars,
                    symbol: Some(name.clone()),
                }),
                None if hits.is_empty() => {
                    Err(invalid(format!("symbol `{name}` is not on line {line}")))
                }
                None => Err(invalid(format!(
                    "symbol `{name}` occurs {} time(s) on line {line}, not {occurrence}",
                    hits.len()
                ))),
            }
        }
    }
}

/// 0-based scalar offsets where `name` occurs on `line`; an identifier-like
/// name must match a whole identifier.
pub fn find_symbol(line: &str, name: &str) -> Vec<usize> {
    let hay: Vec<char> = line.chars().collect();
    let needle: Vec<char> = name.chars().collect();
    let whole_word = needle.iter().all(|c| is_ident_char(*c));
    let mut hits = Vec::new();
    if needle.len() > hay.len() {
        return hits;
    }
    for i in 0..=hay.len() - needle.len() {
        if hay[i..i + needle.len()] != needle[..] {
            continue;
        }
        if whole_word {
            let before = i > 0 && is_ident_char(hay[i - 1]);
            let after = hay.get(i + needle.len()).is_some_and(|c| is_ident_char(*c));
            if before || after {
                continue;
            }
        }
        hits.push(i);
    }
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn c_construct_ends_where_the_declaration_or_body_does() {
        let src = "\
typedef struct LZ4F_dctx_s LZ4F_dctx;  /* a { in a comment */
int add(int a,
        int b)
{
    const char *s = \"}\"; // }
    if (a) { return '}'; }
#define OPEN { \\
    {
    /* } */
    return a + b;
}
enum E {
    A = 1,
    B /* last */
};
#define TWICE(x) \\
    ((x) * 2)
struct S {
    int a, b;
} s1;
int f(void);
int broken(
";
        let end = |line: usize, column: usize| c_construct_end(src, line, column);
        assert_eq!(end(0, 27), Some(0));
        assert_eq!(end(1, 4), Some(10));
        assert_eq!(end(11, 5), Some(14));
        assert_eq!(end(12, 4), Some(12));
        assert_eq!(end(13, 4), Some(13));
        assert_eq!(end(15, 8), Some(16));
        assert_eq!(end(17, 7), Some(19));
        assert_eq!(end(18, 8), Some(18));
        assert_eq!(end(20, 4), Some(20));
        assert_eq!(end(21, 4), None);
        assert_eq!(end(99, 0), None);
    }

    #[test]
    fn offsets_round_trip_through_both_encodings() {
        let line = "let s = \"é😀\"; total";
        let chars = line.chars().count() - 5;
        assert_eq!(identifier_at(line, chars), Some("total".into()));
        let u8 = to_server_offset(line, chars, Encoding::Utf8);
        let u16 = to_server_offset(line, chars, Encoding::Utf16);
        assert_eq!((chars, u8, u16), (14, 18, 15));
        assert_eq!(from_server_offset(line, u8, Encoding::Utf8), chars);
        assert_eq!(from_server_offset(line, u16, Encoding::Utf16), chars);
    }

    #[test]
    fn symbols_match_whole_identifiers_and_pick_occurrences() {
        assert_eq!(find_symbol("area(a.area, area_x)", "area"), vec![0, 7]);
        let text = "fn f() {}\nlet x = area(area);\n";
        let at = |occ| {
            resolve(
                text,
                2,
                &Address::Symbol {
                    name: "area".into(),
                    occurrence: occ,
                },
            )
        };
        assert_eq!(
            at(2),
            Ok(LinePosition {
                chars: 13,
                symbol: Some("area".into())
            })
        );
        assert_eq!(
            at(3),
            Err(LspError::InvalidPosition {
                message: "symbol `area` occurs 2 time(s) on line 2, not 3".into(),
                line_text: Some("let x = area(area);".into())
            })
        );
        assert_eq!(
            resolve(text, 3, &Address::Column(1)),
            Err(LspError::InvalidPosition {
                message: "line 3 is out of range: the file has 2 lines".into(),
                line_text: None
            })
        );
    }
}
