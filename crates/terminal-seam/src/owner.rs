//! Agent identity.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// An agent identity: one per MCP connection (or per embedding caller).
///
/// An `Owner` is created only by [`Owner::new`] and compared by identity:
/// two owners are equal only if one is a clone of the other. Knowing an
/// owner's number (shown in logs) does not let anyone build an equal value,
/// so terminal and job ids need not be secrets: ownership is the boundary.
#[derive(Clone)]
pub struct Owner(Arc<OwnerInner>);

struct OwnerInner {
    serial: u64,
    label: String,
    ended: AtomicBool,
}

impl Owner {
    /// A new, unique owner. `label` is for logs only (a client name, say).
    pub fn new(label: impl Into<String>) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self(Arc::new(OwnerInner {
            serial: NEXT.fetch_add(1, Ordering::Relaxed),
            label: label.into(),
            ended: AtomicBool::new(false),
        }))
    }

    /// Marks the owner as gone (its connection ended), for every clone.
    /// Services tearing an owner down call it first, so that work it
    /// starts in the meantime is ended too instead of being kept.
    pub fn end(&self) {
        self.0.ended.store(true, Ordering::SeqCst);
    }

    /// True once [`Owner::end`] was called on any clone.
    pub fn is_ended(&self) -> bool {
        self.0.ended.load(Ordering::SeqCst)
    }

    /// A number for logs; never use it to look an owner up.
    pub fn serial(&self) -> u64 {
        self.0.serial
    }

    /// The label given at creation.
    pub fn label(&self) -> &str {
        &self.0.label
    }
}

impl PartialEq for Owner {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Owner {}

impl std::hash::Hash for Owner {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.serial.hash(state);
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Owner#{}({})", self.0.serial, self.0.label)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::Owner;

    #[test]
    fn owners_are_equal_only_to_their_clones() {
        let a = Owner::new("a");
        let b = Owner::new("a");
        assert_eq!(a, a.clone());
        assert_ne!(a, b);
    }
}
