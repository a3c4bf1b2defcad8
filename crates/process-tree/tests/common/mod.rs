//! What the process-tree tests share.

use std::io::{BufRead, BufReader};

/// Spawns `script` under bash as a held session leader and reads one line
/// of its stdout (its readiness, or a pid it prints).
pub fn session(script: &str) -> (process_tree::Leader, String) {
    process_tree::become_subreaper().unwrap();
    let command = process_tree::SessionCommand::new("bash")
        .args(["-c", script])
        .stdout(process_tree::ChildIo::Piped);
    let spawned = process_tree::spawn_session(command).unwrap();
    let mut line = String::new();
    BufReader::new(spawned.stdout.unwrap())
        .read_line(&mut line)
        .unwrap();
    (spawned.leader, line.trim().to_owned())
}
