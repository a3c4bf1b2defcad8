//! How a front end lets a person choose a directory: the
//! [`DirectoryPicker`] trait, its [`Capability`], the [`Listing`] of one
//! directory, and [`PickerError`] with stable codes.
//!
//! After the original system's `DirectoryPicker` service: one
//! implementation per context (the daemon's page has one; a desktop shell
//! or a future client brings its own), and a [`Capability`] that is
//! **stable for the picker's whole life**, which consumers switch on
//! (exhaustively: it is a closed enum) instead of probing methods. A picker
//! that lists directories for the consumer's own view says
//! [`Capability::Browse`]; one that asks the person through a dialog of its
//! own says [`Capability::Dialog`]. The method the capability names is the
//! one to call; the other answers [`PickerError::Unsupported`].
//!
//! What a browsing picker lists is its provider's business, with two rules
//! every provider keeps: it never lists what the person could not list
//! themselves, and it refuses what would lead a person in circles or into
//! the kernel's pseudo-files (symlink loops, device trees), naming why in
//! the entry ([`Refusal`]) or the error.
//!
//! Deliberately plain: no filesystem access, no runtime, no
//! serialization. The methods block (a dialog waits for the person); an
//! async consumer calls them off its workers.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

/// What a picker offers; the same for its whole life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capability {
    /// The consumer shows directories one at a time, from
    /// [`DirectoryPicker::list`], starting at `start`, and the person walks
    /// them in the consumer's own view.
    Browse {
        /// Where browsing starts (the person's home directory, for the page).
        start: PathBuf,
    },
    /// The picker asks the person itself ([`DirectoryPicker::choose`]),
    /// in a dialog of its own.
    Dialog,
}

/// Why a directory in a listing cannot be opened or chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The person may not list it (no read or search permission).
    Unreadable,
    /// A symlink that loops, or leads back to the directory listed or
    /// one above it.
    SymlinkLoop,
    /// Part of a device or kernel tree (`/dev`, `/proc`, `/sys`, and the
    /// pseudo-filesystems mounted anywhere).
    DeviceTree,
}

impl Refusal {
    /// The stable code, as [`PickerError::code`] names the same refusal.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::Unreadable => "PICKER_UNREADABLE",
            Refusal::SymlinkLoop => "PICKER_SYMLINK_LOOP",
            Refusal::DeviceTree => "PICKER_DEVICE_TREE",
        }
    }

    /// A few words for a person.
    pub fn words(self) -> &'static str {
        match self {
            Refusal::Unreadable => "you cannot list it",
            Refusal::SymlinkLoop => "a symlink loop",
            Refusal::DeviceTree => "a device tree",
        }
    }
}

/// One subdirectory in a [`Listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its name in the directory listed.
    pub name: std::ffi::OsString,
    /// Where opening or choosing it leads: the real path (a symlink's
    /// target, resolved).
    pub path: PathBuf,
    /// Whether the name is a symlink (to a directory).
    pub symlink: bool,
    /// Why it cannot be opened or chosen, if it cannot.
    pub refused: Option<Refusal>,
}

/// The subdirectories of one directory, by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The directory listed: its real path.
    pub dir: PathBuf,
    /// Its parent, when there is one.
    pub parent: Option<PathBuf>,
    /// Its subdirectories (and symlinks to directories), sorted by name.
    pub entries: Vec<Entry>,
    /// The directory holds more than the listing shows (a provider bounds
    /// what it reads).
    pub truncated: bool,
}

/// Why a picker could not answer; [`code`](PickerError::code) is stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PickerError {
    /// The path is relative.
    #[error("{path} is not an absolute path; give one that starts with /")]
    NotAbsolute {
        /// The path as given.
        path: PathBuf,
    },
    /// Nothing is there.
    #[error("{path} does not exist; go up to a directory that does")]
    NotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// It is not a directory.
    #[error("{path} is not a directory; a workspace is a directory")]
    NotADirectory {
        /// The path as given.
        path: PathBuf,
    },
    /// The person may not list it.
    #[error("you cannot list {path} (no read or search permission); choose another directory")]
    Unreadable {
        /// The path.
        path: PathBuf,
    },
    /// A symlink loop (or a symlink back to where the listing is).
    #[error("{path} is a symlink loop; choose the directory it means by its real path")]
    SymlinkLoop {
        /// The path.
        path: PathBuf,
    },
    /// A device or kernel tree.
    #[error(
        "{path} is a device or kernel tree, not a place for a project; choose another directory"
    )]
    DeviceTree {
        /// The path.
        path: PathBuf,
    },
    /// The picker's capability does not include this.
    #[error("this directory picker cannot {what}: its capability is {capability}")]
    Unsupported {
        /// What was asked (`list directories`, `ask the person`).
        what: &'static str,
        /// What it can do instead.
        capability: &'static str,
    },
    /// Reading failed otherwise.
    #[error("cannot read {path}: {reason}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The system's words.
        reason: String,
    },
}

impl PickerError {
    /// The stable SCREAMING_SNAKE code.
    pub fn code(&self) -> &'static str {
        match self {
            PickerError::NotAbsolute { .. } => "INVALID_ARGUMENT",
            PickerError::NotFound { .. } => "PICKER_NOT_FOUND",
            PickerError::NotADirectory { .. } => "PICKER_NOT_A_DIRECTORY",
            PickerError::Unreadable { .. } => Refusal::Unreadable.code(),
            PickerError::SymlinkLoop { .. } => Refusal::SymlinkLoop.code(),
            PickerError::DeviceTree { .. } => Refusal::DeviceTree.code(),
            PickerError::Unsupported { .. } => "PICKER_UNSUPPORTED",
            PickerError::Io { .. } => "PICKER_IO",
        }
    }

    /// The error a [`Refusal`] of `path` is.
    pub fn refused(refusal: Refusal, path: &Path) -> Self {
        let path = path.to_path_buf();
        match refusal {
            Refusal::Unreadable => PickerError::Unreadable { path },
            Refusal::SymlinkLoop => PickerError::SymlinkLoop { path },
            Refusal::DeviceTree => PickerError::DeviceTree { path },
        }
    }
}

/// Lets a person choose a directory. One implementation per context; its
/// [`capability`](DirectoryPicker::capability) says which of the other
/// two methods to call, and never changes.
pub trait DirectoryPicker: Send + Sync {
    /// What this picker offers (the same answer every time).
    fn capability(&self) -> Capability;

    /// For [`Capability::Browse`]: the subdirectories of `dir` (an
    /// absolute path), refused ones marked. Blocks while it reads.
    fn list(&self, dir: &Path) -> Result<Listing, PickerError> {
        let _ = dir;
        Err(PickerError::Unsupported {
            what: "list directories",
            capability: "to ask the person in a dialog of its own",
        })
    }

    /// For [`Capability::Dialog`]: asks the person, and blocks until they
    /// chose a directory (its real path) or cancelled (`None`).
    fn choose(&self) -> Result<Option<PathBuf>, PickerError> {
        Err(PickerError::Unsupported {
            what: "ask the person",
            capability: "to list directories for the consumer to show",
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// A picker of the other kind, as a desktop shell would bring.
    struct Shell;

    impl DirectoryPicker for Shell {
        fn capability(&self) -> Capability {
            Capability::Dialog
        }

        fn choose(&self) -> Result<Option<PathBuf>, PickerError> {
            Ok(Some(PathBuf::from("/home/me/src")))
        }
    }

    #[test]
    fn the_capability_names_the_one_method_that_answers() {
        let shell = Shell;
        assert_eq!(shell.capability(), Capability::Dialog);
        assert_eq!(shell.choose(), Ok(Some(PathBuf::from("/home/me/src"))));
        let refused = shell.list(Path::new("/")).unwrap_err();
        assert_eq!(refused.code(), "PICKER_UNSUPPORTED");
        assert_eq!(
            refused.to_string(),
            "this directory picker cannot list directories: its capability is to ask the person in a dialog of its own"
        );
    }

    #[test]
    fn a_refusal_and_its_error_share_a_code() {
        for refusal in [
            Refusal::Unreadable,
            Refusal::SymlinkLoop,
            Refusal::DeviceTree,
        ] {
            assert_eq!(
                PickerError::refused(refusal, Path::new("/x")).code(),
                refusal.code()
            );
        }
    }
}
