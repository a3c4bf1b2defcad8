//! Prints the planted secrets of the tests, one JSON object per line
//! (`{"kind", "line", "secret"}`), for the end-to-end suite to print
//! through dsh's tools. Usage: `cargo run -p redact --example planted [SEED]`.
//! None is a real credential: they are generated in the formats' shapes.

#[path = "../tests/planted/mod.rs"]
mod planted;

fn main() {
    let seed = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut rng = planted::Rng(seed);
    for plant in planted::plants(&mut rng) {
        let line = serde_json::json!({
            "kind": plant.kind,
            "line": plant.line,
            "secret": plant.secret,
        });
        println!("{line}");
    }
}
