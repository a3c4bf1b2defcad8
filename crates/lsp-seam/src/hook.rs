//! A function a query carries for its provider to call (where progress
//! goes, which files may be read), or none.

use std::sync::Arc;

/// A shared function, or none. Cheap to clone. Every hook compares equal
/// to every other, so the queries that carry one stay comparable as plain
/// data.
pub(crate) struct Hook<F: ?Sized>(Option<Arc<F>>);

impl<F: ?Sized> Hook<F> {
    /// A hook that calls `f`.
    pub(crate) fn new(f: Arc<F>) -> Self {
        Self(Some(f))
    }

    /// No function.
    pub(crate) fn none() -> Self {
        Self(None)
    }

    /// The function, when there is one.
    pub(crate) fn get(&self) -> Option<&F> {
        self.0.as_deref()
    }
}

impl<F: ?Sized> Clone for Hook<F> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<F: ?Sized> Default for Hook<F> {
    fn default() -> Self {
        Self::none()
    }
}

impl<F: ?Sized> std::fmt::Debug for Hook<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "Some(..)" } else { "None" })
    }
}

impl<F: ?Sized> PartialEq for Hook<F> {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl<F: ?Sized> Eq for Hook<F> {}
