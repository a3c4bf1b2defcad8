//! Matches `Op` exhaustively from outside the crate, without a wildcard arm:
//! adding a variant to `Op` makes this file fail to compile.
#![deny(clippy::wildcard_enum_match_arm)]

use lsp_seam::{Answer, Op, Request};

fn describe(op: Op) -> &'static str {
    match op {
        Op::Definition => "definition",
        Op::References => "references",
        Op::Hover => "hover",
        Op::Symbols => "symbols",
        Op::Diagnostics => "diagnostics",
    }
}

fn answered(answer: &Answer) -> Op {
    match answer {
        Answer::Definition(_) => Op::Definition,
        Answer::References(_) => Op::References,
        Answer::Hover(_) => Op::Hover,
        Answer::Symbols(_) => Op::Symbols,
        Answer::Diagnostics(_) => Op::Diagnostics,
    }
}

fn routed(request: &Request) -> Op {
    match request {
        Request::Definition(_) => Op::Definition,
        Request::References(_) => Op::References,
        Request::Hover(_) => Op::Hover,
        Request::Symbols(_) => Op::Symbols,
        Request::Diagnostics(_) => Op::Diagnostics,
    }
}

fn main() {
    for op in Op::ALL {
        assert_eq!(describe(op), op.name());
    }
    let _ = (answered, routed);
}
