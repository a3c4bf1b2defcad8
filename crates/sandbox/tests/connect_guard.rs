//! The guard of `connect` on the real kernel: a confined process reaches a
//! Unix socket by path only when the policy lists it or a process of its
//! own sandbox holds it; everything else it connects to still works.
//! Servers outside are real listeners of this test process; the clients
//! are real `python3` processes spawned through `Prepared::pre_exec_step`.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sandbox::{Availability, Mode, Prepared, SandboxPolicy};

mod common;

use common::{Fixture, stdout};

impl Fixture {
    fn prepare(&self, policy: SandboxPolicy) -> Prepared {
        self.prepare_with(policy, Availability::probe_kernel())
    }

    /// Runs `python3 -c script args…` confined by `prepared`.
    fn python(&self, prepared: &Prepared, script: &str, args: &[&str]) -> Output {
        let mut all = vec!["-c", script];
        all.extend_from_slice(args);
        self.run(prepared, "python3", &all)
    }
}

/// The tests of this file one at a time: one counts the supervisor
/// threads of this process.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn guarded() -> bool {
    common::guarded("connect")
}

fn policy(unix_sockets: Vec<String>) -> SandboxPolicy {
    SandboxPolicy {
        mode: Mode::WorkspaceWrite,
        unix_sockets,
        ..SandboxPolicy::default()
    }
}

/// A listener of this process (outside every sandbox) that answers
/// `hello` to each connection and counts them.
fn outside_server(path: &Path) -> Arc<AtomicUsize> {
    let listener = UnixListener::bind(path).unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            count.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(b"hello");
        }
    });
    accepted
}

/// A loopback TCP listener of this process that answers `tcp` to each
/// connection; its port.
fn tcp_server() -> u16 {
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in tcp.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = stream.write_all(b"tcp");
        }
    });
    port
}

const CONNECT: &str = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
address = sys.argv[1]
if address.startswith("@"):
    address = "\0" + address[1:]
try:
    s.connect(address)
    print("connected", s.recv(5).decode())
except OSError as e:
    print("refused", e.errno)
"#;

#[test]
fn a_socket_outside_is_refused_by_path_unless_the_policy_lists_it() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    // In the temp dir, which the sandbox may write: no hidden place holds
    // it, so only the guard keeps it out of reach.
    let socket = f.tmp.join("outside.sock");
    let accepted = outside_server(&socket);
    let target = socket.to_str().unwrap();

    let closed = f.prepare(policy(Vec::new()));
    let out = f.python(&closed, CONNECT, &[target]);
    assert_eq!(stdout(&out), format!("refused {}", libc::EACCES));
    // Through a symbolic link and a relative path too.
    std::os::unix::fs::symlink(&socket, f.ws.join("link.sock")).unwrap();
    let out = f.python(&closed, CONNECT, &["link.sock"]);
    assert_eq!(stdout(&out), format!("refused {}", libc::EACCES));
    assert_eq!(accepted.load(Ordering::SeqCst), 0);

    let listed = f.prepare(policy(vec![target.to_owned()]));
    let out = f.python(&listed, CONNECT, &[target]);
    assert_eq!(stdout(&out), "connected hello");
    let out = f.python(&listed, CONNECT, &["link.sock"]);
    assert_eq!(stdout(&out), "connected hello");
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[test]
fn a_socket_the_sandbox_itself_holds_is_reached_by_path_and_by_abstract_name() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    let prepared = f.prepare(policy(Vec::new()));
    // A server and its client in one confined process tree: the server a
    // child process, the client its parent, by absolute and relative path,
    // and by an abstract name.
    let script = r#"
import os, socket, sys
def serve(family_address, clients):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(family_address)
    server.listen(4)
    r, w = os.pipe()
    if os.fork() == 0:
        os.write(w, b"x")
        for _ in range(clients):
            c, _ = server.accept()
            c.sendall(b"hello")
            c.close()
        os._exit(0)
    os.read(r, 1)
    server.close()
def ask(address):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(address)
        return s.recv(5).decode()
    except OSError as e:
        return "refused %d" % e.errno
path = os.path.join(sys.argv[1], "inside.sock")
serve(path, 2)
print(ask(path), ask(os.path.relpath(path)))
serve("\0dsh-guard-test-%d" % os.getpid(), 1)
print(ask("\0dsh-guard-test-%d" % os.getpid()))
"#;
    let out = f.python(&prepared, script, &[f.tmp.to_str().unwrap()]);
    assert_eq!(stdout(&out), "hello hello\nhello");
}

#[test]
fn an_abstract_socket_outside_is_refused() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    let name = format!("dsh-guard-outside-{}", std::process::id());
    let listener = std::os::unix::net::UnixListener::bind_addr(
        &<std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            name.as_bytes(),
        )
        .unwrap(),
    )
    .unwrap();
    let prepared = f.prepare(policy(Vec::new()));
    let out = f.python(&prepared, CONNECT, &[&format!("@{name}")]);
    assert_eq!(stdout(&out), format!("refused {}", libc::EPERM));
    drop(listener);
}

#[test]
fn other_connections_behave_as_without_the_guard() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    let port = tcp_server();
    std::fs::write(f.tmp.join("plain-file"), "x").unwrap();
    // A socket file nothing listens on any more (a server that died).
    drop(UnixListener::bind(f.tmp.join("stale.sock")).unwrap());
    let script = r#"
import errno, select, socket, sys
port, tmp = int(sys.argv[1]), sys.argv[2]
def tcp(blocking):
    s = socket.socket()
    s.setblocking(blocking)
    try:
        r = s.connect_ex(("127.0.0.1", port))
        if r == errno.EINPROGRESS:
            select.select([], [s], [], 30)
            r = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if r:
            return "error %d" % r
        s.setblocking(True)
        return s.recv(3).decode()
    except OSError as e:
        return "error %d" % e.errno
def unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
        return "connected"
    except OSError as e:
        return "error %d" % e.errno
print(tcp(True), tcp(False), unix(tmp + "/missing.sock"), unix(tmp + "/plain-file"),
      unix(tmp + "/stale.sock"))
"#;
    let port = port.to_string();
    let args = [port.as_str(), f.tmp.to_str().unwrap()];
    let expected_unix = format!(
        "error {} error {} error {}",
        libc::ENOENT,
        libc::ECONNREFUSED,
        libc::ECONNREFUSED
    );

    let mut open = policy(Vec::new());
    open.network = true;
    let out = f.python(&f.prepare(open), script, &args);
    assert_eq!(stdout(&out), format!("tcp tcp {expected_unix}"));

    let mut closed = policy(Vec::new());
    closed.network = false;
    let out = f.python(&f.prepare(closed), script, &args);
    let refused = stdout(&out);
    assert!(
        !refused.contains("tcp tcp"),
        "the network is off, yet TCP connected: {refused}"
    );
    assert!(refused.ends_with(&expected_unix), "{refused}");
}

#[test]
fn an_address_changed_while_it_is_checked_never_reaches_a_refused_socket() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    let socket = f.tmp.join("target.sock");
    let accepted = outside_server(&socket);
    // One thread connects through a buffer another thread keeps flipping
    // between a path that does not exist and the refused socket's: a guard
    // that checked the address and then let the kernel read it again
    // would let some through.
    let script = r#"
import ctypes, os, socket, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
target = sys.argv[1].encode()
decoy = (os.path.dirname(sys.argv[1]) + "/nothing.sock").encode()
assert len(decoy) <= len(target) + 4
size = 2 + max(len(target), len(decoy)) + 1
buf = ctypes.create_string_buffer(size)
ctypes.memmove(buf, socket.AF_UNIX.to_bytes(2, "little"), 2)
stop = False
def flip():
    while not stop:
        for p in (decoy, target):
            ctypes.memmove(ctypes.addressof(buf) + 2, p + b"\0" * (size - 2 - len(p)), size - 2)
t = threading.Thread(target=flip)
t.start()
connected = 0
for _ in range(1500):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if libc.connect(s.fileno(), buf, size) == 0:
        connected += 1
    s.close()
stop = True
t.join()
print("connected", connected)
"#;
    let prepared = f.prepare(policy(Vec::new()));
    let out = f.python(&prepared, script, &[socket.to_str().unwrap()]);
    assert_eq!(stdout(&out), "connected 0");
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

#[test]
fn each_running_process_has_a_thread_and_the_threads_end_with_the_preparation() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    let count = || {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(Result::ok)
            .filter(|t| {
                std::fs::read_to_string(t.path().join("comm"))
                    .is_ok_and(|c| c.trim() == "dsh-guard-serve")
            })
            .count()
    };
    let before = count();
    let prepared = f.prepare(policy(Vec::new()));
    // Four confined processes at once, each waiting for its input: each
    // has a thread serving its listener, and one more waits for the next.
    let children: Vec<_> = (0..4)
        .map(|_| {
            let mut command = Command::new("python3");
            command
                .args(["-c", "import sys; sys.stdin.read(); print('ok')"])
                .current_dir(&f.ws)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped());
            // SAFETY: the sandbox step is async-signal-safe.
            unsafe { command.pre_exec(prepared.pre_exec_step()) };
            command.spawn().unwrap()
        })
        .collect();
    test_support::wait_until("a thread per running process, and one waiting", || {
        count() == before + 5
    });
    // Meanwhile others are served as ever: a file created in the
    // workspace goes through the guard.
    for i in 0..3 {
        let script = format!("open('made-{i}', 'w').close(); print('ok')");
        assert_eq!(stdout(&f.python(&prepared, &script, &[])), "ok");
    }
    for mut child in children {
        drop(child.stdin.take());
        let out = child.wait_with_output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    }
    // Done with their processes, the threads wait for the next, two at
    // most; the rest end.
    test_support::wait_until("at most two threads left waiting", || count() <= before + 2);
    let out = f.python(&prepared, "print('ok')", &[]);
    assert_eq!(stdout(&out), "ok");
    // The preparation gone, so are they.
    drop(prepared);
    test_support::wait_until("no thread of the preparation left", || count() == before);
}

#[test]
fn a_connection_from_another_thread_is_judged_the_same() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    let listed_socket = f.tmp.join("listed.sock");
    let refused_socket = f.tmp.join("refused.sock");
    let listed_count = outside_server(&listed_socket);
    let refused_count = outside_server(&refused_socket);
    let port = tcp_server().to_string();
    // Go programs (docker, gh) connect from threads other than the main
    // one: the guard must find the thread's process.
    let script = r#"
import socket, sys, threading
listed, refused, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
results = []
def work():
    for address, family in ((listed, socket.AF_UNIX), (refused, socket.AF_UNIX),
                            (("127.0.0.1", port), socket.AF_INET)):
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.connect(address)
            results.append(s.recv(5).decode())
        except OSError as e:
            results.append("refused %d" % e.errno)
t = threading.Thread(target=work)
t.start()
t.join()
print(" ".join(results))
"#;
    let listed = listed_socket.to_str().unwrap().to_owned();
    let prepared = f.prepare(policy(vec![listed.clone()]));
    let out = f.python(
        &prepared,
        script,
        &[&listed, refused_socket.to_str().unwrap(), &port],
    );
    assert_eq!(stdout(&out), format!("hello refused {} tcp", libc::EACCES));
    assert_eq!(listed_count.load(Ordering::SeqCst), 1);
    assert_eq!(refused_count.load(Ordering::SeqCst), 0);
}

#[test]
fn io_uring_which_connects_without_connect_is_refused() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    // With the network on, only the guard's filter refuses io_uring.
    let script = r#"
import ctypes, errno
libc = ctypes.CDLL(None, use_errno=True)
params = ctypes.create_string_buffer(120)
fd = libc.syscall(425, 8, params)  # io_uring_setup
print("refused" if fd < 0 and ctypes.get_errno() == errno.EPERM else "allowed %d" % fd)
"#;
    let out = f.python(&f.prepare(policy(Vec::new())), script, &[]);
    assert_eq!(stdout(&out), "refused");
}

#[test]
fn a_socket_the_host_holds_is_outside_even_when_a_confined_process_holds_it_too() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    // A child of the host holds copies of the host's descriptors until it
    // runs `exec` (and a confined one is in the sandbox's namespace by
    // then): the guard must not take the host's sockets for the
    // sandbox's. Here a confined process inherits the host's listener
    // outright, and a second one asks for it by path.
    let held = UnixListener::bind(f.tmp.join("shared.sock")).unwrap();
    let prepared = f.prepare(policy(Vec::new()));
    let mut holder = Command::new("python3");
    holder
        .args(["-c", "import sys; sys.stdin.read()"])
        .current_dir(&f.ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::null());
    let fd = std::os::fd::AsRawFd::as_raw_fd(&held);
    let step = prepared.pre_exec_step();
    // SAFETY: dup2, setsid and the sandbox step are async-signal-safe.
    unsafe {
        holder.pre_exec(move || {
            libc::dup2(fd, 3);
            libc::setsid();
            Ok(())
        });
        holder.pre_exec(step);
    }
    let mut holder = holder.spawn().unwrap();
    let inherited = |pid: u32| {
        std::fs::read_link(format!("/proc/{pid}/fd/3"))
            .is_ok_and(|l| l.to_string_lossy().starts_with("socket:"))
    };
    test_support::wait_until("the confined holder runs", || inherited(holder.id()));
    let out = f.python(
        &prepared,
        CONNECT,
        &[f.tmp.join("shared.sock").to_str().unwrap()],
    );
    assert_eq!(stdout(&out), format!("refused {}", libc::EACCES));
    drop(holder.stdin.take());
    holder.wait().unwrap();
    drop(held);
}

#[test]
fn a_datagram_never_reaches_a_socket_outside_without_connect() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !guarded() {
        return;
    }
    let f = Fixture::new("guard-");
    // A datagram receiver of this process (outside every sandbox) in the
    // temp dir, which the sandbox may write and does not hide.
    let path = f.tmp.join("log.sock");
    let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    receiver.set_nonblocking(true).unwrap();
    // `sendto` and `sendmsg` with the path, from a socket made by
    // `socket` (datagram, or raw, which Unix sockets take for datagram)
    // and from one of a `socketpair`: a guard of `connect` alone sees
    // none of them. A stream pair still works.
    let script = r#"
import socket, sys
path = sys.argv[1]
results = []
def attempt(make, send):
    try:
        s = make()
        send(s)
        results.append("sent")
    except OSError as e:
        results.append("refused %d" % e.errno)
attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM),
        lambda s: s.sendto(b"forged", path))
attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_RAW),
        lambda s: s.sendmsg([b"forged"], [], 0, path))
attempt(lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)[0],
        lambda s: s.sendto(b"forged", path))
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
a.sendall(b"ok")
results.append(b.recv(2).decode())
print(" ".join(results))
"#;
    let prepared = f.prepare(policy(Vec::new()));
    let out = f.python(&prepared, script, &[path.to_str().unwrap()]);
    assert_eq!(stdout(&out), "refused 1 refused 1 refused 1 ok");
    let mut buffer = [0u8; 16];
    assert!(
        receiver.recv(&mut buffer).is_err(),
        "no datagram arrived outside"
    );
}
