//! The allocator policy of a long-running host.
//!
//! glibc serves big blocks (128 KiB and more, at first) with mappings of
//! their own, returned to the system when freed. But each time
//! such a block is freed it raises that threshold to the block's size (up
//! to 32 MiB), so later big blocks — a database's page tables, a flood's
//! buffers — are carved from the heap of whichever thread asked, and those
//! heaps (one per thread, "arenas") keep their high-water mark. A server
//! that opens and closes terminals and writes its session log for hours
//! then sits at many times its idle size with almost nothing in use.
//! Fixing the threshold keeps big blocks mapped, so their memory goes back
//! when they are freed.

/// Blocks at least this big get their own mapping, always.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 256 * 1024;

/// Applies the policy; call once, first thing, in a long-running command.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes the allocator's parameters; it is called
    // before the runtime starts its threads.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}
