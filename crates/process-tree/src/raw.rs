//! System calls made with the `syscall` instruction itself, for code that
//! runs in the host's memory *beside* the host's threads: a PID
//! namespace's init and a leader that waits (see [`crate::pidns`]).
//!
//! **Why not the C library's.** Such a process shares the host's memory
//! but not its threads, and it inherits the thread pointer of the thread
//! that started it: every C library call that fails writes `errno` into
//! *that thread's* storage, while that thread runs on. These wrappers
//! return `-errno` instead and touch no memory but their arguments'.
//!
//! Only the architectures below have them; elsewhere the PID namespace
//! path is not offered ([`AVAILABLE`]).

#![allow(clippy::cast_possible_wrap, clippy::cast_sign_loss)]

/// Whether this architecture has the wrappers (else they fail with
/// `-ENOSYS` and no namespace is made).
pub(crate) const AVAILABLE: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Whether the C library's `clone` takes `CLONE_CHILD_CLEARTID`. musl's
/// refuses it (`EINVAL`, without a system call): there the leader sets
/// the same word itself as its first step ([`clear_tid_at`]), which the
/// kernel then clears and wakes exactly as for the flag.
pub(crate) const CLONE_TAKES_CLEAR_TID: bool = !cfg!(target_env = "musl");

/// A system call with up to four arguments; `-errno` on failure.
///
/// # Safety
///
/// The call's own contract: pointers passed as arguments must be valid
/// for what the call does with them.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) unsafe fn syscall4(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the Linux x86_64 system call convention: the number in rax,
    // arguments in rdi, rsi, rdx, r10; rcx and r11 are clobbered.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            in("r10") d,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
///
/// As there.
#[cfg(target_arch = "aarch64")]
#[inline(always)]
pub(crate) unsafe fn syscall4(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the Linux aarch64 system call convention: the number in x8,
    // arguments and the result in x0..x3.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => ret,
            in("x1") b,
            in("x2") c,
            in("x3") d,
            options(nostack),
        );
    }
    ret
}

/// See the x86_64 version.
///
/// # Safety
///
/// As there.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) unsafe fn syscall4(
    _n: libc::c_long,
    _a: usize,
    _b: usize,
    _c: usize,
    _d: usize,
) -> isize {
    -(libc::ENOSYS as isize)
}

/// Ends this process (every thread of it: here, the one).
pub(crate) fn exit(code: i32) -> ! {
    loop {
        // SAFETY: exit_group takes no pointer.
        unsafe { syscall4(libc::SYS_exit_group, code as usize, 0, 0, 0) };
    }
}

/// `wait4(-1, status, __WALL, NULL)`: the pid reaped, or `-errno`.
pub(crate) fn wait_any(status: &mut libc::c_int) -> isize {
    // SAFETY: `status` is a valid, writable int.
    unsafe {
        syscall4(
            libc::SYS_wait4,
            -1isize as usize,
            std::ptr::from_mut(status) as usize,
            libc::__WALL as usize,
            0,
        )
    }
}

/// Sleeps until SIGCHLD (blocked) is pending, and takes it.
pub(crate) fn wait_sigchld() {
    let set: u64 = 1 << (libc::SIGCHLD - 1);
    // SAFETY: a kernel-sized signal set on this stack; no info, no timeout.
    unsafe {
        syscall4(
            libc::SYS_rt_sigtimedwait,
            std::ptr::from_ref(&set) as usize,
            0,
            0,
            std::mem::size_of::<u64>(),
        )
    };
}

/// Closes every descriptor of this process's own table.
pub(crate) fn close_all() {
    // SAFETY: close_range takes no pointer.
    unsafe { syscall4(libc::SYS_close_range, 0, u32::MAX as usize, 0, 0) };
}

/// `prctl(option, arg)`.
pub(crate) fn prctl(option: libc::c_int, arg: usize) -> isize {
    // SAFETY: the options used here take integers or a valid C string.
    unsafe { syscall4(libc::SYS_prctl, option as usize, arg, 0, 0) }
}

/// Whether the process behind pidfd `fd` has exited (readable), without
/// waiting.
pub(crate) fn pidfd_exited(fd: libc::c_int) -> bool {
    let mut host = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: one pollfd and a zero timeout on this stack; no signal mask.
    unsafe {
        syscall4(
            libc::SYS_ppoll,
            std::ptr::from_mut(&mut host) as usize,
            1,
            std::ptr::from_ref(&now) as usize,
            0,
        ) > 0
    }
}

/// Has the kernel clear (and wake, as a shared futex) the word at `word`
/// when this process `exec`s or exits: what `CLONE_CHILD_CLEARTID` does,
/// asked by the child itself.
pub(crate) fn clear_tid_at(word: &std::sync::atomic::AtomicI32) {
    // SAFETY: a valid, aligned word the caller keeps alive until it is
    // cleared (the host waits for that before letting it go).
    unsafe { syscall4(libc::SYS_set_tid_address, word.as_ptr() as usize, 0, 0, 0) };
}

/// Stops the kernel from clearing (and waking) this process's
/// `CLONE_CHILD_CLEARTID` word when it execs or exits.
pub(crate) fn forget_clear_tid() {
    // SAFETY: a null address: nothing is written.
    unsafe { syscall4(libc::SYS_set_tid_address, 0, 0, 0, 0) };
}

/// Wakes every waiter on the (process-shared) futex word at `word`.
pub(crate) fn futex_wake(word: &std::sync::atomic::AtomicI32) {
    // SAFETY: a valid, aligned futex word.
    unsafe {
        syscall4(
            libc::SYS_futex,
            word.as_ptr() as usize,
            libc::FUTEX_WAKE as usize,
            i32::MAX as usize,
            0,
        )
    };
}
