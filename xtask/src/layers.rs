//! Tidy check over the binary's use of the daemon's wire, run by `cargo
//! test -p xtask`.
//!
//! The daemon's layers are crates (`daemon-wire`, `daemon-client`,
//! `mcp-host`, `daemon`), so Cargo keeps them from reaching into each
//! other and [`crate::deps`] checks which crate names which. What Cargo
//! cannot see is how the binary uses the wire it depends on for the data
//! of the replies it prints: it names no request, reply or framing, and
//! reaches the daemon only through the client's typed `Client`.

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    /// The wire's name in Rust paths.
    const WIRE: &str = "daemon_wire";

    /// The binary reaches the daemon only through its typed client: it
    /// names no request, reply or framing of the wire.
    #[test]
    fn the_binary_never_speaks_the_protocol_itself() {
        let src = crate::root().join("crates/dsh/src");
        let mut offenders = Vec::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let speaks = ["Request", "Reply", "Hello", "exchange", "framing"]
                    .iter()
                    .any(|name| code.contains(&format!("{WIRE}::{name}")))
                    || code.contains(&format!("{WIRE}::{{"));
                if speaks {
                    offenders.push(format!("{}:{}: {line}", path.display(), i + 1));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "use daemon_client::Client instead:\n{}",
            offenders.join("\n")
        );
    }
}
