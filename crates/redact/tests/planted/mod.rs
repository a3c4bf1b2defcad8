//! The planted secrets of the tests and of the end-to-end suite (through
//! `examples/planted.rs`): generated from a seeded PRNG in the shapes of
//! the real formats; none is a real credential.
#![allow(dead_code)]

/// A small deterministic PRNG (SplitMix64): the same secrets every run.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn pick(&mut self, alphabet: &[u8], n: usize) -> String {
        (0..n)
            .map(|_| alphabet[(self.next() % alphabet.len() as u64) as usize] as char)
            .collect()
    }

    pub fn digits(&mut self, n: usize) -> String {
        self.pick(b"0123456789", n)
    }
}

pub const ALNUM: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
pub const LOWER_ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
pub const WORD_DASH: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
pub const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
pub const HEX: &[u8] = b"0123456789abcdef";
pub const UPPER_B32: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// One planted secret: the line that prints it, the secret, the kind its
/// marker must name.
pub struct Plant {
    /// The line that prints it.
    pub line: String,
    /// The secret.
    pub secret: String,
    /// The kind its marker names.
    pub kind: &'static str,
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
pub fn plants(rng: &mut Rng) -> Vec<Plant> {
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
