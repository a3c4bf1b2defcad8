//! The page's two static files, embedded in the binary: its style sheet
//! and its script (no third-party code).

/// `ui.css`.
pub const CSS: &str = include_str!("../assets/ui.css");
/// `ui.js`: the live parts (event streams, the terminal view, the
/// keyboard).
pub const JS: &str = include_str!("../assets/ui.js");
