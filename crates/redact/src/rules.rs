//! Credential formats: a rule's source form ([`RuleSpec`]), and the
//! compiled [`RuleSet`] the scanner runs.
//!
//! Each rule is compiled three ways from one regex:
//!
//! * **triggers**: literals such that every match starts at most
//!   [`Rule::lead`] bytes before an occurrence of one of them. They are
//!   derived from the regex itself (its prefix literals, after skipping a
//!   bounded lead such as a context character), not taken from upstream's
//!   `keywords`, so that the prefilter is exact: text with no trigger cannot
//!   hold a match. One Aho-Corasick automaton over every rule's triggers
//!   (ASCII case-insensitive) is the only pass over all the bytes.
//! * **a lazy DFA**, anchored, stepped byte by byte from a candidate start:
//!   when it dies, no later byte can change the match that starts there, so
//!   the streaming scanner knows the match is final without waiting for a
//!   fixed window.
//! * **a regex** with captures, run anchored at a candidate start once the
//!   DFA has died (or the input ended), to find the secret: the first
//!   unnamed group that took part, else the whole match.
//!
//! Every pattern is narrowed to ASCII before it is compiled: Unicode classes
//! lose their non-ASCII members and word boundaries become ASCII ones. The
//! formats are ASCII, and the narrowed automata stay small (upstream's
//! `[\w-]{50,1000}` is over the default size limit in Unicode mode).

use std::sync::{Arc, OnceLock};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind as AcMatchKind};
use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::{Cache as DfaCache, DFA};
use regex_automata::meta;
use regex_automata::nfa::thompson::{self, WhichCaptures};
use regex_automata::util::captures::Captures;
use regex_automata::util::syntax;
use regex_automata::{Anchored, Input, MatchKind, PatternID};
use regex_syntax::hir::literal::Extractor;
use regex_syntax::hir::{
    Capture, Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange, Hir, HirKind,
    Look, Repetition,
};

use crate::RedactError;

/// The longest match a rule may have, in bytes: a candidate still open at
/// this length is decided on the bytes it has. Also the bound on what a
/// [`StreamRedactor`](crate::StreamRedactor) holds back.
pub const MAX_MATCH: usize = 32 * 1024;

/// How far before its trigger a match may start, at most.
pub(crate) const MAX_LEAD: usize = 40;

/// The most triggers one rule may have.
const MAX_TRIGGERS: usize = 64;

/// A rule as written: an id, the kind its marker names, a regex (the
/// secret is its first unnamed capture group, else the whole match), and
/// when to discard a match.
#[derive(Clone, Copy, Debug)]
pub struct RuleSpec {
    /// Upstream's id (`github-pat`), or ours for a supplement.
    pub id: &'static str,
    /// What the marker says: `[redacted: {kind}]`.
    pub kind: &'static str,
    /// The pattern, in the syntax of the `regex` crate.
    pub regex: &'static str,
    /// A match is discarded when any of these holds for its secret.
    pub discard: &'static [Discard],
}

/// A test on a match's secret that discards the match when it holds.
#[derive(Clone, Copy, Debug)]
pub enum Discard {
    /// The secret's Shannon entropy (bits per byte) is below this.
    EntropyBelow(f64),
    /// The secret's Shannon entropy is at most this.
    EntropyAtMost(f64),
    /// The secret matches one of these regexes (unanchored).
    Matches(&'static [&'static str]),
    /// The secret matches none of these regexes.
    Unless(&'static [&'static str]),
    /// The secret contains one of these strings.
    Contains(&'static [&'static str]),
}

/// Shannon entropy of `bytes`, in bits per byte.
pub fn entropy(bytes: &[u8]) -> f64 {
    if bytes.is_empty() {
        return 0.0;
    }
    let mut counts = [0usize; 256];
    for &b in bytes {
        counts[usize::from(b)] += 1;
    }
    let n = bytes.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = c as f64 / n;
            -p * p.log2()
        })
        .sum()
}

/// A compiled [`Discard`].
pub(crate) enum Test {
    EntropyBelow(f64),
    EntropyAtMost(f64),
    Matches(Vec<meta::Regex>),
    Unless(Vec<meta::Regex>),
    Contains(Vec<&'static [u8]>),
}

impl Test {
    pub(crate) fn compile(id: &'static str, d: &Discard) -> Result<Test, RedactError> {
        let many = |patterns: &[&str]| -> Result<Vec<meta::Regex>, RedactError> {
            patterns
                .iter()
                .map(|p| {
                    meta::Regex::new(p).map_err(|e| RedactError::Rule {
                        id,
                        reason: format!("discard pattern {p:?}: {e}"),
                    })
                })
                .collect()
        };
        Ok(match d {
            Discard::EntropyBelow(n) => Test::EntropyBelow(*n),
            Discard::EntropyAtMost(n) => Test::EntropyAtMost(*n),
            Discard::Matches(p) => Test::Matches(many(p)?),
            Discard::Unless(p) => Test::Unless(many(p)?),
            Discard::Contains(s) => Test::Contains(s.iter().map(|s| s.as_bytes()).collect()),
        })
    }

    fn holds(&self, secret: &[u8]) -> bool {
        match self {
            Test::EntropyBelow(n) => entropy(secret) < *n,
            Test::EntropyAtMost(n) => entropy(secret) <= *n,
            Test::Matches(res) => res.iter().any(|re| re.is_match(secret)),
            Test::Unless(res) => !res.iter().any(|re| re.is_match(secret)),
            Test::Contains(needles) => needles
                .iter()
                .any(|n| secret.windows(n.len()).any(|w| w == *n)),
        }
    }
}

/// One compiled rule.
pub struct Rule {
    /// Its source.
    pub spec: RuleSpec,
    /// Every match starts at most this many bytes before a trigger.
    pub lead: usize,
    /// A one-character context the pattern began with (`(?:^|[\s=:])`),
    /// taken off it and checked as a look-behind instead, so that the
    /// character before a secret is not held back as if it were part of
    /// one.
    behind: Option<Behind>,
    /// The lowercased literals one of which every match holds, `lead`
    /// bytes or fewer from its start.
    pub triggers: Vec<Vec<u8>>,
    /// The narrowed pattern, compiled to `engines` on first use.
    hir: Hir,
    engines: OnceLock<Option<Engines>>,
    tests: Vec<Test>,
    /// Tests shared by every rule of the set (upstream's global filter).
    global: Arc<Vec<Test>>,
}

/// A rule's automata, built the first time a candidate needs them: most
/// rules never see one in a given process.
struct Engines {
    regex: meta::Regex,
    dfa: DFA,
    /// Capture group indices that are unnamed, in order.
    secret_groups: Vec<usize>,
}

impl Engines {
    fn build(hir: &Hir) -> Result<Engines, String> {
        let regex = meta::Builder::new()
            .configure(
                meta::Config::new()
                    .match_kind(MatchKind::LeftmostFirst)
                    .utf8_empty(false),
            )
            .syntax(syntax::Config::new().utf8(false))
            .build_from_hir(hir)
            .map_err(|e| e.to_string())?;
        let nfa = thompson::Compiler::new()
            .configure(
                thompson::Config::new()
                    .which_captures(WhichCaptures::None)
                    .utf8(false),
            )
            .build_from_hir(hir)
            .map_err(|e| e.to_string())?;
        let dfa = DFA::builder()
            .configure(DFA::config().match_kind(MatchKind::LeftmostFirst))
            .build_from_nfa(nfa)
            .map_err(|e| e.to_string())?;
        let info = regex.group_info();
        let secret_groups = (1..info.group_len(PatternID::ZERO))
            .filter(|&i| info.to_name(PatternID::ZERO, i).is_none())
            .collect();
        Ok(Engines {
            regex,
            dfa,
            secret_groups,
        })
    }
}

/// Where a DFA run from a candidate start stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Walk {
    /// No byte after this can change the match: decide now. `matched`:
    /// whether the DFA passed through a match state (else there is none).
    Dead {
        /// The DFA saw a match on its way.
        matched: bool,
    },
    /// Still alive at the end of the bytes given; resume from `state`
    /// (from the start when `None`, after the DFA gave up).
    Alive {
        /// Where to resume.
        state: Option<LazyStateID>,
        /// The DFA saw a match on its way.
        matched: bool,
    },
}

impl Rule {
    /// Compile `spec`; `global` tests apply too.
    pub(crate) fn compile(spec: RuleSpec, global: Arc<Vec<Test>>) -> Result<Rule, RedactError> {
        let fail = |reason: String| RedactError::Rule {
            id: spec.id,
            reason,
        };
        let parsed = regex_syntax::ParserBuilder::new()
            .build()
            .parse(spec.regex)
            .map_err(|e| fail(e.to_string()))?;
        let (hir, behind) = split_context(narrow(&parsed));
        let (triggers, lead) = triggers(&hir).ok_or_else(|| {
            fail("no literal every match starts near; it would be tried at every byte".into())
        })?;
        let tests = spec
            .discard
            .iter()
            .map(|d| Test::compile(spec.id, d))
            .collect::<Result<_, _>>()?;
        Ok(Rule {
            spec,
            lead,
            behind,
            triggers,
            hir,
            engines: OnceLock::new(),
            tests,
            global,
        })
    }

    /// Whether the context before `start` allows a match there.
    pub fn context_ok(&self, hay: &[u8], start: usize) -> bool {
        match &self.behind {
            None => true,
            Some(b) => match start.checked_sub(1) {
                None => b.at_start,
                Some(i) => b.bytes[usize::from(hay[i])],
            },
        }
    }

    /// Build this rule's automata now (they are built on first use
    /// otherwise), and say why when they cannot be.
    #[cfg(test)]
    pub fn build(&self) -> Result<(), RedactError> {
        if self.engines().is_some() {
            return Ok(());
        }
        Engines::build(&self.hir)
            .map(|_| ())
            .map_err(|reason| RedactError::Rule {
                id: self.spec.id,
                reason,
            })
    }

    /// The automata, built on first use; `None` if they cannot be built
    /// (the crate's tests build every built-in rule, so that is for
    /// patterns added later), and such a rule never matches.
    fn engines(&self) -> Option<&Engines> {
        self.engines
            .get_or_init(|| Engines::build(&self.hir).ok())
            .as_ref()
    }

    /// A fresh DFA cache for this rule.
    pub fn dfa_cache(&self) -> Option<DfaCache> {
        self.engines().map(|e| e.dfa.create_cache())
    }

    /// Step the anchored DFA for a match starting at `start` over
    /// `hay[from..end]`, resuming from `resume` (a state and whether a
    /// match was seen before it), or from the start state when `None`.
    pub fn walk(
        &self,
        cache: &mut DfaCache,
        hay: &[u8],
        start: usize,
        from: usize,
        end: usize,
        resume: Option<(LazyStateID, bool)>,
    ) -> Walk {
        let Some(Engines { dfa, .. }) = self.engines() else {
            return Walk::Dead { matched: false };
        };
        // A give-up is not a decision: the walk stays open and starts
        // again (the caller decides at MAX_MATCH at the latest).
        let gave_up = Walk::Alive {
            state: None,
            matched: false,
        };
        let (mut sid, mut matched) = match resume {
            Some(resume) => resume,
            None => {
                let input = Input::new(hay).range(start..end).anchored(Anchored::Yes);
                match dfa.start_state_forward(cache, &input) {
                    Ok(sid) => (sid, false),
                    Err(_) => return gave_up,
                }
            }
        };
        if sid.is_dead() {
            return Walk::Dead { matched };
        }
        for &b in &hay[from..end] {
            sid = match dfa.next_state(cache, sid, b) {
                Ok(sid) => sid,
                Err(_) => return gave_up,
            };
            if sid.is_tagged() {
                if sid.is_dead() {
                    return Walk::Dead { matched };
                }
                if sid.is_quit() {
                    return gave_up;
                }
                matched |= sid.is_match();
            }
        }
        Walk::Alive {
            state: Some(sid),
            matched,
        }
    }

    /// A capture buffer for [`secret_at`](Rule::secret_at).
    pub fn captures(&self) -> Option<Captures> {
        self.engines().map(|e| e.regex.create_captures())
    }

    /// The secret of the match anchored at `start` in `hay[..end]`, if
    /// there is one and no discard test holds.
    pub fn secret_at(
        &self,
        caps: &mut Captures,
        hay: &[u8],
        start: usize,
        end: usize,
    ) -> Option<(usize, usize)> {
        let input = Input::new(&hay[..end])
            .range(start..end)
            .anchored(Anchored::Yes);
        let engines = self.engines()?;
        engines.regex.search_captures(&input, caps);
        let whole = caps.get_match()?;
        let span = engines
            .secret_groups
            .iter()
            .find_map(|&i| caps.get_group(i))
            .unwrap_or_else(|| whole.span());
        if span.is_empty() {
            return None;
        }
        let secret = &hay[span.start..span.end];
        if self
            .tests
            .iter()
            .chain(self.global.iter())
            .any(|t| t.holds(secret))
        {
            return None;
        }
        Some((span.start, span.end))
    }
}

/// Every rule, and the one automaton over their triggers.
pub struct RuleSet {
    /// The rules, in source order.
    pub rules: Vec<Rule>,
    /// Over the distinct triggers, ASCII case-insensitive, overlapping.
    pub triggers: Option<AhoCorasick>,
    /// For each trigger pattern, the rules it belongs to.
    pub trigger_rules: Vec<Vec<usize>>,
    /// The longest trigger, in bytes.
    pub max_trigger: usize,
    /// For each proper prefix of a trigger (lowercased), the rules whose
    /// trigger it begins.
    pub partial: std::collections::HashMap<Vec<u8>, Vec<usize>>,
    /// Rules whose matches may start before their trigger.
    pub leading: Vec<usize>,
}

impl RuleSet {
    /// Compile `specs`; `global` discards apply to the rules whose flag
    /// is set.
    pub fn compile(specs: &[(RuleSpec, bool)], global: &[Discard]) -> Result<RuleSet, RedactError> {
        let shared = Arc::new(
            global
                .iter()
                .map(|d| Test::compile("global", d))
                .collect::<Result<Vec<_>, _>>()?,
        );
        let none = Arc::new(Vec::new());
        let rules: Vec<Rule> = specs
            .iter()
            .map(|(spec, with_global)| {
                let global = if *with_global { &shared } else { &none };
                Rule::compile(*spec, Arc::clone(global))
            })
            .collect::<Result<_, _>>()?;
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut trigger_rules: Vec<Vec<usize>> = Vec::new();
        let mut partial: std::collections::HashMap<Vec<u8>, Vec<usize>> = Default::default();
        for (i, rule) in rules.iter().enumerate() {
            for t in &rule.triggers {
                match patterns.iter().position(|p| p == t) {
                    Some(at) => trigger_rules[at].push(i),
                    None => {
                        patterns.push(t.clone());
                        trigger_rules.push(vec![i]);
                    }
                }
                for len in 1..t.len() {
                    let entry = partial.entry(t[..len].to_vec()).or_default();
                    if !entry.contains(&i) {
                        entry.push(i);
                    }
                }
            }
        }
        let max_trigger = patterns.iter().map(Vec::len).max().unwrap_or(0);
        let triggers = if patterns.is_empty() {
            None
        } else {
            Some(
                // A DFA: about four times the speed of the default NFA
                // over this many patterns, for about 1 MB.
                AhoCorasickBuilder::new()
                    .ascii_case_insensitive(true)
                    .match_kind(AcMatchKind::Standard)
                    .kind(Some(AhoCorasickKind::DFA))
                    .build(&patterns)
                    .map_err(|e| RedactError::Rule {
                        id: "triggers",
                        reason: e.to_string(),
                    })?,
            )
        };
        let leading = (0..rules.len()).filter(|&i| rules[i].lead > 0).collect();
        Ok(RuleSet {
            rules,
            triggers,
            trigger_rules,
            max_trigger,
            partial,
            leading,
        })
    }

    /// The built-in rules: the imported formats and the supplements.
    pub fn builtin() -> Result<Arc<RuleSet>, RedactError> {
        let specs: Vec<(RuleSpec, bool)> = crate::imported::RULES
            .iter()
            .map(|s| (*s, true))
            .chain(crate::supplement::RULES.iter().map(|s| (*s, false)))
            .collect();
        RuleSet::compile(&specs, crate::imported::GLOBAL_DISCARD).map(Arc::new)
    }
}

/// A one-character context before a match.
struct Behind {
    /// The bytes that may precede it.
    bytes: [bool; 256],
    /// Whether the start of the text may.
    at_start: bool,
}

/// `hir` without a leading one-character context (`(?:^|[class])`, or a
/// bare class outside any group), and that context. The two match alike:
/// the original matches at `t - 1` when the character there is in the
/// class (or at the start of the text when `^` is allowed) and the rest
/// matches at `t`; the secret is inside the rest.
fn split_context(hir: Hir) -> (Hir, Option<Behind>) {
    let HirKind::Concat(items) = hir.kind() else {
        return (hir, None);
    };
    let first = &items[0];
    let class_bytes = |h: &Hir| -> Option<[bool; 256]> {
        let mut bytes = [false; 256];
        match h.kind() {
            HirKind::Class(Class::Unicode(c)) => {
                for r in c.iter() {
                    for ch in r.start()..=r.end() {
                        bytes[usize::from(u8::try_from(u32::from(ch)).ok()?)] = true;
                    }
                }
            }
            HirKind::Class(Class::Bytes(c)) => {
                for r in c.iter() {
                    for b in r.start()..=r.end() {
                        bytes[usize::from(b)] = true;
                    }
                }
            }
            HirKind::Empty
            | HirKind::Literal(_)
            | HirKind::Look(_)
            | HirKind::Repetition(_)
            | HirKind::Capture(_)
            | HirKind::Concat(_)
            | HirKind::Alternation(_) => return None,
        }
        Some(bytes)
    };
    let behind = match first.kind() {
        HirKind::Alternation(alts) if alts.len() == 2 => {
            let start = |h: &Hir| matches!(h.kind(), HirKind::Look(Look::Start));
            match (&alts[0], &alts[1]) {
                (a, b) if start(a) => class_bytes(b),
                (a, b) if start(b) => class_bytes(a),
                _ => None,
            }
            .map(|bytes| Behind {
                bytes,
                at_start: true,
            })
        }
        HirKind::Class(_) => class_bytes(first).map(|bytes| Behind {
            bytes,
            at_start: false,
        }),
        HirKind::Empty
        | HirKind::Literal(_)
        | HirKind::Look(_)
        | HirKind::Repetition(_)
        | HirKind::Capture(_)
        | HirKind::Concat(_)
        | HirKind::Alternation(_) => None,
    };
    match behind {
        Some(behind) if items.len() > 1 => (Hir::concat(items[1..].to_vec()), Some(behind)),
        _ => (hir, None),
    }
}

/// `hir` with its classes cut to ASCII and its word boundaries ASCII.
fn narrow(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(lit) => Hir::literal(lit.0.clone()),
        HirKind::Class(Class::Unicode(class)) => {
            let mut class = class.clone();
            class.intersect(&ClassUnicode::new([ClassUnicodeRange::new('\0', '\x7f')]));
            Hir::class(Class::Unicode(class))
        }
        HirKind::Class(Class::Bytes(class)) => Hir::class(Class::Bytes(class.clone())),
        HirKind::Look(look) => Hir::look(ascii_look(*look)),
        HirKind::Repetition(rep) => Hir::repetition(Repetition {
            min: rep.min,
            max: rep.max,
            greedy: rep.greedy,
            sub: Box::new(narrow(&rep.sub)),
        }),
        HirKind::Capture(cap) => Hir::capture(Capture {
            index: cap.index,
            name: cap.name.clone(),
            sub: Box::new(narrow(&cap.sub)),
        }),
        HirKind::Concat(items) => Hir::concat(items.iter().map(narrow).collect()),
        HirKind::Alternation(items) => Hir::alternation(items.iter().map(narrow).collect()),
    }
}

fn ascii_look(look: Look) -> Look {
    match look {
        Look::WordUnicode => Look::WordAscii,
        Look::WordUnicodeNegate => Look::WordAsciiNegate,
        Look::WordStartUnicode => Look::WordStartAscii,
        Look::WordEndUnicode => Look::WordEndAscii,
        Look::WordStartHalfUnicode => Look::WordStartHalfAscii,
        Look::WordEndHalfUnicode => Look::WordEndHalfAscii,
        Look::Start
        | Look::End
        | Look::StartLF
        | Look::EndLF
        | Look::StartCRLF
        | Look::EndCRLF
        | Look::WordAscii
        | Look::WordAsciiNegate
        | Look::WordStartAscii
        | Look::WordEndAscii
        | Look::WordStartHalfAscii
        | Look::WordEndHalfAscii => look,
    }
}

/// `hir` with ASCII letters folded to lower case: a class that folds to
/// one byte becomes a literal, so `(?i)zoho` yields the literal `zoho`
/// rather than sixteen spellings.
fn fold(hir: &Hir) -> Hir {
    match hir.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(lit) => Hir::literal(lit.0.to_ascii_lowercase()),
        HirKind::Class(Class::Unicode(class)) => {
            let mut bytes = Vec::new();
            for r in class.iter() {
                for c in r.start()..=r.end() {
                    if c.is_ascii() {
                        bytes.push((c as u8).to_ascii_lowercase());
                    }
                }
            }
            folded_class(bytes)
        }
        HirKind::Class(Class::Bytes(class)) => {
            let bytes = class
                .iter()
                .flat_map(|r| r.start()..=r.end())
                .map(|b| b.to_ascii_lowercase())
                .collect();
            folded_class(bytes)
        }
        HirKind::Look(look) => Hir::look(*look),
        HirKind::Repetition(rep) => Hir::repetition(Repetition {
            min: rep.min,
            max: rep.max,
            greedy: rep.greedy,
            sub: Box::new(fold(&rep.sub)),
        }),
        HirKind::Capture(cap) => fold(&cap.sub),
        HirKind::Concat(items) => Hir::concat(items.iter().map(fold).collect()),
        HirKind::Alternation(items) => Hir::alternation(items.iter().map(fold).collect()),
    }
}

fn folded_class(mut bytes: Vec<u8>) -> Hir {
    bytes.sort_unstable();
    bytes.dedup();
    match bytes.as_slice() {
        [one] => Hir::literal(vec![*one]),
        _ => Hir::class(Class::Bytes(ClassBytes::new(
            bytes.iter().map(|&b| ClassBytesRange::new(b, b)),
        ))),
    }
}

/// The items of `hir` in sequence: concatenations and groups flattened.
fn sequence(hir: &Hir) -> Vec<Hir> {
    match hir.kind() {
        HirKind::Concat(items) => items.iter().flat_map(sequence).collect(),
        HirKind::Capture(cap) => sequence(&cap.sub),
        HirKind::Empty
        | HirKind::Literal(_)
        | HirKind::Class(_)
        | HirKind::Look(_)
        | HirKind::Repetition(_)
        | HirKind::Alternation(_) => vec![hir.clone()],
    }
}

/// The triggers of `hir` and its lead: skip leading items of bounded
/// length until the rest has a usable set of prefix literals.
fn triggers(hir: &Hir) -> Option<(Vec<Vec<u8>>, usize)> {
    let items = sequence(&fold(hir));
    let mut extractor = Extractor::new();
    extractor.limit_class(16).limit_total(4096);
    let mut lead = 0usize;
    for i in 0..items.len() {
        let seq = extractor.extract(&Hir::concat(items[i..].to_vec()));
        if let Some(found) = seq
            .literals()
            .and_then(|lits| usable(lits.iter().map(|l| l.as_bytes().to_vec()).collect()))
        {
            return Some((found, lead));
        }
        lead += items[i].properties().maximum_len()?;
        if lead > MAX_LEAD {
            return None;
        }
    }
    None
}

/// At most [`MAX_TRIGGERS`] literals of two bytes or more that begin
/// every one of `literals`: cut to the longest length that keeps the set
/// that small, less those that begin with another.
fn usable(literals: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    if literals.is_empty() || literals.iter().any(|l| l.len() < 2) {
        return None;
    }
    let longest = literals.iter().map(Vec::len).max()?;
    (2..=longest.min(16)).rev().find_map(|cut| {
        let mut set: Vec<Vec<u8>> = literals
            .iter()
            .map(|l| l[..l.len().min(cut)].to_vec())
            .collect();
        set.sort();
        set.dedup();
        // Sorted, a literal's prefixes come before it, and so does every
        // literal between them and it: comparing with the last one kept
        // drops each literal another one begins.
        let mut shortest: Vec<Vec<u8>> = Vec::new();
        for l in set {
            if !shortest.last().is_some_and(|kept| l.starts_with(kept)) {
                shortest.push(l);
            }
        }
        (shortest.len() <= MAX_TRIGGERS).then_some(shortest)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn triggers_of(pattern: &str) -> Option<(Vec<String>, usize)> {
        let hir = narrow(&regex_syntax::parse(pattern).unwrap());
        triggers(&hir).map(|(t, lead)| {
            (
                t.iter()
                    .map(|t| String::from_utf8_lossy(t).into_owned())
                    .collect(),
                lead,
            )
        })
    }

    #[test]
    fn triggers_are_prefix_literals_folded_to_lower_case() {
        assert_eq!(
            triggers_of(r"ghp_[0-9a-zA-Z]{36}"),
            Some((vec!["ghp_".into()], 0))
        );
        assert_eq!(
            triggers_of(r"(?i)\b(?:AccountKey|Azure_Key)\b(?s:.{0,24}?)([A-Za-z0-9+/]{86}==)"),
            Some((vec!["accountkey".into(), "azure_key".into()], 0))
        );
    }

    #[test]
    fn a_bounded_lead_is_skipped_to_reach_a_literal() {
        // A context character, then three characters and a digit before `Q~`.
        let (lits, lead) =
            triggers_of(r#"(?:^|[\\'"\s>=:(,)])([a-zA-Z0-9_~.]{3}\dQ~[a-zA-Z0-9_~.-]{31,34})"#)
                .unwrap();
        assert_eq!(lead, 4);
        assert_eq!(lits.len(), 10);
        assert_eq!(lits[0], "0q~");
    }

    #[test]
    fn a_pattern_without_a_literal_has_no_triggers() {
        assert_eq!(triggers_of(r"[a-z0-9]{32}"), None);
    }

    #[test]
    fn entropy_of_uniform_bytes_is_their_log() {
        assert_eq!(entropy(b"abcd"), 2.0);
        assert_eq!(entropy(b"aaaa"), 0.0);
    }
}
