//! The seccomp filter of every confined process: the terminal-injection
//! `ioctl`s always, and with `network = false` everything Landlock's TCP
//! rules do not cover.
//!
//! In every confined mode it refuses, with `EPERM`, `ioctl(TIOCSTI)` (push
//! bytes into a terminal's input queue, as if typed) and `ioctl(TIOCLINUX)`
//! (whose subcommands paste a virtual console's selection): with a
//! terminal descriptor from outside the sandbox either would run commands
//! outside it. No program needs them to work.
//!
//! Landlock (ABI 4+) refuses every TCP `bind` and `connect`. This filter
//! refuses, with `EPERM`, what would get around that:
//! * `socket()` of any family but `AF_UNIX`, `AF_NETLINK`, `AF_INET` and
//!   `AF_INET6` (no packet sockets, no `AF_VSOCK` to the host of a VM, …);
//! * an `AF_INET`/`AF_INET6` socket that is not plain TCP: UDP, raw and
//!   ICMP sockets, and SCTP or Multipath TCP, which Landlock does not
//!   restrict;
//! * `sendto`/`sendmsg`/`sendmmsg` with `MSG_FASTOPEN`, which connects a TCP
//!   socket without the `connect` Landlock checks;
//! * `io_uring_setup`/`_enter`/`_register`, whose operations open sockets
//!   without any system call this filter sees.
//!
//! Without Landlock's TCP rules (ABI < 4) it refuses every `AF_INET` and
//! `AF_INET6` socket instead. A program of another architecture (a 32-bit
//! binary on x86_64) is killed by the filter's architecture check.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;

const MSG_FASTOPEN: u64 = 0x2000_0000;

/// What the filter refuses besides the terminal-injection `ioctl`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Network {
    /// Nothing more: the network is on, or a namespace of its own blocks it.
    Untouched,
    /// The network without a namespace; the flag says whether Landlock
    /// already refuses TCP bind/connect (then plain TCP sockets may be
    /// created).
    Block { tcp_by_landlock: bool },
}

/// Compiles the filter.
pub(crate) fn filter(network: Network) -> Result<BpfProgram, String> {
    let arch = TargetArch::try_from(std::env::consts::ARCH)
        .map_err(|_| format!("no seccomp filter for {}", std::env::consts::ARCH))?;
    let mut rules = match network {
        Network::Untouched => BTreeMap::new(),
        Network::Block { tcp_by_landlock } => {
            network_rules(tcp_by_landlock).map_err(|e| e.to_string())?
        }
    };
    rules.insert(
        libc::SYS_ioctl,
        terminal_rules().map_err(|e| e.to_string())?,
    );
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| e.to_string())?;
    BpfProgram::try_from(filter).map_err(|e| e.to_string())
}

/// seccompiler's program as the kernel's instructions (the same
/// `repr(C)` layout, field for field).
pub(crate) fn as_sock_filters(program: &BpfProgram) -> Vec<libc::sock_filter> {
    program
        .iter()
        .map(|i| libc::sock_filter {
            code: i.code,
            jt: i.jt,
            jf: i.jf,
            k: i.k,
        })
        .collect()
}

fn cond(
    arg: u8,
    op: SeccompCmpOp,
    value: u64,
) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
}

/// `ioctl(fd, TIOCSTI | TIOCLINUX, …)`: the request is an `unsigned int`
/// to the kernel, so only its low 32 bits are compared.
fn terminal_rules() -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|request| {
            // `Ioctl` is `c_ulong` or `c_int` depending on the C library.
            #[allow(clippy::useless_conversion)]
            let request = u64::try_from(request).unwrap_or(u64::MAX);
            SeccompRule::new(vec![cond(1, SeccompCmpOp::Eq, request)?])
        })
        .collect()
}

fn network_rules(
    tcp_by_landlock: bool,
) -> Result<BTreeMap<i64, Vec<SeccompRule>>, seccompiler::BackendError> {
    let unix = libc::AF_UNIX as u64;
    let netlink = libc::AF_NETLINK as u64;
    let inet = libc::AF_INET as u64;
    let inet6 = libc::AF_INET6 as u64;
    let mut socket = vec![SeccompRule::new(vec![
        cond(0, SeccompCmpOp::Ne, unix)?,
        cond(0, SeccompCmpOp::Ne, netlink)?,
        cond(0, SeccompCmpOp::Ne, inet)?,
        cond(0, SeccompCmpOp::Ne, inet6)?,
    ])?];
    for family in [inet, inet6] {
        if !tcp_by_landlock {
            socket.push(SeccompRule::new(vec![cond(0, SeccompCmpOp::Eq, family)?])?);
            continue;
        }
        // The socket type's low bits; the rest are SOCK_NONBLOCK/CLOEXEC.
        for kind in [
            libc::SOCK_DGRAM,
            libc::SOCK_RAW,
            libc::SOCK_RDM,
            libc::SOCK_SEQPACKET,
            6,  // SOCK_DCCP
            10, // SOCK_PACKET
        ] {
            socket.push(SeccompRule::new(vec![
                cond(0, SeccompCmpOp::Eq, family)?,
                cond(1, SeccompCmpOp::MaskedEq(0xf), kind as u64)?,
            ])?);
        }
        // A stream socket must be plain TCP (protocol 0 or IPPROTO_TCP).
        socket.push(SeccompRule::new(vec![
            cond(0, SeccompCmpOp::Eq, family)?,
            cond(2, SeccompCmpOp::Ne, 0)?,
            cond(2, SeccompCmpOp::Ne, libc::IPPROTO_TCP as u64)?,
        ])?);
    }
    let fastopen = |flags_arg: u8| -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
        Ok(vec![SeccompRule::new(vec![cond(
            flags_arg,
            SeccompCmpOp::MaskedEq(MSG_FASTOPEN),
            MSG_FASTOPEN,
        )?])?])
    };
    Ok(BTreeMap::from([
        (libc::SYS_socket, socket),
        (libc::SYS_sendto, fastopen(3)?),
        (libc::SYS_sendmsg, fastopen(2)?),
        (libc::SYS_sendmmsg, fastopen(3)?),
        (libc::SYS_io_uring_setup, Vec::new()),
        (libc::SYS_io_uring_enter, Vec::new()),
        (libc::SYS_io_uring_register, Vec::new()),
    ]))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_variant_compiles() {
        for network in [
            Network::Untouched,
            Network::Block {
                tcp_by_landlock: true,
            },
            Network::Block {
                tcp_by_landlock: false,
            },
        ] {
            assert!(!filter(network).unwrap().is_empty());
        }
    }
}
