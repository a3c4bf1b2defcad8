//! The closed union of query kinds.

/// One of the five semantic queries. Closed on purpose (no
/// `#[non_exhaustive]`): every layer matches it exhaustively.
///
/// Adding a variant is a compile error until every layer handles it:
/// 1. here: [`Op::ALL`] and [`Op::name`];
/// 2. the seam: a [`crate::Request`] and an [`crate::Answer`] variant, its
///    query/result types, a required [`crate::LspProvider`] method, and the
///    arm in [`crate::dispatch`];
/// 3. every provider: the new trait method (e.g. `lsp-stdio`);
/// 4. the tool layer: its argument enum, the conversion to [`crate::Request`]
///    and the renderer of the new [`crate::Answer`] variant; then regenerate
///    the tool catalog;
/// 5. `tests/ui/match_op_exhaustively.rs` in this crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// Where the symbol at a position is defined.
    Definition,
    /// Every use of the symbol at a position.
    References,
    /// The documentation and type of the symbol at a position.
    Hover,
    /// The outline of a file, or a workspace-wide symbol search.
    Symbols,
    /// The errors and warnings the server computed for a file's current
    /// content.
    Diagnostics,
}

impl Op {
    /// Every op, in declaration order.
    pub const ALL: [Op; 5] = [
        Op::Definition,
        Op::References,
        Op::Hover,
        Op::Symbols,
        Op::Diagnostics,
    ];

    /// The op's name as the model writes it (`definition`, ...).
    pub fn name(self) -> &'static str {
        match self {
            Op::Definition => "definition",
            Op::References => "references",
            Op::Hover => "hover",
            Op::Symbols => "symbols",
            Op::Diagnostics => "diagnostics",
        }
    }

    /// Parses a name written by [`Op::name`].
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
