//! The vocabulary of dsh terminals (work in progress: only [`Owner`] so far).

mod owner;
pub use owner::Owner;
