//! The page's static files, embedded in the binary: its style sheet, its
//! script and its icon (no third-party code).

/// `ui.css`.
pub const CSS: &str = include_str!("../assets/ui.css");
/// `ui.js`: the live parts (event streams, the terminal view, the
/// keyboard).
pub const JS: &str = include_str!("../assets/ui.js");
/// `icon.svg`: the tab's icon.
pub const ICON: &str = include_str!("../assets/icon.svg");
