//! The [`Code`] of each error the page shows that another crate's enum
//! names: a terminal's and the directory picker's, each turned from its
//! own enum by an exhaustive match, so a new kind of error in either is a
//! compile error here until it has its code.

use error_code::Code;
use picker_seam::{PickerError, Refusal};
use terminal_seam::TerminalError;

/// The code of a terminal's error.
pub(crate) fn terminal(error: &TerminalError) -> Code {
    match error {
        TerminalError::NoSession { .. } => Code::NoSession,
        TerminalError::ForeignSession { .. } => Code::ForeignSession,
        TerminalError::SendActive { .. } => Code::SendActive,
        TerminalError::SessionClosing { .. } => Code::SessionClosing,
        TerminalError::SessionExited { .. } => Code::SessionExited,
        TerminalError::DuplicateName { .. } => Code::DuplicateName,
        TerminalError::UseClose { .. } => Code::UseClose,
        TerminalError::SpawnFailed { .. } => Code::SpawnFailed,
        TerminalError::TerminalLimit { .. } => Code::TerminalLimit,
        TerminalError::InvalidArgument { .. } => Code::InvalidArgument,
    }
}

/// The code of the directory picker's error.
pub(crate) fn picker(error: &PickerError) -> Code {
    match error {
        PickerError::NotAbsolute { .. } => Code::InvalidArgument,
        PickerError::NotFound { .. } => Code::PickerNotFound,
        PickerError::NotADirectory { .. } => Code::PickerNotADirectory,
        PickerError::Unreadable { .. } => picker_refusal(Refusal::Unreadable),
        PickerError::SymlinkLoop { .. } => picker_refusal(Refusal::SymlinkLoop),
        PickerError::DeviceTree { .. } => picker_refusal(Refusal::DeviceTree),
        PickerError::Unsupported { .. } => Code::PickerUnsupported,
        PickerError::Io { .. } => Code::PickerIo,
    }
}

/// The code of the reason the picker will not open or choose a
/// directory it lists.
pub(crate) fn picker_refusal(refusal: Refusal) -> Code {
    match refusal {
        Refusal::Unreadable => Code::PickerUnreadable,
        Refusal::SymlinkLoop => Code::PickerSymlinkLoop,
        Refusal::DeviceTree => Code::PickerDeviceTree,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::path::{Path, PathBuf};
    use terminal_seam::TerminalId;

    /// Each error's code is the one its own enum names.
    #[test]
    fn each_error_keeps_its_own_code() {
        let id = TerminalId(7);
        let terminals = [
            TerminalError::NoSession { id },
            TerminalError::ForeignSession { id },
            TerminalError::SendActive { id },
            TerminalError::SessionClosing { id },
            TerminalError::SessionExited { id, exit: None },
            TerminalError::DuplicateName { name: "a".into() },
            TerminalError::UseClose { id },
            TerminalError::SpawnFailed {
                command: "sh".into(),
                reason: "gone".into(),
            },
            TerminalError::TerminalLimit { limit: 1 },
            TerminalError::invalid("id", "no"),
        ];
        for e in &terminals {
            assert_eq!(terminal(e).as_str(), e.code(), "{e:?}");
        }

        let path = || PathBuf::from("/x");
        let mut pickers = vec![
            PickerError::NotAbsolute { path: path() },
            PickerError::NotFound { path: path() },
            PickerError::NotADirectory { path: path() },
            PickerError::Unsupported {
                what: "list directories",
                capability: "dialog",
            },
            PickerError::Io {
                path: path(),
                reason: "r".into(),
            },
        ];
        let refusals = [
            Refusal::Unreadable,
            Refusal::SymlinkLoop,
            Refusal::DeviceTree,
        ];
        for refusal in refusals {
            assert_eq!(picker_refusal(refusal).as_str(), refusal.code());
            pickers.push(PickerError::refused(refusal, Path::new("/x")));
        }
        for e in &pickers {
            assert_eq!(picker(e).as_str(), e.code(), "{e:?}");
        }
    }
}
