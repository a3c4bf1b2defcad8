//! Planted secrets of every kind the redactor must catch, generated at
//! test time from a seeded PRNG in the shapes of the real formats (none is
//! a real credential), printed whole, in streams cut at every byte and in
//! random chunks: none may reach the output, and streaming must agree with
//! one-shot redaction byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use redact::{KnownSecret, Redactor};

mod planted;
use planted::{BASE64, Plant, Rng, plants};

/// Ordinary lines to set the secrets among.
const FILLER: &[&str] = &[
    "$ cargo build --release",
    "   Compiling redact v0.1.0 (/src/crates/redact)",
    "commit 3f9a2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d",
    "Author: A Person <person@example.com>",
    "{\"id\": \"6f1c2a9e-3b4d-4e5f-8a6b-7c8d9e0f1a2b\", \"ok\": true}",
    "total 48\ndrwxr-xr-x  5 user user 4096 Jan  1 00:00 .",
    "key: value, the key is in the file",
    "curl -s https://example.com/api/v1/items?page=2",
];

fn corpus(plants: &[Plant]) -> String {
    let mut text = String::new();
    for (i, plant) in plants.iter().enumerate() {
        text.push_str(FILLER[i % FILLER.len()]);
        text.push('\n');
        text.push_str(&plant.line);
        text.push('\n');
    }
    text.push_str("$ ");
    text
}

fn setup() -> (Redactor, Vec<Plant>) {
    let mut rng = Rng(0x5eed_0fd5);
    let plants = plants(&mut rng);
    let known = plants
        .iter()
        .filter(|p| p.kind.starts_with("env "))
        .map(|p| KnownSecret::new(p.kind, p.secret.clone()));
    let redactor = Redactor::builtin().unwrap().with_known(known);
    (redactor, plants)
}

fn leaks<'a>(plants: &'a [Plant], out: &[u8]) -> Vec<&'a str> {
    let out = String::from_utf8_lossy(out);
    plants
        .iter()
        .filter(|p| out.contains(p.secret.as_str()))
        .map(|p| p.secret.as_str())
        .collect()
}

fn stream_in(redactor: &Redactor, chunks: &[&[u8]]) -> Vec<u8> {
    let mut stream = redactor.stream();
    let (mut out, mut raw) = (Vec::new(), 0u64);
    for chunk in chunks {
        let released = stream.push(chunk);
        // Each release starts where the last one ended.
        assert_eq!(released.raw.start, raw);
        raw = released.raw.end;
        out.extend_from_slice(&released.text);
    }
    let last = stream.finish();
    assert_eq!(
        (last.raw.start, last.raw.end),
        (raw, chunks.iter().map(|c| c.len() as u64).sum())
    );
    out.extend_from_slice(&last.text);
    out
}

#[test]
fn there_are_at_least_twenty_kinds() {
    let (_, plants) = setup();
    let mut kinds: Vec<&str> = plants.iter().map(|p| p.kind).collect();
    kinds.sort();
    kinds.dedup();
    assert!(kinds.len() >= 20, "{kinds:?}");
}

/// Each secret alone, in its line: caught, named by its kind, counted once.
#[test]
fn every_planted_secret_is_caught_whole_and_named() {
    let (redactor, plants) = setup();
    let mut missed = Vec::new();
    for plant in &plants {
        let out = redactor.redact(&plant.line);
        let marker = redact::marker(plant.kind);
        if out.text.contains(plant.secret.as_str()) || !out.text.contains(&marker) {
            missed.push(format!("{} -> {}", plant.kind, out.text));
        }
    }
    assert!(missed.is_empty(), "missed:\n{}", missed.join("\n"));
}

#[test]
fn the_whole_corpus_leaks_nothing_and_counts_every_secret() {
    let (redactor, plants) = setup();
    let text = corpus(&plants);
    let out = redactor.redact(&text);
    assert_eq!(leaks(&plants, out.text.as_bytes()), Vec::<&str>::new());
    // Every plant once; the `ghs_` token in a URL is also a URL password,
    // and the two overlap into one redaction.
    assert_eq!(out.count, plants.len());
    assert!(
        out.text.ends_with("\n$ "),
        "the prompt is kept: {:?}",
        &out.text[out.text.len() - 20..]
    );
}

/// Each secret's line, cut in two at every byte: the same output as
/// redacting it whole.
#[test]
fn every_line_cut_at_every_byte_agrees_with_one_shot() {
    let (redactor, plants) = setup();
    for plant in &plants {
        let text = format!("before\n{}\nafter $ ", plant.line);
        let whole = redactor.redact_bytes(text.as_bytes()).bytes.into_owned();
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let out = stream_in(&redactor, &[&bytes[..cut], &bytes[cut..]]);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&whole),
                "{} cut at {cut}",
                plant.kind
            );
        }
    }
}

/// The whole corpus a byte at a time, and in random chunks.
#[test]
fn the_corpus_in_any_chunks_agrees_with_one_shot() {
    let (redactor, plants) = setup();
    let text = corpus(&plants);
    let bytes = text.as_bytes();
    let whole = redactor.redact_bytes(bytes).bytes.into_owned();
    let singles: Vec<&[u8]> = bytes.chunks(1).collect();
    let out = stream_in(&redactor, &singles);
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&whole)
    );
    let mut rng = Rng(7);
    for _ in 0..50 {
        let mut chunks = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = (1 + rng.next() % 300) as usize;
            let (a, b) = rest.split_at(n.min(rest.len()));
            chunks.push(a);
            rest = b;
        }
        let out = stream_in(&redactor, &chunks);
        assert_eq!(leaks(&plants, &out), Vec::<&str>::new());
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&whole)
        );
    }
}

/// Random documents — words, base64 runs, stray bytes that are not UTF-8,
/// secrets whole and cut short, begun triggers — in random chunks: the
/// stream always agrees with one-shot redaction.
#[test]
fn random_documents_in_random_chunks_agree_with_one_shot() {
    let (redactor, plants) = setup();
    let mut rng = Rng(0xd0c5);
    for doc in 0..150 {
        let mut text: Vec<u8> = Vec::new();
        while text.len() < 3000 {
            match rng.next() % 8 {
                0 | 1 => text.extend_from_slice(FILLER[(rng.next() % 8) as usize].as_bytes()),
                2 => {
                    let n = 1 + (rng.next() % 90) as usize;
                    text.extend_from_slice(rng.pick(BASE64, n).as_bytes());
                }
                3 => {
                    for _ in 0..1 + rng.next() % 6 {
                        text.push((rng.next() % 256) as u8);
                    }
                }
                4 | 5 => {
                    let p = &plants[(rng.next() % plants.len() as u64) as usize];
                    text.extend_from_slice(p.line.as_bytes());
                }
                _ => {
                    // A secret cut short, as a trigger that never completes.
                    let p = &plants[(rng.next() % plants.len() as u64) as usize];
                    let cut = (rng.next() % p.secret.len() as u64) as usize;
                    text.extend_from_slice(&p.secret.as_bytes()[..cut]);
                }
            }
            text.push([b'\n', b' ', b'=', b'"', b'\t'][(rng.next() % 5) as usize]);
        }
        let whole = redactor.redact_bytes(&text).bytes.into_owned();
        for _ in 0..3 {
            let mut chunks = Vec::new();
            let mut rest = text.as_slice();
            while !rest.is_empty() {
                let n = (1 + rng.next() % 200) as usize;
                let (a, b) = rest.split_at(n.min(rest.len()));
                chunks.push(a);
                rest = b;
            }
            let out = stream_in(&redactor, &chunks);
            assert!(
                out == whole,
                "document {doc}: the stream and one-shot redaction differ"
            );
        }
    }
}
