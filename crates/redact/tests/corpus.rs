//! Planted secrets of every kind the redactor must catch, generated at
//! test time from a seeded PRNG in the shapes of the real formats (none is
//! a real credential), printed whole, in streams cut at every byte and in
//! random chunks: none may reach the output, and streaming must agree with
//! one-shot redaction byte for byte.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use redact::{KnownSecret, Redactor};

/// A small deterministic PRNG (SplitMix64): the same secrets every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn pick(&mut self, alphabet: &[u8], n: usize) -> String {
        (0..n)
            .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize] as char)
            .collect()
    }

    fn digits(&mut self, n: usize) -> String {
        self.pick(b"0123456789", n)
    }
}

const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
const LOWER_ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
const WORD_DASH: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const HEX: &[u8] = b"0123456789abcdef";
const UPPER_B32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// One planted secret: the line that prints it, the secret, the kind its
/// marker must name.
struct Plant {
    line: String,
    secret: String,
    kind: &'static str,
}

fn pem(rng: &mut Rng, label: &str, lines: usize) -> String {
    let mut s = format!("-----BEGIN {label}-----\n");
    for _ in 0..lines {
        s.push_str(&rng.pick(BASE64, 64));
        s.push('\n');
    }
    s.push_str(&rng.pick(BASE64, 20));
    s.push_str("==\n");
    s.push_str(&format!("-----END {label}-----"));
    s
}

fn jwt_part(rng: &mut Rng, n: usize) -> String {
    format!("eyJ{}", rng.pick(ALNUM, n))
}

/// The planted secrets, at least one per kind.
fn plants(rng: &mut Rng) -> Vec<Plant> {
    let p = |line: String, secret: String, kind: &'static str| Plant { line, secret, kind };
    let mut v = Vec::new();
    let s = format!("ghp_{}", rng.pick(ALNUM, 36));
    v.push(p(format!("GITHUB_TOKEN={s}"), s, "github token"));
    let s = format!("gho_{}", rng.pick(ALNUM, 36));
    v.push(p(format!("oauth: {s}"), s, "github token"));
    let s = format!("ghs_{}", rng.pick(ALNUM, 36));
    v.push(p(
        format!("https://x-access-token:{s}@github.com/o/r.git"),
        s,
        "github token",
    ));
    let s = format!("github_pat_{}", rng.pick(WORD_DASH, 82).replace('-', "_"));
    v.push(p(format!("  \"token\": \"{s}\","), s, "github token"));
    let s = format!("glpat-{}", rng.pick(WORD_DASH, 20));
    v.push(p(format!("export GITLAB_TOKEN='{s}'"), s, "gitlab token"));
    let s = format!(
        "xoxb-{}-{}-{}",
        rng.digits(12),
        rng.digits(13),
        rng.pick(ALNUM, 24)
    );
    v.push(p(format!("SLACK_BOT_TOKEN={s}"), s, "slack token"));
    let s = format!(
        "xoxp-{}-{}-{}-{}",
        rng.digits(11),
        rng.digits(12),
        rng.digits(12),
        rng.pick(HEX, 32)
    );
    v.push(p(
        format!("slack user token {s} expires never"),
        s,
        "slack token",
    ));
    let s = format!("sk_live_{}", rng.pick(ALNUM, 48));
    v.push(p(format!("Stripe.api_key = \"{s}\""), s, "stripe key"));
    let s = format!("rk_live_{}", rng.pick(ALNUM, 40));
    v.push(p(format!("STRIPE_RESTRICTED={s}"), s, "stripe key"));
    let s = format!("AKIA{}", rng.pick(UPPER_B32, 16));
    v.push(p(format!("aws_access_key_id = {s}"), s, "aws access key"));
    let s = rng.pick(BASE64, 40);
    v.push(p(
        format!("aws_secret_access_key = {s}"),
        s,
        "aws secret key",
    ));
    let s = format!("AIza{}", rng.pick(WORD_DASH, 35));
    v.push(p(format!("const key = \"{s}\";"), s, "google api key"));
    let s = pem(rng, "RSA PRIVATE KEY", 12);
    v.push(p(format!("$ cat id_rsa\n{s}\n$ "), s, "private key"));
    let s = pem(rng, "OPENSSH PRIVATE KEY", 6);
    v.push(p(s.clone(), s, "private key"));
    let s = pem(rng, "PRIVATE KEY", 16).replace('\n', "\\n");
    v.push(p(
        format!("{{\"type\": \"service_account\", \"private_key\": \"{s}\\n\", \"client_email\": \"x@p.iam.gserviceaccount.com\"}}"),
        s,
        "private key",
    ));
    let s = format!(
        "{}{}Q~{}",
        rng.pick(ALNUM, 3),
        rng.digits(1),
        rng.pick(ALNUM, 34)
    );
    v.push(p(
        format!("AZURE_CLIENT_SECRET={s}"),
        s,
        "azure client secret",
    ));
    let s = format!("npm_{}", rng.pick(LOWER_ALNUM, 36));
    v.push(p(
        format!("//registry.npmjs.org/:_authToken={s}"),
        s,
        "npm token",
    ));
    let s = format!("pypi-AgEIcHlwaS5vcmc{}", rng.pick(WORD_DASH, 120));
    v.push(p(format!("password = {s}"), s, "pypi token"));
    let s = format!("cio{}", rng.pick(ALNUM, 32));
    v.push(p(
        format!("[registry]\ntoken = \"{s}\""),
        s,
        "crates.io token",
    ));
    let s = format!(
        "sk-proj-{}T3BlbkFJ{}",
        rng.pick(WORD_DASH, 74),
        rng.pick(WORD_DASH, 74)
    );
    v.push(p(format!("OPENAI_API_KEY={s}"), s, "openai key"));
    let s = format!("sk-ant-api03-{}AA", rng.pick(WORD_DASH, 93));
    v.push(p(format!("ANTHROPIC_API_KEY=\"{s}\""), s, "anthropic key"));
    let s = format!(
        "{}.{}.{}",
        jwt_part(rng, 30),
        jwt_part(rng, 60),
        rng.pick(WORD_DASH, 43)
    );
    v.push(p(format!("Authorization: Bearer {s}"), s, "jwt"));
    let s = format!("S3cr3t{}", rng.pick(ALNUM, 10));
    v.push(p(
        format!("psycopg2.OperationalError: connection to postgres://app:{s}@db.internal:5432/app failed"),
        s,
        "password in url",
    ));
    let s = format!(
        "hf_{}",
        rng.pick(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", 34)
    );
    v.push(p(format!("HF_TOKEN={s}"), s, "huggingface access token"));
    let s = format!("dop_v1_{}", rng.pick(HEX, 64));
    v.push(p(format!("doctl auth init -t {s}"), s, "digitalocean pat"));
    let s = format!("dckr_pat_{}", rng.pick(WORD_DASH, 27));
    v.push(p(
        format!("docker login -u me -p {s}"),
        s,
        "dockerhub personal access token",
    ));
    let s = format!("dapi{}", rng.pick(HEX, 32));
    v.push(p(
        format!("DATABRICKS_TOKEN={s}"),
        s,
        "databricks api token",
    ));
    let s = format!(
        "AGE-SECRET-KEY-1{}",
        rng.pick(b"QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58)
    );
    v.push(p(
        format!("# created: 2024-01-01\n{s}"),
        s,
        "age secret key",
    ));
    let s = format!("shpat_{}", rng.pick(HEX, 32));
    v.push(p(
        format!("X-Shopify-Access-Token: {s}"),
        s,
        "shopify access token",
    ));
    let s = format!("SG.{}.{}", rng.pick(WORD_DASH, 22), rng.pick(WORD_DASH, 43));
    v.push(p(format!("SENDGRID_API_KEY={s}"), s, "sendgrid api token"));
    let s = format!("glsa_{}_{}", rng.pick(ALNUM, 32), rng.pick(HEX, 8));
    v.push(p(
        format!("grafana: {s}"),
        s,
        "grafana service account token",
    ));
    // Square's format, with the entropy floor the importer raises.
    let s = format!("EAAA{}", rng.pick(WORD_DASH, 60));
    v.push(p(
        format!("SQUARE_ACCESS_TOKEN: {s}"),
        s,
        "square access token",
    ));
    // A value the caller knows: printed with no format to give it away.
    let s = format!("Tr0ub4dor&{}", rng.pick(ALNUM, 6));
    v.push(p(format!("DB_PASSWORD={s}"), s, "env DB_PASSWORD"));
    v
}

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
