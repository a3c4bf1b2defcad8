//! Turns the imported credential formats, kept as data in
//! `rules/imported.toml`, into the constants `src/imported.rs` includes.

use std::fmt::Write as _;

type Failure = Box<dyn std::error::Error>;

fn main() -> Result<(), Failure> {
    let path = "rules/imported.toml";
    println!("cargo:rerun-if-changed={path}");
    let text = std::fs::read_to_string(path)?;
    let data: toml::Table = toml::from_str(&text).map_err(|e| format!("{path}: {e}"))?;
    let source = data
        .get("source")
        .and_then(toml::Value::as_str)
        .ok_or_else(|| format!("{path}: `source` (a string) is missing"))?;
    let global = discards(data.get("global_discard"), "global_discard")?;
    let mut out = String::new();
    writeln!(out, "/// Where the rules came from.")?;
    writeln!(out, "pub(crate) const SOURCE: &str = {source:?};")?;
    writeln!(
        out,
        "/// Applies to every imported rule's secret: upstream's global filter."
    )?;
    writeln!(
        out,
        "pub(crate) const GLOBAL_DISCARD: &[Discard] = {global};"
    )?;
    writeln!(out, "/// The imported rules, in upstream's order.")?;
    writeln!(out, "pub(crate) const RULES: &[RuleSpec] = &[")?;
    let rules = data
        .get("rule")
        .and_then(toml::Value::as_array)
        .ok_or_else(|| format!("{path}: no [[rule]]"))?;
    for (i, rule) in rules.iter().enumerate() {
        let field = |name: &str| {
            rule.get(name)
                .and_then(toml::Value::as_str)
                .ok_or_else(|| format!("{path}: rule {}: `{name}` (a string) is missing", i + 1))
        };
        let (id, kind, regex) = (field("id")?, field("kind")?, field("regex")?);
        let discard = discards(rule.get("discard"), id)?;
        writeln!(
            out,
            "    RuleSpec {{ id: {id:?}, kind: {kind:?}, regex: {regex:?}, discard: {discard} }},"
        )?;
    }
    writeln!(out, "];")?;
    let dest = std::path::Path::new(&std::env::var("OUT_DIR")?).join("imported.rs");
    std::fs::write(dest, out)?;
    Ok(())
}

/// A `discard` list as Rust: `&[Discard::EntropyBelow(3.5), …]`.
fn discards(value: Option<&toml::Value>, of: &str) -> Result<String, Failure> {
    let Some(list) = value else {
        return Ok("&[]".to_owned());
    };
    let list = list
        .as_array()
        .ok_or_else(|| format!("{of}: `discard` is not a list"))?;
    let mut items = Vec::new();
    for clause in list {
        let table = clause
            .as_table()
            .filter(|t| t.len() == 1)
            .ok_or_else(|| format!("{of}: each discard clause is a table of one key"))?;
        for (name, value) in table {
            let strings = || -> Result<String, Failure> {
                let list = value
                    .as_array()
                    .ok_or_else(|| format!("{of}: `{name}` takes a list of strings"))?;
                let mut out = Vec::new();
                for item in list {
                    let s = item
                        .as_str()
                        .ok_or_else(|| format!("{of}: `{name}` takes a list of strings"))?;
                    out.push(format!("{s:?}"));
                }
                Ok(format!("&[{}]", out.join(", ")))
            };
            let number = || {
                value
                    .as_float()
                    .ok_or_else(|| format!("{of}: `{name}` takes a number"))
            };
            items.push(match name.as_str() {
                "entropy_below" => format!("Discard::EntropyBelow({:?})", number()?),
                "entropy_at_most" => format!("Discard::EntropyAtMost({:?})", number()?),
                "matches" => format!("Discard::Matches({})", strings()?),
                "unless" => format!("Discard::Unless({})", strings()?),
                "contains" => format!("Discard::Contains({})", strings()?),
                other => return Err(format!("{of}: unknown discard clause `{other}`").into()),
            });
        }
    }
    Ok(format!("&[{}]", items.join(", ")))
}
