//! The closed `Op` union is matchable exhaustively from outside the crate.

#[test]
fn op_matches_exhaustively_from_outside_the_crate() {
    let t = trybuild::TestCases::new();
    t.pass("tests/ui/match_op_exhaustively.rs");
}
