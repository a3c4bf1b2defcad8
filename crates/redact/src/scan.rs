//! The scanner both redactors run: it finds the secrets in a window of a
//! byte stream and says how far the window is decided.
//!
//! A **candidate** is a rule and a start position `t` where a match may
//! begin: a trigger of the rule occurs at `k` with `t` in
//! `[k - lead, k]`. Every match of every rule starts at a candidate (the
//! triggers are derived so, see [`rules`](crate::rules)), and the scanner
//! asks of each candidate one question: what is the rule's leftmost-first
//! match anchored at `t`? The answer is **final** once the rule's anchored
//! DFA, stepped from `t`, has died (no later byte can change it), or the
//! input has ended, or [`MAX_MATCH`] bytes have passed `t` (the match is
//! then taken on those bytes alone, in every mode alike). Until then the
//! candidate is **open** and nothing from `t` on is released.
//!
//! The secrets are the union of every final match's secret and every
//! occurrence of every known value; overlapping ones merge into one
//! redaction. Since each answer depends only on the bytes, never on where
//! the chunks were cut, streaming and one-shot redaction agree byte for
//! byte (the tests check it at every cut of the corpus).
//!
//! What may be released is everything before the **hold**: the earliest
//! of an open candidate's start, a tail that may begin a match whose
//! trigger has not fully arrived (a trigger's proper prefix at the end
//! whose DFA is still alive, or for rules with a lead any live start in
//! the last `lead + trigger` bytes), a tail that begins a known value, and
//! the start of a redaction that runs past it.

use std::collections::HashSet;
use std::sync::Arc;

use regex_automata::hybrid::LazyStateID;
use regex_automata::hybrid::dfa::Cache as DfaCache;
use regex_automata::util::captures::Captures;

use crate::known::KnownSet;
use crate::rules::{MAX_MATCH, RuleSet, Walk};

/// What a redaction names. Where two redactions cover the same bytes,
/// the one that sorts first names them: a known value (the caller's
/// word), then the rule that comes first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum KindRef {
    /// A known value, by index in the known set.
    Known(usize),
    /// A rule, by index in the rule set.
    Rule(usize),
}

/// A secret's place in the stream, in absolute byte offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// First byte of the secret.
    pub start: u64,
    /// One past its last byte.
    pub end: u64,
    /// What it is.
    pub kind: KindRef,
}

/// An open candidate, with where its DFA walk stopped.
struct Open {
    rule: usize,
    start: u64,
    walked_to: u64,
    state: Option<LazyStateID>,
    matched: bool,
    clears: usize,
}

/// Candidates, decided secrets and how far the input has been searched.
pub struct Scanner {
    rules: Arc<RuleSet>,
    known: Arc<KnownSet>,
    caches: Vec<Option<DfaCache>>,
    captures: Vec<Option<Captures>>,
    open: Vec<Open>,
    tried: HashSet<(usize, u64)>,
    spans: Vec<Span>,
    triggers_done: u64,
    known_done: u64,
}

/// A window of the stream: `hay` starts at absolute offset `base`;
/// everything before `released` has been given out.
#[derive(Clone, Copy)]
pub struct Window<'a> {
    /// The bytes held, history included.
    pub hay: &'a [u8],
    /// The absolute offset of `hay[0]`.
    pub base: u64,
    /// Everything before this absolute offset has been released.
    pub released: u64,
    /// No byte will follow `hay`.
    pub finished: bool,
}

impl Window<'_> {
    fn end(&self) -> u64 {
        self.base + self.hay.len() as u64
    }

    fn at(&self, abs: u64) -> usize {
        (abs - self.base) as usize
    }
}

/// The DFA cache of `rule` in `slot`, made on first use.
fn cache_of<'a>(
    slot: &'a mut Option<DfaCache>,
    rule: &crate::rules::Rule,
) -> Option<&'a mut DfaCache> {
    if slot.is_none() {
        *slot = rule.dfa_cache();
    }
    slot.as_mut()
}

/// Whether a match may be sought from `t`: not before what was released,
/// and not at the window's first byte unless that is the stream's (there
/// the window's edge would pass for the start of the text).
fn startable(t: u64, w: Window<'_>) -> bool {
    t >= w.released && (t > w.base || w.base == 0)
}

impl Scanner {
    /// A scanner with nothing seen.
    pub fn new(rules: Arc<RuleSet>, known: Arc<KnownSet>) -> Scanner {
        let caches = rules.rules.iter().map(|_| None).collect();
        let captures = rules.rules.iter().map(|_| None).collect();
        Scanner {
            rules,
            known,
            caches,
            captures,
            open: Vec::new(),
            tried: HashSet::new(),
            spans: Vec::new(),
            triggers_done: 0,
            known_done: 0,
        }
    }

    /// Search what `w` adds, decide what can be decided, and return the
    /// hold: the absolute offset before which everything is final.
    pub fn advance(&mut self, w: Window<'_>) -> u64 {
        self.find_known(w);
        self.find_candidates(w);
        let mut i = 0;
        while i < self.open.len() {
            if self.decide(i, w) {
                self.open.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if w.finished {
            return w.end();
        }
        self.hold(w)
    }

    fn find_known(&mut self, w: Window<'_>) {
        if self.known.values.is_empty() {
            return;
        }
        let from = w.base.max(
            self.known_done
                .saturating_sub(self.known.max_len as u64 - 1),
        );
        let (done, released) = (self.known_done, w.released);
        let spans = &mut self.spans;
        self.known.find(&w.hay[w.at(from)..], |s, e, i| {
            let (start, end) = (from + s as u64, from + e as u64);
            if end > done && start >= released {
                spans.push(Span {
                    start,
                    end,
                    kind: KindRef::Known(i),
                });
            }
        });
        self.known_done = w.end();
    }

    fn find_candidates(&mut self, w: Window<'_>) {
        let rules = Arc::clone(&self.rules);
        let Some(ac) = rules.triggers.as_ref() else {
            return;
        };
        let from = w.base.max(
            self.triggers_done
                .saturating_sub(rules.max_trigger as u64 - 1),
        );
        let forget = (rules.max_trigger + crate::rules::MAX_LEAD) as u64;
        for m in ac.find_overlapping_iter(&w.hay[w.at(from)..]) {
            let (k, end) = (from + m.start() as u64, from + m.end() as u64);
            if end <= self.triggers_done {
                continue;
            }
            if self.tried.len() > 4096 {
                let floor = end.saturating_sub(forget);
                self.tried.retain(|&(_, t)| t >= floor);
            }
            for &rule in &rules.trigger_rules[m.pattern().as_usize()] {
                let lead = rules.rules[rule].lead as u64;
                for t in k.saturating_sub(lead).max(w.released)..=k {
                    // A rule without a lead has one candidate per trigger
                    // occurrence, each seen once; with a lead, the ranges
                    // of nearby triggers overlap.
                    if !startable(t, w) || (lead > 0 && !self.tried.insert((rule, t))) {
                        continue;
                    }
                    self.open.push(Open {
                        rule,
                        start: t,
                        walked_to: t,
                        state: None,
                        matched: false,
                        clears: 0,
                    });
                    let last = self.open.len() - 1;
                    if self.decide(last, w) {
                        self.open.pop();
                    }
                }
            }
        }
        self.triggers_done = w.end();
    }

    /// Walk open candidate `i` as far as `w` goes; if its answer is final,
    /// record its secret and return true.
    fn decide(&mut self, i: usize, w: Window<'_>) -> bool {
        let o = &self.open[i];
        let rule = &self.rules.rules[o.rule];
        if !rule.context_ok(w.hay, w.at(o.start)) {
            return true;
        }
        let cap = o.start + MAX_MATCH as u64;
        let end = w.end().min(cap);
        let Some(cache) = cache_of(&mut self.caches[o.rule], rule) else {
            return true;
        };
        let resume = o
            .state
            .filter(|_| cache.clear_count() == o.clears)
            .map(|state| (state, o.matched));
        let from = if resume.is_some() {
            o.walked_to
        } else {
            o.start
        };
        let walk = rule.walk(cache, w.hay, w.at(o.start), w.at(from), w.at(end), resume);
        let matched = match walk {
            Walk::Dead { matched } => Some(matched),
            Walk::Alive { .. } if end == cap || w.finished => Some(true),
            Walk::Alive { .. } => None,
        };
        if let Some(matched) = matched {
            // A DFA that died without a match state proves there is none.
            if matched {
                let caps = &mut self.captures[o.rule];
                if caps.is_none() {
                    *caps = rule.captures();
                }
                let found = caps
                    .as_mut()
                    .and_then(|caps| rule.secret_at(caps, w.hay, w.at(o.start), w.at(end)));
                if let Some((s, e)) = found {
                    self.spans.push(Span {
                        start: w.base + s as u64,
                        end: w.base + e as u64,
                        kind: KindRef::Rule(o.rule),
                    });
                }
            }
            return true;
        }
        let clears = cache.clear_count();
        let o = &mut self.open[i];
        if let Walk::Alive { state, matched } = walk {
            o.walked_to = if state.is_some() { end } else { o.start };
            o.state = state;
            o.matched = matched;
        }
        o.clears = clears;
        false
    }

    /// Whether a match of `rule` starting at `t` is still possible after
    /// the bytes of `w`.
    fn alive(&mut self, rule: usize, t: u64, w: Window<'_>) -> bool {
        let r = &self.rules.rules[rule];
        if !r.context_ok(w.hay, w.at(t)) {
            return false;
        }
        let Some(cache) = cache_of(&mut self.caches[rule], r) else {
            return false;
        };
        let walk = r.walk(cache, w.hay, w.at(t), w.at(t), w.hay.len(), None);
        matches!(walk, Walk::Alive { .. })
    }

    fn hold(&mut self, w: Window<'_>) -> u64 {
        let rules = Arc::clone(&self.rules);
        let n = w.end();
        let mut hold = self.open.iter().map(|o| o.start).min().unwrap_or(n);
        // A trigger that has begun but not arrived.
        let most = (rules.max_trigger.saturating_sub(1)).min(w.hay.len());
        let mut suffix = Vec::with_capacity(most);
        for s in 1..=most {
            let p = n - s as u64;
            if p < w.released {
                break;
            }
            suffix.clear();
            suffix.extend(w.hay[w.hay.len() - s..].iter().map(u8::to_ascii_lowercase));
            let Some(begun) = rules.partial.get(&suffix) else {
                continue;
            };
            for &rule in begun {
                let lead = rules.rules[rule].lead as u64;
                for t in p.saturating_sub(lead).max(w.released)..=p {
                    if t < hold && startable(t, w) && self.alive(rule, t, w) {
                        hold = t;
                    }
                }
            }
        }
        // A rule with a lead may have begun before its trigger's first byte.
        for &rule in &rules.leading {
            let r = &rules.rules[rule];
            let longest = r.triggers.iter().map(Vec::len).max().unwrap_or(1) as u64;
            let from = n
                .saturating_sub(r.lead as u64 + longest - 1)
                .max(w.released);
            for t in from..n {
                if t < hold && startable(t, w) && self.alive(rule, t, w) {
                    hold = t;
                }
            }
        }
        // A known value that has begun.
        let tail = self.known.partial_tail(w.hay) as u64;
        hold = hold.min(n - tail);
        hold.max(w.released)
    }

    /// Take the redactions that end by `hold`, merged where they overlap,
    /// in order, and the hold moved back to the start of one that runs
    /// past it.
    pub fn take(&mut self, hold: u64) -> (Vec<Span>, u64) {
        self.spans.sort_unstable_by(|a, b| {
            (a.start.cmp(&b.start))
                .then(b.end.cmp(&a.end))
                .then(a.kind.cmp(&b.kind))
        });
        let mut merged: Vec<Span> = Vec::new();
        for s in &self.spans {
            match merged.last_mut() {
                Some(last) if s.start < last.end => last.end = last.end.max(s.end),
                _ => merged.push(*s),
            }
        }
        let hold = merged
            .iter()
            .find(|m| m.start < hold && m.end > hold)
            .map_or(hold, |m| m.start);
        self.spans.retain(|s| s.start >= hold);
        self.tried.retain(|&(_, t)| t >= hold);
        merged.retain(|m| m.end <= hold);
        (merged, hold)
    }

    /// The rules this scanner runs.
    pub fn rules(&self) -> &RuleSet {
        &self.rules
    }

    /// The known values this scanner searches for.
    pub fn known(&self) -> &KnownSet {
        &self.known
    }
}
