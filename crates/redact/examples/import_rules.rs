//! Import the credential formats of a Betterleaks rule file into
//! `rules/imported.toml`, the data the crate's build reads.
//!
//! ```text
//! cargo run -p redact --example import_rules -- PATH/betterleaks.toml REVISION \
//!     > crates/redact/rules/imported.toml
//! ```
//!
//! `REVISION` names where the file came from (the upstream commit); it is
//! written into the generated file's doc. The selection is the policy the
//! crate doc states: the rules upstream marks `confidence = "high"` (and the
//! few in [`ALSO`]), less those that only name an identifier
//! (`skipReport`), that apply to files of one name (`path`), whose filter
//! uses a function this crate does not implement, or that [`DENY`] lists.
//! Every rule left out is named on stderr with the reason. Then run
//! `cargo test -p redact`: a rule that does not compile, or whose matches
//! cannot be tied to a literal, fails `builtin_rules_compile`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;

/// Rules taken although upstream marks them below "high".
const ALSO: &[(&str, &str)] = &[(
    "aws-secret-access-key",
    "the secret half of an AWS key pair; its 40-character value needs more \
     entropy than any hex digest has",
)];

/// Rules left out, and why.
const DENY: &[(&str, &str)] = &[
    (
        "curl-auth-header",
        "a match may run five lines past the word `curl`, so the output of any \
         curl command would be held back until five more lines arrive; a \
         token in such a command is caught by its own format",
    ),
    (
        "curl-auth-user",
        "runs five lines past `curl`, like curl-auth-header",
    ),
    (
        "gcp-service-account",
        "starts at any `{` and runs to the next: it would hold back output at \
         every brace; the key inside is caught by `private-key`",
    ),
    (
        "gcp-application-default-credentials",
        "starts at any `{` and runs to the next, like gcp-service-account",
    ),
];

/// Rules taken with tests of our own added: (id, a minimum Shannon
/// entropy in bits per byte, a pattern the whole secret must match, why).
const TIGHTEN: &[(&str, f64, &str, &str)] = &[(
    "square-access-token",
    4.5,
    r"^(?:EAAA[\w-]{60}|sq0atp-[\w-]{22,60})$",
    "`EAAA` is how base64 spells common runs of machine code (x86 padding), \
     so base64 of a binary matches the format dozens of times per MB; a real \
     access token is `EAAA` and exactly 60 characters, above 4.6 bits",
)];

/// The marker's wording for rule ids that start with these, first match wins.
const LABELS: &[(&str, &str)] = &[
    ("github-", "github token"),
    ("gitlab-", "gitlab token"),
    ("slack-webhook", "slack webhook"),
    ("slack-", "slack token"),
    ("stripe-", "stripe key"),
    ("aws-secret-access-key", "aws secret key"),
    ("aws-access-token", "aws access key"),
    ("anthropic-", "anthropic key"),
    ("openai-", "openai key"),
    ("npm-", "npm token"),
    ("pypi-", "pypi token"),
    ("private-key", "private key"),
    ("jwt", "jwt"),
    ("gcp-api-key", "google api key"),
    ("azure-ad-client-secret", "azure client secret"),
];

fn label(id: &str) -> String {
    if let Some((_, l)) = LABELS.iter().find(|(p, _)| id.starts_with(p)) {
        return (*l).to_owned();
    }
    let base = match id.rsplit_once('.') {
        Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base,
        _ => id,
    };
    base.replace('-', " ")
}

/// One clause of a filter: a finding is discarded when any clause holds.
enum Clause {
    EntropyBelow(f64),
    EntropyAtMost(f64),
    Matches(Vec<String>),
    NotMatches(Vec<String>),
    Contains(Vec<String>),
}

/// Split `text` on `sep` outside brackets, parentheses and quotes.
fn split_top(text: &str, sep: &str) -> Vec<String> {
    let (mut depth, mut quote, mut parts, mut start) = (0i32, None::<char>, Vec::new(), 0);
    let bytes: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < bytes.len() {
        let (at, c) = bytes[i];
        match quote {
            Some('"') if c == '\\' => i += 1,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '`' => quote = Some(c),
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                _ if depth == 0 && text[at..].starts_with(sep) => {
                    parts.push(text[start..at].trim().to_owned());
                    start = at + sep.len();
                }
                _ => {}
            },
        }
        i += 1;
    }
    parts.push(text[start..].trim().to_owned());
    parts
}

/// The patterns of a `matchesAny` list, translated.
fn patterns(list: Vec<String>) -> Result<Vec<String>, String> {
    list.iter().map(|p| translate(p)).collect()
}

/// The strings of a CEL list `[a, b]`: backquoted raw or double-quoted.
fn strings(list: &str) -> Option<Vec<String>> {
    let inner = list.trim().strip_prefix('[')?.strip_suffix(']')?;
    let mut out = Vec::new();
    for item in split_top(inner, ",") {
        if item.is_empty() {
            continue;
        }
        if let Some(raw) = item.strip_prefix('`').and_then(|s| s.strip_suffix('`')) {
            out.push(raw.to_owned());
        } else if let Some(q) = item.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
            let mut s = String::new();
            let mut chars = q.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    match chars.next()? {
                        'n' => s.push('\n'),
                        't' => s.push('\t'),
                        other => s.push(other),
                    }
                } else {
                    s.push(c);
                }
            }
            out.push(s);
        } else {
            return None;
        }
    }
    Some(out)
}

/// `text` without parentheses that enclose all of it.
fn strip_parens(text: &str) -> &str {
    let t = text.trim();
    if !t.starts_with('(') {
        return t;
    }
    let (mut depth, mut quote) = (0i32, None::<char>);
    let mut escaped = false;
    for (at, c) in t.char_indices() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some('"') if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None => match c {
                '"' | '`' => quote = Some(c),
                '(' => depth += 1,
                ')' => {
                    depth -= 1;
                    if depth == 0 {
                        return if at + 1 == t.len() {
                            t[1..at].trim()
                        } else {
                            t
                        };
                    }
                }
                _ => {}
            },
        }
    }
    t
}

/// The clauses of a filter, or why it cannot be imported.
fn clauses(filter: &str) -> Result<Vec<Clause>, String> {
    const SECRET: &str = "finding[\"secret\"]";
    let mut out = Vec::new();
    for part in split_top(strip_parens(filter), "||") {
        let part = strip_parens(&part).to_owned();
        let call = |name: &str| -> Option<Vec<String>> {
            let rest = part
                .strip_prefix(name)?
                .strip_prefix('(')?
                .strip_suffix(')')?;
            let rest = rest.trim().strip_prefix(SECRET)?.trim().strip_prefix(',')?;
            strings(rest)
        };
        let entropy = format!("entropy({SECRET})");
        if let Some(rest) = part.strip_prefix(&entropy) {
            let rest = rest.trim();
            if let Some(n) = rest.strip_prefix("<=") {
                out.push(Clause::EntropyAtMost(
                    n.trim().parse().map_err(|_| part.clone())?,
                ));
            } else if let Some(n) = rest.strip_prefix('<') {
                out.push(Clause::EntropyBelow(
                    n.trim().parse().map_err(|_| part.clone())?,
                ));
            } else {
                return Err(format!("unknown entropy test: {part}"));
            }
        } else if let Some(list) = call("matchesAny") {
            out.push(Clause::Matches(patterns(list)?));
        } else if let Some(list) = call("!matchesAny") {
            out.push(Clause::NotMatches(patterns(list)?));
        } else if let Some(list) = call("containsAny") {
            out.push(Clause::Contains(list));
        } else if part.starts_with("matchesAny(attributes[\"path\"]") {
            // Output has no path: a test on it never holds.
        } else {
            return Err(format!(
                "filter uses what this crate does not implement: {}",
                part.lines().next().unwrap_or("")
            ));
        }
    }
    Ok(out)
}

/// `pattern` in the syntax of the `regex` crate: Go's RE2 takes a `{`
/// that opens no repetition as a literal, `regex` wants it escaped.
/// `Err` when even that does not parse.
fn translate(pattern: &str) -> Result<String, String> {
    if regex_syntax::parse(pattern).is_ok() {
        return Ok(pattern.to_owned());
    }
    let chars: Vec<char> = pattern.chars().collect();
    let (mut out, mut i, mut class, mut open_rep) = (String::new(), 0, false, false);
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(&next) = chars.get(i + 1) {
                    out.push(next);
                }
                i += 2;
                continue;
            }
            '[' if !class => class = true,
            ']' if class => class = false,
            '{' if !class => {
                let rest: String = chars[i + 1..].iter().collect();
                let rep = rest.split_once('}').is_some_and(|(inner, _)| {
                    let mut parts = inner.splitn(2, ',');
                    let lo = parts.next().unwrap_or("");
                    let hi = parts.next().unwrap_or("0");
                    !lo.is_empty()
                        && lo.chars().all(|c| c.is_ascii_digit())
                        && hi.chars().all(|c| c.is_ascii_digit())
                });
                if rep {
                    open_rep = true;
                } else {
                    out.push('\\');
                }
            }
            '}' if !class => {
                if open_rep {
                    open_rep = false;
                } else {
                    out.push('\\');
                }
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    regex_syntax::parse(&out).map(|_| out.clone()).map_err(|e| {
        format!(
            "does not parse: {}",
            e.to_string().lines().last().unwrap_or("")
        )
    })
}

/// `s` as a TOML string.
fn string(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

/// A discard list as TOML: `[{ entropy_below = 3.5 }, { matches = [...] }]`.
fn render(clauses: &[Clause]) -> String {
    let list = |v: &[String]| {
        let items: Vec<String> = v.iter().map(|s| string(s)).collect();
        format!("[{}]", items.join(", "))
    };
    let items: Vec<String> = clauses
        .iter()
        .map(|c| match c {
            Clause::EntropyBelow(n) => format!("{{ entropy_below = {n:?} }}"),
            Clause::EntropyAtMost(n) => format!("{{ entropy_at_most = {n:?} }}"),
            Clause::Matches(v) => format!("{{ matches = {} }}", list(v)),
            Clause::NotMatches(v) => format!("{{ unless = {} }}", list(v)),
            Clause::Contains(v) => format!("{{ contains = {} }}", list(v)),
        })
        .collect();
    format!("[{}]", items.join(", "))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [path, revision] = args.as_slice() else {
        eprintln!(
            "usage: import_rules PATH/betterleaks.toml REVISION > crates/redact/rules/imported.toml"
        );
        std::process::exit(2);
    };
    let text = std::fs::read_to_string(path).expect("read the rule file");
    let config: toml::Table = toml::from_str(&text).expect("parse the rule file");
    let global = config
        .get("filter")
        .and_then(|f| f.as_str())
        .map(|f| clauses(f).expect("the global filter"))
        .unwrap_or_default();
    let rules = config["rules"].as_array().expect("[[rules]]");
    let mut out = String::new();
    let mut taken = 0;
    for rule in rules {
        let field = |k: &str| rule.get(k).and_then(|v| v.as_str()).unwrap_or("");
        let id = field("id");
        let skip = |why: &str| eprintln!("left out {id}: {why}");
        if let Some((_, why)) = DENY.iter().find(|(d, _)| *d == id) {
            skip(why);
            continue;
        }
        let also = ALSO.iter().any(|(a, _)| *a == id);
        if field("confidence") != "high" && !also {
            skip(&format!("confidence {:?}", field("confidence")));
            continue;
        }
        if rule.get("skipReport").and_then(|v| v.as_bool()) == Some(true) && !also {
            skip("names an identifier, not a secret (skipReport)");
            continue;
        }
        if !field("path").is_empty() {
            skip("applies to files of one name (path)");
            continue;
        }
        if field("regex").is_empty() {
            skip("no regex");
            continue;
        }
        let discard = match clauses(field("filter")) {
            _ if field("filter").trim().is_empty() => Vec::new(),
            Ok(c) => c,
            Err(why) => {
                skip(&why);
                continue;
            }
        };
        let mut discard = discard;
        if let Some((_, floor, shape, _)) = TIGHTEN.iter().find(|(t, _, _, _)| *t == id) {
            discard.push(Clause::EntropyBelow(*floor));
            discard.push(Clause::NotMatches(vec![(*shape).to_owned()]));
        }
        let regex = match translate(field("regex")) {
            Ok(r) => r,
            Err(why) => {
                skip(&why);
                continue;
            }
        };
        taken += 1;
        writeln!(
            out,
            "\n[[rule]]\nid = {}\nkind = {}\nregex = {}\ndiscard = {}",
            string(id),
            string(&label(id)),
            string(&regex),
            render(&discard)
        )
        .unwrap();
    }
    eprintln!("imported {taken} of {} rules", rules.len());
    let also: Vec<String> = ALSO
        .iter()
        .map(|(id, why)| format!("# * `{id}`: {why}."))
        .collect();
    let tighten: Vec<String> = TIGHTEN
        .iter()
        .map(|(id, floor, shape, why)| {
            format!("# * `{id}`, entropy at least {floor}, the whole secret `{shape}`: {why}.")
        })
        .collect();
    let deny: Vec<String> = DENY
        .iter()
        .map(|(id, why)| format!("# * `{id}`: {why}."))
        .collect();
    print!(
        "# The credential formats imported from Betterleaks' rule file.\n\
         #\n\
         # Written by `cargo run -p redact --example import_rules` from\n\
         # `config/betterleaks.toml` at {revision} (see\n\
         # the crate doc for how to update); the build reads it (build.rs), so a rule\n\
         # changed here is the rule the redactor runs. {taken} of its {} rules: those\n\
         # marked `confidence = \"high\"`, less the ones the importer names on\n\
         # stderr, plus:\n\
         #\n{}\n\
         #\n\
         # Taken with tests of our own added:\n\
         #\n{}\n\
         #\n\
         # Left out on purpose:\n\
         #\n{}\n\
         #\n\
         # Betterleaks is MIT-licensed:\n\
         #\n\
         # > Copyright (c) 2026 Zachary Rice\n\
         # >\n\
         # > Permission is hereby granted, free of charge, to any person obtaining a copy\n\
         # > of this software and associated documentation files (the \"Software\"), to deal\n\
         # > in the Software without restriction, including without limitation the rights\n\
         # > to use, copy, modify, merge, publish, distribute, sublicense, and/or sell\n\
         # > copies of the Software, and to permit persons to whom the Software is\n\
         # > furnished to do so, subject to the following conditions:\n\
         # >\n\
         # > The above copyright notice and this permission notice shall be included in all\n\
         # > copies or substantial portions of the Software.\n\
         # >\n\
         # > THE SOFTWARE IS PROVIDED \"AS IS\", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR\n\
         # > IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,\n\
         # > FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE\n\
         # > AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER\n\
         # > LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,\n\
         # > OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE\n\
         # > SOFTWARE.\n\
         \n\
         source = {}\n\
         global_discard = {}\n{out}",
        rules.len(),
        also.join("\n"),
        tighten.join("\n"),
        deny.join("\n"),
        string(&format!(
            "betterleaks config/betterleaks.toml at {revision}"
        )),
        render(&global),
    );
}
