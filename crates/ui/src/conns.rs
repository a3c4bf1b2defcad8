//! The page's connections, bounded: who each peer is, and how many
//! connections each may hold.
//!
//! Anyone on the machine can connect to the page's port, token or not, so
//! what a connection costs the daemon (a descriptor, a task, a buffer)
//! must not be anyone's to multiply:
//!
//! * **Who.** A connection from this machine is attributed to the user
//!   who owns its other end: the kernel's socket table (`sock_diag` over
//!   netlink, the table `/proc/net/tcp{,6}` shows, asked for that one
//!   socket) names the uid of the socket with the peer's address as its
//!   own. On loopback every peer has the same IP, so the uid is what tells
//!   the daemon's own user from the others. A peer on another machine
//!   (only when `[ui] listen` exposes the page) is known by its IP.
//! * **Not signed in yet.** A connection that has not carried the cookie
//!   or the bearer token is *fresh*. Each peer holds at most
//!   [`Limits::own_fresh`] fresh connections when it is the daemon's own
//!   user and [`Limits::other_fresh`] otherwise; one more closes that
//!   peer's oldest fresh connection that is idle (whose request, if it
//!   sent one, is not being answered). A flood therefore only ever pushes
//!   out its own connections: another user cannot take the daemon's own
//!   user's share, and the daemon's own user signs in on a new connection
//!   even while one of its programs floods the port (a connection that
//!   sends its request at once is answered before it is the oldest).
//! * **Signed in.** The first request that passes the guard with the
//!   cookie or the bearer token moves its connection out of the fresh
//!   share, into at most [`Limits::signed_in`] signed-in connections
//!   (then `503 UI_BUSY`); nothing pushes those out.
//! * **In all**, at most [`Limits::total`] connections, counted until
//!   their descriptor is closed; beyond that a new one is closed at once.
//!
//! The server adds the time limits (a request's head within
//! [`crate::server::HEADER_TIMEOUT`], which also ends an idle keep-alive
//! connection) and backs off on accept errors.

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

/// The bounds on the page's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Fresh (not yet signed-in) connections of the daemon's own user.
    pub own_fresh: usize,
    /// Fresh connections of any other peer (another user, an unknown
    /// local peer, a remote IP), each.
    pub other_fresh: usize,
    /// Signed-in connections, in all.
    pub signed_in: usize,
    /// Connections in all, fresh or signed in.
    pub total: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            own_fresh: 64,
            other_fresh: 16,
            signed_in: 128,
            total: 256,
        }
    }
}

/// Who is at the other end of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Peer {
    /// A socket on this machine owned by this uid.
    Uid(u32),
    /// A peer on another machine.
    Remote(IpAddr),
    /// A loopback peer whose socket was not found (gone already).
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Fresh,
    SignedIn,
    /// Pushed out by a newer fresh connection of its peer.
    Evicted,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    total: usize,
    signed_in: usize,
    /// Each peer's fresh connections, oldest first.
    fresh: HashMap<Peer, VecDeque<Fresh>>,
}

#[derive(Debug)]
struct Fresh {
    id: u64,
    evicted: CancellationToken,
    /// Its request is being answered: not pushed out meanwhile.
    busy: bool,
}

/// Every connection of one server.
#[derive(Debug)]
pub struct Conns {
    limits: Limits,
    own_uid: u32,
    table: Mutex<Table>,
}

/// One admitted connection: counted until dropped (when its descriptor
/// is closed); [`Slot::closed`] fires when it was pushed out.
#[derive(Debug)]
pub struct Slot {
    conns: Arc<Conns>,
    id: u64,
    peer: Peer,
    state: Mutex<State>,
    evicted: CancellationToken,
}

/// A request's handle on its connection's slot (a request extension).
#[derive(Debug, Clone)]
pub struct SlotHandle(pub Arc<Slot>);

impl Conns {
    /// The table of a server run by `own_uid`.
    pub fn new(limits: Limits, own_uid: u32) -> Arc<Self> {
        Arc::new(Self {
            limits,
            own_uid,
            table: Mutex::new(Table::default()),
        })
    }

    fn fresh_cap(&self, peer: Peer) -> usize {
        match peer {
            Peer::Uid(uid) if uid == self.own_uid => self.limits.own_fresh,
            Peer::Uid(_) | Peer::Remote(_) | Peer::Unknown => self.limits.other_fresh,
        }
    }

    /// Admits a new connection of `peer`, pushing out that peer's oldest
    /// fresh connection when it holds its share; `None` when the server
    /// holds [`Limits::total`] connections already.
    pub fn admit(self: &Arc<Self>, peer: Peer) -> Option<Arc<Slot>> {
        let cap = self.fresh_cap(peer);
        let mut table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if table.total >= self.limits.total {
            return None;
        }
        table.next += 1;
        let id = table.next;
        table.total += 1;
        let evicted = CancellationToken::new();
        let queue = table.fresh.entry(peer).or_default();
        while queue.len() >= cap.max(1) {
            // The oldest idle one; when every one is being answered, none
            // (they end soon: an answer without sign-in closes them), and
            // the total still bounds them.
            let Some(at) = queue.iter().position(|f| !f.busy) else {
                break;
            };
            if let Some(oldest) = queue.remove(at) {
                oldest.evicted.cancel();
            }
        }
        queue.push_back(Fresh {
            id,
            evicted: evicted.clone(),
            busy: false,
        });
        Some(Arc::new(Slot {
            conns: self.clone(),
            id,
            peer,
            state: Mutex::new(State::Fresh),
            evicted,
        }))
    }

    /// (fresh, signed in, total) connections now.
    pub fn counts(&self) -> (usize, usize, usize) {
        let table = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = table.fresh.values().map(VecDeque::len).sum();
        (fresh, table.signed_in, table.total)
    }
}

fn remove_fresh(table: &mut Table, peer: Peer, id: u64) {
    if let Some(queue) = table.fresh.get_mut(&peer) {
        queue.retain(|f| f.id != id);
        if queue.is_empty() {
            table.fresh.remove(&peer);
        }
    }
}

impl Slot {
    /// Fires when a newer connection of the same peer pushed this one out.
    pub fn evicted(&self) -> &CancellationToken {
        &self.evicted
    }

    /// A request arrived on the connection: while it is answered, the
    /// connection is not pushed out.
    pub fn begin_request(&self) {
        let mut table = self.conns.table.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(fresh) = table
            .fresh
            .get_mut(&self.peer)
            .and_then(|q| q.iter_mut().find(|f| f.id == self.id))
        {
            fresh.busy = true;
        }
    }

    /// Moves the connection into the signed-in share (its request carried
    /// the cookie or the bearer token); `false` when that share is full or
    /// the connection was pushed out meanwhile.
    pub fn sign_in(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match *state {
            State::SignedIn => return true,
            State::Evicted => return false,
            State::Fresh => {}
        }
        let mut table = self.conns.table.lock().unwrap_or_else(|p| p.into_inner());
        if self.evicted.is_cancelled() {
            *state = State::Evicted;
            return false;
        }
        if table.signed_in >= self.conns.limits.signed_in {
            return false;
        }
        remove_fresh(&mut table, self.peer, self.id);
        table.signed_in += 1;
        *state = State::SignedIn;
        true
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let state = *self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut table = self.conns.table.lock().unwrap_or_else(|p| p.into_inner());
        table.total = table.total.saturating_sub(1);
        match state {
            State::SignedIn => table.signed_in = table.signed_in.saturating_sub(1),
            State::Fresh | State::Evicted => remove_fresh(&mut table, self.peer, self.id),
        }
    }
}

// ---- who the peer is ---------------------------------------------------------

/// Finds the owner of a connection's other end.
#[derive(Debug, Default)]
pub struct PeerFinder {
    diag: Diag,
    seq: u32,
}

/// The `sock_diag` netlink socket.
#[derive(Debug, Default)]
enum Diag {
    /// Not opened yet (opened on first use).
    #[default]
    Untried,
    Open(OwnedFd),
    /// The kernel cannot answer `sock_diag` queries here: `/proc/net/tcp{,6}`
    /// is read instead, from now on.
    Unavailable,
}

/// `sock_diag`'s message type and the flags of a request.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLM_F_REQUEST: u16 = 1;
const NLMSG_ERROR: u16 = 2;
/// The sizes of `nlmsghdr` and `inet_diag_req_v2`.
const NLMSG_HDR: usize = 16;
const REQ_V2: usize = 56;
/// Where `idiag_uid` sits in a reply (header, then `inet_diag_msg`).
const UID_AT: usize = NLMSG_HDR + 64;

impl PeerFinder {
    /// Who holds the socket at `peer` that is connected to `local`.
    pub fn find(&mut self, peer: SocketAddr, local: SocketAddr) -> Peer {
        let peer = SocketAddr::new(peer.ip().to_canonical(), peer.port());
        let local = SocketAddr::new(local.ip().to_canonical(), local.port());
        let uid = match self.diag_uid(peer, local) {
            Ok(uid) => uid,
            Err(DiagError::NotFound) => None,
            // One query that failed (a timeout, a short reply) is answered
            // from /proc; only an unavailable socket turns netlink off.
            Err(DiagError::Failed) => proc_net_uid(peer, local),
            Err(DiagError::Unavailable) => {
                self.diag = Diag::Unavailable;
                proc_net_uid(peer, local)
            }
        };
        match uid {
            Some(uid) => Peer::Uid(uid),
            None if peer.ip().is_loopback() => Peer::Unknown,
            None => Peer::Remote(peer.ip()),
        }
    }

    fn diag_uid(&mut self, peer: SocketAddr, local: SocketAddr) -> Result<Option<u32>, DiagError> {
        use nix::sys::socket::{
            AddressFamily, MsgFlags, NetlinkAddr, SockFlag, SockProtocol, SockType, recv, sendto,
            setsockopt, socket, sockopt,
        };
        if matches!(self.diag, Diag::Untried) {
            let fd = socket(
                AddressFamily::Netlink,
                SockType::Datagram,
                SockFlag::SOCK_CLOEXEC,
                SockProtocol::NetlinkSockDiag,
            )
            .map_err(|_| DiagError::Unavailable)?;
            // The kernel answers at once; never wait long on it.
            let timeout = nix::sys::time::TimeVal::new(0, 200_000);
            setsockopt(&fd, sockopt::ReceiveTimeout, &timeout)
                .map_err(|_| DiagError::Unavailable)?;
            self.diag = Diag::Open(fd);
        }
        let Diag::Open(fd) = &self.diag else {
            return Err(DiagError::Unavailable);
        };
        self.seq = self.seq.wrapping_add(1);
        let request = diag_request(self.seq, peer, local);
        sendto(
            fd.as_raw_fd(),
            &request,
            &NetlinkAddr::new(0, 0),
            MsgFlags::empty(),
        )
        .map_err(|_| DiagError::Failed)?;
        let mut reply = [0u8; 512];
        loop {
            let n = recv(fd.as_raw_fd(), &mut reply, MsgFlags::empty())
                .map_err(|_| DiagError::Failed)?;
            let reply = &reply[..n];
            if reply.len() < NLMSG_HDR {
                return Err(DiagError::Failed);
            }
            let seq = u32::from_ne_bytes([reply[8], reply[9], reply[10], reply[11]]);
            if seq != self.seq {
                continue; // an answer to an earlier question that timed out
            }
            let kind = u16::from_ne_bytes([reply[4], reply[5]]);
            return match kind {
                SOCK_DIAG_BY_FAMILY if reply.len() >= UID_AT + 4 => Ok(Some(u32::from_ne_bytes([
                    reply[UID_AT],
                    reply[UID_AT + 1],
                    reply[UID_AT + 2],
                    reply[UID_AT + 3],
                ]))),
                NLMSG_ERROR if reply.len() >= NLMSG_HDR + 4 => {
                    let errno = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
                    if errno == -libc::ENOENT {
                        Err(DiagError::NotFound)
                    } else {
                        Err(DiagError::Unavailable)
                    }
                }
                _ => Err(DiagError::Failed),
            };
        }
    }
}

enum DiagError {
    /// No such socket on this machine.
    NotFound,
    /// `sock_diag` cannot answer here.
    Unavailable,
    /// This one query got no usable answer.
    Failed,
}

/// An address as `inet_diag_sockid` holds it: 16 bytes, network order.
fn diag_addr(ip: IpAddr) -> [u8; 16] {
    let mut out = [0u8; 16];
    match ip {
        IpAddr::V4(v4) => out[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => out.copy_from_slice(&v6.octets()),
    }
    out
}

/// The `SOCK_DIAG_BY_FAMILY` request for the one TCP socket whose own
/// address is `own` and whose peer is `remote`.
fn diag_request(seq: u32, own: SocketAddr, remote: SocketAddr) -> Vec<u8> {
    let family = match (own.ip(), remote.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => libc::AF_INET,
        _ => libc::AF_INET6,
    };
    let (own_ip, remote_ip) = match family {
        libc::AF_INET => (own.ip(), remote.ip()),
        _ => (v6(own.ip()), v6(remote.ip())),
    };
    let mut m = Vec::with_capacity(NLMSG_HDR + REQ_V2);
    m.extend_from_slice(&((NLMSG_HDR + REQ_V2) as u32).to_ne_bytes());
    m.extend_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    m.extend_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    m.extend_from_slice(&seq.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, ext, pad, states (all).
    m.push(family as u8);
    m.push(libc::IPPROTO_TCP as u8);
    m.push(0);
    m.push(0);
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: sport, dport, src, dst, if, cookie (none).
    m.extend_from_slice(&own.port().to_be_bytes());
    m.extend_from_slice(&remote.port().to_be_bytes());
    m.extend_from_slice(&diag_addr(own_ip));
    m.extend_from_slice(&diag_addr(remote_ip));
    m.extend_from_slice(&0u32.to_ne_bytes());
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    m.extend_from_slice(&u32::MAX.to_ne_bytes());
    m
}

fn v6(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V6(v4.to_ipv6_mapped()),
        IpAddr::V6(_) => ip,
    }
}

/// An address as `/proc/net/tcp{,6}` prints it.
fn proc_addr(addr: SocketAddr) -> String {
    let ip = match addr.ip() {
        IpAddr::V4(v4) => format!("{:08X}", u32::from_ne_bytes(v4.octets())),
        IpAddr::V6(v6) => v6
            .octets()
            .chunks_exact(4)
            .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
    };
    format!("{ip}:{:04X}", addr.port())
}

/// The uid of the socket at `own` connected to `remote`, from
/// `/proc/net/tcp{,6}` (where `sock_diag` is not available).
fn proc_net_uid(own: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let mapped = |a: SocketAddr| SocketAddr::new(v6(a.ip()), a.port());
    // An IPv4 connection is in `tcp`, or in `tcp6` when it reached an IPv6
    // socket (as a mapped address); an IPv6 one only in `tcp6`.
    let ipv4 = (own.is_ipv4() && remote.is_ipv4()).then_some(("/proc/net/tcp", own, remote));
    ipv4.into_iter()
        .chain([("/proc/net/tcp6", mapped(own), mapped(remote))])
        .find_map(|(path, own, remote)| {
            let text = std::fs::read_to_string(path).ok()?;
            uid_in_table(&text, &proc_addr(own), &proc_addr(remote))
        })
}

fn uid_in_table(text: &str, own: &str, remote: &str) -> Option<u32> {
    text.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(1) == Some(&own) && fields.get(2) == Some(&remote) {
            fields.get(7)?.parse().ok()
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn limits() -> Limits {
        Limits {
            own_fresh: 3,
            other_fresh: 2,
            signed_in: 2,
            total: 8,
        }
    }

    #[test]
    fn a_peer_pushes_out_only_its_own_oldest_fresh_connections() {
        let conns = Conns::new(limits(), 1000);
        let own: Vec<_> = (0..3)
            .map(|_| conns.admit(Peer::Uid(1000)).unwrap())
            .collect();
        let other: Vec<_> = (0..5)
            .map(|_| conns.admit(Peer::Uid(1001)).unwrap())
            .collect();
        // The other user's flood pushed out its own, oldest first.
        assert_eq!(
            other
                .iter()
                .map(|s| s.evicted().is_cancelled())
                .collect::<Vec<_>>(),
            [true, true, true, false, false]
        );
        assert!(own.iter().all(|s| !s.evicted().is_cancelled()));
        // Pushed out but not yet closed: still counted.
        assert_eq!(conns.counts(), (5, 0, 8));
        assert!(conns.admit(Peer::Uid(1000)).is_none(), "the total is full");
        drop(other);
        assert_eq!(conns.counts(), (3, 0, 3));
        // A fourth own connection pushes out the oldest own one.
        let fourth = conns.admit(Peer::Uid(1000)).unwrap();
        assert!(own[0].evicted().is_cancelled());
        assert!(!own[0].sign_in(), "a pushed-out connection cannot sign in");
        // Signed in: out of the fresh share, never pushed out.
        assert!(own[1].sign_in() && own[1].sign_in());
        assert!(fourth.sign_in());
        assert!(!own[2].sign_in(), "the signed-in share is full");
        for _ in 0..5 {
            drop(conns.admit(Peer::Uid(1000)));
        }
        assert!(!own[1].evicted().is_cancelled() && !fourth.evicted().is_cancelled());
        assert_eq!(conns.counts(), (1, 2, 4));
        drop((own, fourth));
        assert_eq!(conns.counts(), (0, 0, 0));
    }

    #[test]
    fn a_connection_whose_request_is_answered_is_not_pushed_out() {
        let conns = Conns::new(limits(), 1000);
        let first = conns.admit(Peer::Uid(1000)).unwrap();
        first.begin_request();
        let rest: Vec<_> = (0..4)
            .map(|_| conns.admit(Peer::Uid(1000)).unwrap())
            .collect();
        assert!(!first.evicted().is_cancelled());
        assert!(rest[0].evicted().is_cancelled() && rest[1].evicted().is_cancelled());
        assert!(first.sign_in());
    }

    #[test]
    fn the_diag_request_names_the_peers_own_socket() {
        let own: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let remote: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let m = diag_request(7, own, remote);
        assert_eq!(m.len(), 72);
        assert_eq!(&m[0..4], &72u32.to_ne_bytes());
        assert_eq!(m[16], libc::AF_INET as u8);
        assert_eq!(&m[24..26], &40000u16.to_be_bytes());
        assert_eq!(&m[26..28], &8080u16.to_be_bytes());
        assert_eq!(&m[28..32], &[127, 0, 0, 1]);
        assert_eq!(&m[44..48], &[127, 0, 0, 1]);
    }

    #[test]
    fn the_proc_table_is_read_as_the_kernel_prints_it() {
        let own: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let remote: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
             0: {} {} 01 00000000:00000000 00:00000000 00000000  1001        0 12345 1\n",
            proc_addr(own),
            proc_addr(remote)
        );
        assert_eq!(proc_addr(own), "0100007F:9C40");
        assert_eq!(
            uid_in_table(&table, &proc_addr(own), &proc_addr(remote)),
            Some(1001)
        );
        assert_eq!(
            uid_in_table(&table, &proc_addr(remote), &proc_addr(own)),
            None
        );
    }

    #[test]
    fn a_real_loopback_peer_is_found_as_this_user() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let client = std::net::TcpStream::connect(addr).unwrap();
        let (_server, peer) = listener.accept().unwrap();
        let me = nix::unistd::getuid().as_raw();
        let mut finder = PeerFinder::default();
        assert_eq!(finder.find(peer, addr), Peer::Uid(me));
        assert_eq!(proc_net_uid(peer, addr), Some(me));
        drop(client);
    }
}
