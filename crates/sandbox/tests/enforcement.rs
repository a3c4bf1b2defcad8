//! The sandbox enforced by the real kernel: real children (bash, python3,
//! git) spawned through `Prepared::pre_exec_step`, checked for what they
//! could and could not do. The tests run as whatever user runs them
//! (root in CI: Landlock confines root too).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use pretty_assertions::assert_eq;
use sandbox::{
    Availability, EnvPolicy, Mode, Prepared, RefusedAccess, RefusedPath, ReplState, Sandbox,
    SandboxPolicy, SpawnContext,
};

/// A home directory, a workspace (a git repository) and a temp dir of
/// their own, side by side: the home and the workspace are outside the
/// temp dir wherever the checkout is (under the system's temp dir too), so
/// that the temp dir's write grant does not cover them.
struct Fixture {
    _base: tempfile::TempDir,
    home: PathBuf,
    ws: PathBuf,
    tmp: PathBuf,
}

impl Fixture {
    fn new() -> Self {
        let base = tempfile::Builder::new()
            .prefix("sandbox-test-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap();
        let root = base.path().canonicalize().unwrap();
        let home = root.join("home");
        let ws = root.join("ws");
        let tmp = root.join("tmp");
        std::fs::create_dir(&tmp).unwrap();
        for d in [".ssh", ".cache", ".config", "notes"] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        std::fs::write(home.join(".ssh/id_rsa"), "PRIVATE KEY\n").unwrap();
        std::fs::write(home.join("notes/readme"), "hello\n").unwrap();
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::write(ws.join("existing.txt"), "old\n").unwrap();
        let git = Command::new("git")
            .args(["init", "-q"])
            .arg(&ws)
            .status()
            .expect("git must be installed for these tests");
        assert!(git.success());
        Self {
            _base: base,
            home,
            ws,
            tmp,
        }
    }

    fn context(&self) -> SpawnContext {
        SpawnContext::command(&self.ws, &self.home).with_temp_dir(&self.tmp)
    }

    /// A path in the fixture's temp dir.
    fn in_tmp(&self, name: &str) -> PathBuf {
        self.tmp.join(name)
    }

    fn prepare(&self, policy: SandboxPolicy) -> Prepared {
        prepare_with(policy, Availability::probe_kernel(), &self.context())
    }
}

fn prepare_with(policy: SandboxPolicy, availability: Availability, ctx: &SpawnContext) -> Prepared {
    Sandbox::new(policy, availability)
        .unwrap()
        .prepare(ctx)
        .unwrap()
}

fn policy(mode: Mode) -> SandboxPolicy {
    SandboxPolicy {
        mode,
        ..SandboxPolicy::default()
    }
}

/// Runs `bash -c script` in `cwd` under `prepared`, in a new session like
/// every spawn of dsh, with HOME set.
fn run(prepared: &Prepared, home: &Path, cwd: &Path, script: &str) -> Output {
    let mut command = Command::new("bash");
    command
        .args(["-c", script])
        .current_dir(cwd)
        .env("HOME", home)
        .stdin(Stdio::null());
    let step = prepared.pre_exec_step();
    // SAFETY: setsid and the sandbox step are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
        command.pre_exec(step);
    }
    command.output().expect("spawn")
}

/// `path` quoted for a shell script: the fixture lives under the checkout's
/// target dir, whose path may hold spaces or quotes.
fn sh(path: &Path) -> String {
    format!("'{}'", path.display().to_string().replace('\'', r"'\''"))
}

/// The status line without what this kernel's Landlock lacks (said in
/// the reason as `(Landlock ABI n < m)`; tested with simulated ABIs).
fn line(p: &Prepared) -> String {
    let mut status = p.status().clone();
    status.reason = status.reason.and_then(|r| {
        let kept: Vec<&str> = r
            .split("; ")
            .filter(|gap| !gap.contains("(Landlock ABI "))
            .collect();
        (!kept.is_empty()).then(|| kept.join("; "))
    });
    status.to_string()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[track_caller]
fn assert_ok(out: &Output) {
    assert!(out.status.success(), "expected success: {}", text(out));
}

/// What every status says when there is no mount namespace (user
/// namespaces simulated away).
const NO_MOUNT_NAMESPACE: &str = "the user's other terminals and the sockets of tmux, X, Docker \
     and the session bus stay reachable (user namespaces unavailable (simulated by \
     DSH_SANDBOX_TEST_PRETEND))";

#[track_caller]
fn assert_refused(out: &Output, message: &str) {
    assert!(!out.status.success(), "expected a refusal: {}", text(out));
    assert!(
        text(out).contains(message),
        "expected {message:?} in: {}",
        text(out)
    );
}

/// Waits for `path` to exist (a grandchild reporting back).
fn wait_for_file(path: &Path) -> String {
    test_support::wait_for(&format!("{} appears", path.display()), || {
        std::fs::read_to_string(path)
            .ok()
            .filter(|s| s.ends_with('\n'))
    })
}

#[test]
fn workspace_write_allows_the_root_the_temp_dir_and_caches_and_refuses_the_rest() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let p = f.prepare(policy(Mode::WorkspaceWrite));
    assert_eq!(line(&p), "[sandbox: workspace-write · network on]");
    let ws = &f.ws;
    // Allowed: new and existing files at the top of the root, deeper
    // directories, the temp dir, a writable cache, /dev/null.
    let tmp = f.in_tmp("ww");
    for script in [
        "echo a > new.txt && cat new.txt".to_owned(),
        "echo b >> existing.txt && rm new.txt && mv existing.txt moved.txt".to_owned(),
        "mkdir -p sub/deeper && echo c > sub/deeper/f && cat sub/deeper/f".to_owned(),
        format!("echo d > {t} && cat {t}", t = sh(&tmp)),
        "echo e > ~/.cache/ok && cat ~/.cache/ok".to_owned(),
        "echo f > /dev/null; cat /etc/hostname ~/notes/readme > /dev/null".to_owned(),
    ] {
        assert_ok(&run(&p, &f.home, ws, &script));
    }
    std::fs::remove_file(&tmp).unwrap();
    assert_eq!(
        std::fs::read_to_string(ws.join("moved.txt")).unwrap(),
        "old\nb\n"
    );

    // Refused: the home directory, a sibling of the root, /etc, .git.
    let config_before = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    let out = run(&p, &f.home, ws, "echo x > \"$HOME/x\"");
    assert_refused(&out, "Permission denied");
    assert!(!f.home.join("x").exists());
    assert_eq!(
        p.refusals(&text(&out), ws).paths,
        [RefusedPath {
            path: f.home.join("x"),
            access: RefusedAccess::Write
        }]
    );
    assert_refused(
        &run(&p, &f.home, ws, "echo x > ../sibling"),
        "Permission denied",
    );
    assert_refused(
        &run(&p, &f.home, ws, "echo x >> /etc/hostname"),
        "Permission denied",
    );
    let out = run(&p, &f.home, ws, "echo '[x]' >> .git/config");
    assert_refused(&out, "Read-only file system");
    assert_eq!(
        p.refusals(&text(&out), ws).paths,
        [RefusedPath {
            path: ws.join(".git/config"),
            access: RefusedAccess::Write
        }]
    );
    let out = run(&p, &f.home, ws, "git config user.name intruder");
    assert_refused(&out, "Read-only file system");
    assert_refused(
        &run(&p, &f.home, ws, "echo evil > .git/hooks/pre-commit"),
        "Read-only file system",
    );
    assert_eq!(
        std::fs::read_to_string(ws.join(".git/config")).unwrap(),
        config_before
    );
    // Reading git state still works.
    assert_ok(&run(&p, &f.home, ws, "git status --short"));
}

#[test]
fn git_writable_lets_git_write() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let p = f.prepare(SandboxPolicy {
        git_writable: true,
        ..SandboxPolicy::default()
    });
    assert_ok(&run(&p, &f.home, &f.ws, "git config user.name allowed"));
}

#[test]
fn grandchildren_started_with_setsid_or_nohup_are_confined_the_same() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let p = f.prepare(policy(Mode::WorkspaceWrite));
    // The command returns at once; its grandchildren outlive it in their
    // own session (setsid) or immune to hang-ups (nohup), and report back
    // through files in the workspace.
    let out = run(
        &p,
        &f.home,
        &f.ws,
        "setsid bash -c 'echo x > \"$HOME/by-setsid\"; echo $? > r-setsid' </dev/null >/dev/null 2>&1 &
         nohup bash -c 'echo x > \"$HOME/by-nohup\"; echo $? > r-nohup' </dev/null >/dev/null 2>&1 &
         exit 0",
    );
    assert_ok(&out);
    assert_eq!(wait_for_file(&f.ws.join("r-setsid")), "1\n");
    assert_eq!(wait_for_file(&f.ws.join("r-nohup")), "1\n");
    assert!(!f.home.join("by-setsid").exists());
    assert!(!f.home.join("by-nohup").exists());
}

#[test]
fn deny_read_hides_credentials_in_every_mode_but_off() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    std::os::unix::fs::symlink(f.home.join(".ssh/id_rsa"), f.home.join("innocent-link")).unwrap();
    for mode in [Mode::WorkspaceWrite, Mode::ReadOnly] {
        let p = f.prepare(policy(mode));
        let out = run(&p, &f.home, &f.ws, "cat ~/.ssh/id_rsa");
        assert_refused(&out, "Permission denied");
        assert_eq!(
            p.refusals(&text(&out), &f.ws).paths,
            [RefusedPath {
                path: f.home.join(".ssh/id_rsa"),
                access: RefusedAccess::Read
            }],
            "{mode}"
        );
        // A symlink elsewhere does not open it either.
        assert_refused(
            &run(&p, &f.home, &f.ws, "cat ~/innocent-link"),
            "Permission denied",
        );
        // Names stay listable; the rest of home stays readable.
        let out = run(&p, &f.home, &f.ws, "ls ~/.ssh && cat ~/notes/readme");
        assert_ok(&out);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "id_rsa\nhello\n");
    }
    let off = f.prepare(policy(Mode::Off));
    assert_eq!(off.status().to_string(), "[sandbox: off]");
    let out = run(&off, &f.home, &f.ws, "cat ~/.ssh/id_rsa");
    assert_ok(&out);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "PRIVATE KEY\n");
}

#[test]
fn a_denied_path_that_is_a_symlink_protects_its_target() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    std::fs::create_dir_all(f.home.join("real-aws")).unwrap();
    std::fs::write(f.home.join("real-aws/credentials"), "secret\n").unwrap();
    std::os::unix::fs::symlink(f.home.join("real-aws"), f.home.join(".aws")).unwrap();
    let p = f.prepare(policy(Mode::WorkspaceWrite));
    assert_refused(
        &run(&p, &f.home, &f.ws, "cat ~/real-aws/credentials"),
        "Permission denied",
    );
}

#[test]
fn read_only_allows_only_the_temp_dir_shared_memory_and_devices() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let p = f.prepare(policy(Mode::ReadOnly));
    assert_eq!(line(&p), "[sandbox: read-only · network on]");
    let tmp = f.in_tmp("ro");
    let shm = PathBuf::from("/dev/shm").join(format!("dsh-sandbox-{}", std::process::id()));
    let out = run(
        &p,
        &f.home,
        &f.ws,
        &format!(
            "echo a > {t} && cat {t} && echo b > {s} && cat {s} && echo c > /dev/null",
            t = sh(&tmp),
            s = sh(&shm)
        ),
    );
    assert_ok(&out);
    std::fs::remove_file(&tmp).unwrap();
    std::fs::remove_file(&shm).unwrap();
    for script in [
        "echo x > new.txt",
        "echo x >> existing.txt",
        "echo x > ~/.cache/no",
        "echo x > ~/x",
    ] {
        assert_refused(&run(&p, &f.home, &f.ws, script), "Permission denied");
    }
    assert_ok(&run(&p, &f.home, &f.ws, "cat existing.txt"));
}

#[test]
fn a_language_server_may_write_only_its_project_root_and_caches() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let project = f.ws.join("crate-a");
    std::fs::create_dir_all(&project).unwrap();
    let ctx = SpawnContext::language_server(&project, &f.home).with_temp_dir(&f.tmp);
    let p = prepare_with(
        policy(Mode::WorkspaceWrite),
        Availability::probe_kernel(),
        &ctx,
    );
    assert_ok(&run(
        &p,
        &f.home,
        &project,
        "mkdir -p target && echo x > target/out && echo y > ~/.cache/ra",
    ));
    assert_refused(
        &run(&p, &f.home, &project, "echo x > ../outside"),
        "Permission denied",
    );
    assert_refused(
        &run(&p, &f.home, &project, "echo x > ~/build-script-was-here"),
        "Permission denied",
    );
}

#[test]
fn the_host_private_dirs_are_neither_readable_nor_writable() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let private = f.home.join(".config/dsh");
    std::fs::create_dir_all(&private).unwrap();
    std::fs::write(private.join("config.toml"), "[sandbox]\n").unwrap();
    let ctx = f.context().with_private([&private]);
    let p = prepare_with(
        policy(Mode::WorkspaceWrite),
        Availability::probe_kernel(),
        &ctx,
    );
    // Hidden behind an empty read-only directory in the mount namespace,
    // and refused by Landlock where there is none.
    let out = run(&p, &f.home, &f.ws, "cat ~/.config/dsh/config.toml");
    assert!(!out.status.success() && !text(&out).contains("[sandbox]"));
    assert!(
        text(&out).contains("No such file or directory")
            || text(&out).contains("Permission denied"),
        "{}",
        text(&out)
    );
    let out = run(&p, &f.home, &f.ws, "echo x > ~/.config/dsh/config.toml");
    assert!(!out.status.success(), "{}", text(&out));
    assert_eq!(
        std::fs::read_to_string(private.join("config.toml")).unwrap(),
        "[sandbox]\n"
    );
}

/// Listeners of the host (this test) on 127.0.0.1 and in the workspace.
struct HostListeners {
    tcp: TcpListener,
    port: u16,
    udp: UdpSocket,
    udp_port: u16,
    unix_path: PathBuf,
    _unix: std::os::unix::net::UnixListener,
}

impl HostListeners {
    fn new(dir: &Path) -> Self {
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        tcp.set_nonblocking(true).unwrap();
        let port = tcp.local_addr().unwrap().port();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        udp.set_nonblocking(true).unwrap();
        let udp_port = udp.local_addr().unwrap().port();
        let unix_path = dir.join("service.sock");
        let unix = std::os::unix::net::UnixListener::bind(&unix_path).unwrap();
        Self {
            tcp,
            port,
            udp,
            udp_port,
            unix_path,
            _unix: unix,
        }
    }

    fn tcp_script(&self) -> String {
        format!("exec 3<>/dev/tcp/127.0.0.1/{}", self.port)
    }

    fn udp_script(&self) -> String {
        format!("echo hi > /dev/udp/127.0.0.1/{}", self.udp_port)
    }

    /// A TCP Fast Open send: it connects without `connect`.
    fn fast_open_script(&self) -> String {
        format!(
            "python3 -c \"import socket; s = socket.socket(); \
             s.sendto(b'x', 0x20000000, ('127.0.0.1', {}))\"",
            self.port
        )
    }

    /// A Multipath TCP connection, which Landlock's TCP rules miss.
    fn mptcp_script(&self) -> String {
        format!(
            "python3 -c \"import socket; \
             socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262).connect(('127.0.0.1', {}))\"",
            self.port
        )
    }

    fn unix_script(&self) -> String {
        format!(
            "python3 -c \"import socket; a, b = socket.socketpair(); a.send(b'x'); \
             assert b.recv(1) == b'x'; s = socket.socket(socket.AF_UNIX)\n\
             try: s.connect('{}'); raise SystemExit('reached a socket outside')\n\
             except PermissionError: pass\"",
            self.unix_path.display()
        )
    }

    /// Nothing reached the IP listeners.
    #[track_caller]
    fn assert_untouched(&self) {
        assert!(self.tcp.accept().is_err(), "a TCP connection arrived");
        let mut buf = [0u8; 16];
        assert!(self.udp.recv(&mut buf).is_err(), "a UDP datagram arrived");
    }
}

#[test]
fn the_network_off_gives_commands_a_network_of_their_own() {
    if !test_support::needs(&["git", "python3"]) {
        return;
    }
    let f = Fixture::new();
    let host = HostListeners::new(&f.ws);
    let p = f.prepare(SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    });
    assert_eq!(line(&p), "[sandbox: workspace-write · network off]");
    // The host's loopback is not the sandbox's: nothing listens there.
    let out = run(&p, &f.home, &f.ws, &host.tcp_script());
    assert_refused(&out, "Connection refused");
    assert!(p.refusals(&text(&out), &f.ws).network);
    assert_refused(
        &run(&p, &f.home, &f.ws, &host.fast_open_script()),
        "Connection refused",
    );
    assert_refused(
        &run(&p, &f.home, &f.ws, &host.mptcp_script()),
        "Connection refused",
    );
    // A datagram to the sandbox's loopback goes nowhere; any other address
    // has no route.
    assert_ok(&run(&p, &f.home, &f.ws, &host.udp_script()));
    assert_refused(
        &run(&p, &f.home, &f.ws, "echo hi > /dev/udp/192.0.2.1/53"),
        "Network is unreachable",
    );
    assert_refused(
        &run(&p, &f.home, &f.ws, "exec 3<>/dev/tcp/192.0.2.1/80"),
        "Network is unreachable",
    );
    host.assert_untouched();
    // Unix socket pairs work; a listener outside is refused by path.
    assert_ok(&run(&p, &f.home, &f.ws, &host.unix_script()));
}

#[test]
fn commands_with_the_network_off_share_the_sandbox_loopback() {
    if !test_support::needs(&["git", "python3"]) {
        return;
    }
    let f = Fixture::new();
    let p = f.prepare(SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    });
    // A server in one spawn, a client in another.
    let server_script = "python3 -c \"
import os, socket
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()
open('port.tmp', 'w').write(str(s.getsockname()[1])); os.rename('port.tmp', 'port')
c, _ = s.accept(); open('got.tmp', 'w').write(c.recv(16).decode() + '\\n'); os.rename('got.tmp', 'got')
\"";
    let mut server = Command::new("bash");
    server
        .args(["-c", server_script])
        .current_dir(&f.ws)
        .stdin(Stdio::null());
    let step = p.pre_exec_step();
    // SAFETY: the sandbox step is async-signal-safe.
    unsafe { server.pre_exec(step) };
    let mut server = server.spawn().unwrap();
    let port = wait_for_value(&f.ws.join("port"));
    assert_ok(&run(
        &p,
        &f.home,
        &f.ws,
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && printf hello >&3"),
    ));
    assert_eq!(wait_for_file(&f.ws.join("got")), "hello\n");
    assert!(server.wait().unwrap().success());
}

/// Waits for a file that appears whole (written, then renamed into place).
fn wait_for_value(path: &Path) -> String {
    test_support::wait_for(&format!("{} appears", path.display()), || {
        std::fs::read_to_string(path).ok()
    })
}

#[test]
fn without_user_namespaces_the_network_off_falls_back_to_landlock_and_seccomp() {
    if !test_support::needs(&["git", "python3"]) {
        return;
    }
    let f = Fixture::new();
    let host = HostListeners::new(&f.ws);
    let no_userns = Availability::probe_kernel().pretend("no-userns").unwrap();
    let p = prepare_with(
        SandboxPolicy {
            network: false,
            git_writable: true,
            ..SandboxPolicy::default()
        },
        no_userns,
        &f.context(),
    );
    assert_eq!(
        line(&p),
        format!("[sandbox: workspace-write · network off — {NO_MOUNT_NAMESPACE}]")
    );
    // TCP by Landlock, at connect (EACCES); the rest by seccomp (EPERM).
    let out = run(&p, &f.home, &f.ws, &host.tcp_script());
    assert_refused(&out, "Permission denied");
    assert!(p.refusals(&text(&out), &f.ws).network);
    for script in [
        host.udp_script(),
        host.fast_open_script(),
        host.mptcp_script(),
    ] {
        assert_refused(&run(&p, &f.home, &f.ws, &script), "Operation not permitted");
    }
    host.assert_untouched();
    assert_ok(&run(&p, &f.home, &f.ws, &host.unix_script()));
}

#[test]
fn with_the_network_on_everything_reaches_the_host() {
    if !test_support::needs(&["git", "python3"]) {
        return;
    }
    let f = Fixture::new();
    let host = HostListeners::new(&f.ws);
    let on = f.prepare(SandboxPolicy::default());
    // Everything but a Unix socket outside by path, which the guard of
    // connect refuses whatever the network setting.
    for script in [
        host.tcp_script(),
        host.fast_open_script(),
        host.udp_script(),
        host.unix_script(),
    ] {
        assert_ok(&run(&on, &f.home, &f.ws, &script));
    }
    let mut buf = [0u8; 16];
    host.tcp.set_nonblocking(false).unwrap();
    let (_plain, _) = host.tcp.accept().unwrap();
    let (mut fast, _) = host.tcp.accept().unwrap();
    // The fast-open connection carried its byte.
    fast.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    assert_eq!(fast.read(&mut buf).unwrap(), 1);
    host.udp.set_nonblocking(false).unwrap();
    host.udp
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let n = host.udp.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"hi\n");
}

#[test]
fn abstract_unix_sockets_outside_are_unreachable() {
    if !test_support::needs(&["git", "python3"]) {
        return;
    }
    use std::os::linux::net::SocketAddrExt;
    let f = Fixture::new();
    let name = format!("dsh-sandbox-test-{}", std::process::id());
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
    let _listener = std::os::unix::net::UnixListener::bind_addr(&addr).unwrap();
    let script =
        format!("python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('\\0{name}')\"");
    let off = SandboxPolicy {
        network: false,
        ..SandboxPolicy::default()
    };
    // Abstract names belong to a network namespace...
    let p = f.prepare(off.clone());
    assert_refused(&run(&p, &f.home, &f.ws, &script), "Connection refused");
    // ...and without one, Landlock scopes them.
    let no_userns = Availability::probe_kernel().pretend("no-userns").unwrap();
    let p = prepare_with(off, no_userns, &f.context());
    assert_refused(&run(&p, &f.home, &f.ws, &script), "Operation not permitted");
    // With the network on too: Landlock scopes them (ABI 6).
    let on = f.prepare(SandboxPolicy::default());
    assert_refused(
        &run(&on, &f.home, &f.ws, &script),
        "Operation not permitted",
    );
}

#[test]
fn a_confined_process_can_neither_read_the_hosts_environment_nor_signal_its_processes() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let p = f.prepare(policy(Mode::WorkspaceWrite));
    // Our own environment (the host's, which may hold API keys).
    let me = std::process::id();
    assert_refused(
        &run(&p, &f.home, &f.ws, &format!("cat /proc/{me}/environ")),
        "Permission denied",
    );
    // A process outside the sandbox.
    let mut outside = Command::new("sleep").arg("60").spawn().unwrap();
    let script = format!("kill -0 {}", outside.id());
    assert_refused(&run(&p, &f.home, &f.ws, &script), "Operation not permitted");
    let off = f.prepare(policy(Mode::Off));
    assert_ok(&run(&off, &f.home, &f.ws, &script));
    assert_ok(&run(
        &off,
        &f.home,
        &f.ws,
        &format!("cat /proc/{me}/environ > /dev/null"),
    ));
    outside.kill().unwrap();
    outside.wait().unwrap();
    // Nor a process of another confined spawn: each has its own sandbox.
    let mut sibling = Command::new("sleep");
    sibling.arg("60");
    let step = p.pre_exec_step();
    // SAFETY: the sandbox step is async-signal-safe.
    unsafe { sibling.pre_exec(step) };
    let mut sibling = sibling.spawn().unwrap();
    let script = format!("kill -0 {}", sibling.id());
    assert_refused(&run(&p, &f.home, &f.ws, &script), "Operation not permitted");
    // What a command started itself, it may signal.
    assert_ok(&run(
        &p,
        &f.home,
        &f.ws,
        "sleep 60 & kill $! && wait $!; test $? = 143",
    ));
    sibling.kill().unwrap();
    sibling.wait().unwrap();
}

#[test]
fn below_landlock_abi_6_the_status_says_what_is_not_scoped_and_it_is_not() {
    if !test_support::needs(&["git", "python3"]) {
        return;
    }
    let f = Fixture::new();
    let abi5 = Availability::probe_kernel()
        .pretend("landlock-abi=5,no-userns")
        .unwrap();
    let signals = "signals reach processes outside (Landlock ABI 5 < 6) (simulated by DSH_SANDBOX_TEST_PRETEND)";
    let p = prepare_with(
        SandboxPolicy {
            git_writable: true,
            ..SandboxPolicy::default()
        },
        abi5.clone(),
        &f.context(),
    );
    assert_eq!(
        p.status().reason.as_deref(),
        Some(format!("{NO_MOUNT_NAMESPACE}; {signals}").as_str())
    );
    // What the status says holds: a process outside is reachable.
    let mut outside = Command::new("sleep").arg("60").spawn().unwrap();
    assert_ok(&run(
        &p,
        &f.home,
        &f.ws,
        &format!("kill -0 {}", outside.id()),
    ));
    outside.kill().unwrap();
    outside.wait().unwrap();
    // With the network off and no namespace, abstract sockets too.
    let name = format!("dsh-sandbox-test-abi5-{}", std::process::id());
    let listener = std::os::unix::net::UnixListener::bind_addr(
        &<std::os::unix::net::SocketAddr as std::os::linux::net::SocketAddrExt>::from_abstract_name(
            name.as_bytes(),
        )
        .unwrap(),
    )
    .unwrap();
    let connect =
        format!("python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('\\0{name}')\"");
    let off = prepare_with(
        SandboxPolicy {
            git_writable: true,
            network: false,
            ..SandboxPolicy::default()
        },
        abi5,
        &f.context(),
    );
    assert_eq!(
        off.status().reason.as_deref(),
        Some(format!("{NO_MOUNT_NAMESPACE}; {signals}").as_str())
    );
    // Not by Landlock's scope but by the guard of connect.
    assert_refused(
        &run(&off, &f.home, &f.ws, &connect),
        "Operation not permitted",
    );
    drop(listener);
    // A required sandbox still runs: files and the network are enforced.
    let required = Sandbox::new(
        SandboxPolicy {
            required: true,
            git_writable: true,
            ..SandboxPolicy::default()
        },
        Availability::probe_kernel()
            .pretend("landlock-abi=5,no-userns")
            .unwrap(),
    )
    .unwrap()
    .prepare(&f.context())
    .unwrap();
    assert!(required.status().enforced);
}

#[test]
fn without_landlock_it_runs_unconfined_and_says_so_or_refuses_when_required() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let old = Availability::probe_kernel()
        .pretend("landlock-abi=0")
        .unwrap();
    let p = prepare_with(SandboxPolicy::default(), old.clone(), &f.context());
    assert_eq!(
        p.status().to_string(),
        "[sandbox: unavailable — the kernel has no Landlock (Linux 5.13 or later with Landlock \
         enabled is needed) (simulated by DSH_SANDBOX_TEST_PRETEND); running unconfined]"
    );
    assert!(!p.status().enforced && !p.confines());
    // Unconfined, as reported.
    assert_ok(&run(&p, &f.home, &f.ws, "echo x > ~/x"));
    let err = Sandbox::new(
        SandboxPolicy {
            required: true,
            ..SandboxPolicy::default()
        },
        old,
    )
    .unwrap()
    .prepare(&f.context())
    .unwrap_err();
    assert_eq!(err.code(), "SANDBOX_UNAVAILABLE");
    assert!(err.to_string().contains("no Landlock"), "{err}");
}

#[test]
fn an_old_kernel_without_tcp_rules_blocks_the_network_by_seccomp_alone() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = tcp.local_addr().unwrap().port();
    let old = Availability::probe_kernel()
        .pretend("landlock-abi=3,no-userns")
        .unwrap();
    let p = prepare_with(
        SandboxPolicy {
            network: false,
            git_writable: true,
            ..SandboxPolicy::default()
        },
        old,
        &f.context(),
    );
    assert_eq!(
        p.status().to_string(),
        format!(
            "[sandbox: workspace-write · network off — {NO_MOUNT_NAMESPACE}; signals reach \
             processes outside (Landlock ABI 3 < 6) (simulated by DSH_SANDBOX_TEST_PRETEND)]"
        )
    );
    // Refused at socket() by seccomp (EPERM), not at connect() by Landlock.
    assert_refused(
        &run(
            &p,
            &f.home,
            &f.ws,
            &format!("exec 3<>/dev/tcp/127.0.0.1/{port}"),
        ),
        "Operation not permitted",
    );
    assert_refused(
        &run(&p, &f.home, &f.ws, "echo x > ~/x"),
        "Permission denied",
    );
}

#[test]
fn without_namespaces_or_seccomp_only_tcp_is_blocked_and_required_refuses() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let no_seccomp = Availability::probe_kernel()
        .pretend("no-seccomp,no-userns")
        .unwrap();
    let off = SandboxPolicy {
        git_writable: true,
        network: false,
        ..SandboxPolicy::default()
    };
    let p = prepare_with(off.clone(), no_seccomp.clone(), &f.context());
    assert_eq!(
        p.status().to_string(),
        format!(
            "[sandbox: workspace-write · network on — {NO_MOUNT_NAMESPACE}; TIOCSTI (typing into a \
             terminal) is not refused: the kernel has no seccomp (simulated by \
             DSH_SANDBOX_TEST_PRETEND); only TCP is blocked: UDP and raw sockets need a network \
             namespace or seccomp (simulated by DSH_SANDBOX_TEST_PRETEND)]"
        )
    );
    let err = Sandbox::new(
        SandboxPolicy {
            required: true,
            ..off
        },
        no_seccomp,
    )
    .unwrap()
    .prepare(&f.context())
    .unwrap_err();
    assert_eq!(err.code(), "SANDBOX_UNAVAILABLE");
}

#[test]
fn without_user_namespaces_git_stays_read_only_at_the_cost_of_new_top_level_files() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    std::fs::create_dir(f.ws.join("sub")).unwrap();
    let no_userns = Availability::probe_kernel().pretend("no-userns").unwrap();
    let p = prepare_with(SandboxPolicy::default(), no_userns, &f.context());
    assert!(p.status().enforced);
    assert_eq!(
        p.status().reason.as_deref(),
        Some(
            format!(
                "{NO_MOUNT_NAMESPACE}; new files cannot be created at the top of the workspace, \
                 because .git is kept read-only without a mount namespace (user namespaces \
                 unavailable (simulated by DSH_SANDBOX_TEST_PRETEND)); set git_writable = true to \
                 lift this"
            )
            .as_str()
        )
    );
    assert_refused(
        &run(&p, &f.home, &f.ws, "echo '[x]' >> .git/config"),
        "Permission denied",
    );
    assert_refused(
        &run(&p, &f.home, &f.ws, "echo x > new.txt"),
        "Permission denied",
    );
    assert_ok(&run(
        &p,
        &f.home,
        &f.ws,
        "echo x >> existing.txt && mkdir sub/deeper && echo y > sub/deeper/f",
    ));
}

#[test]
fn the_env_policy_hides_secrets_from_a_real_child() {
    if !test_support::needs(&["git"]) {
        return;
    }
    let f = Fixture::new();
    let p = f.prepare(SandboxPolicy::default());
    let host = [
        ("PATH", std::env::var("PATH").unwrap()),
        ("HOME", f.home.display().to_string()),
        ("SOME_API_TOKEN", "t0k3n".to_owned()),
        ("HARMLESS", "yes".to_owned()),
    ];
    let run_env = |policy: &EnvPolicy| -> String {
        let mut command = Command::new("env");
        command.env_clear().envs(policy.apply(host.clone()));
        let step = p.pre_exec_step();
        // SAFETY: the sandbox step is async-signal-safe.
        unsafe { command.pre_exec(step) };
        String::from_utf8(command.output().unwrap().stdout).unwrap()
    };
    let out = run_env(&EnvPolicy::default());
    assert!(out.contains("HARMLESS=yes\n"), "{out}");
    assert!(!out.contains("t0k3n"), "{out}");
    let out = run_env(&EnvPolicy {
        include_only: vec!["PATH".into()],
        set: BTreeMap::from([("EXTRA".to_owned(), "1".to_owned())]),
        ..EnvPolicy::default()
    });
    let mut lines: Vec<&str> = out.lines().map(|l| l.split('=').next().unwrap()).collect();
    lines.sort();
    assert_eq!(lines, ["EXTRA", "PATH"]);
}

#[test]
fn the_repl_state_dir_is_writable_in_every_confined_mode_and_home_stays_closed() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    let state = ReplState::new(f.home.join(".local/state/dsh/repl"));
    let dir = state.ensure(&f.ws).unwrap();
    let ctx = f.context().with_state_dir(Some(dir.clone()));
    for mode in [Mode::WorkspaceWrite, Mode::ReadOnly] {
        let p = prepare_with(policy(mode), Availability::probe_kernel(), &ctx);
        assert!(p.can_write(&dir.join("ipython/x")), "{mode}");
        let out = run(
            &p,
            &f.home,
            &f.ws,
            &format!(
                "mkdir -p {startup} && echo 1 > {file}",
                startup = sh(&dir.join("ipython/profile_default/startup")),
                file = sh(&dir.join(mode.as_str()))
            ),
        );
        assert_ok(&out);
        assert_eq!(
            std::fs::read_to_string(dir.join(mode.as_str())).unwrap(),
            "1\n"
        );
        // The rest of the home directory stays closed, ipython's own
        // directory too.
        let out = run(
            &p,
            &f.home,
            &f.ws,
            "mkdir -p ~/.ipython/profile_default/startup",
        );
        assert_refused(&out, "Permission denied");
        assert!(!f.home.join(".ipython").exists());
        let parent = dir.parent().unwrap();
        assert!(!p.can_write(&parent.join("other-workspace")), "{mode}");
    }
}

#[test]
fn a_repl_state_dir_in_a_closed_directory_or_a_writable_one_gets_no_grant_of_its_own() {
    if !test_support::needs(&["bash", "git"]) {
        return;
    }
    let f = Fixture::new();
    // In a private directory (an `XDG_STATE_HOME` inside dsh's data dir):
    // left out, and the private directory stays closed.
    let private = f.home.join("data");
    let inside = private.join("repl/x");
    std::fs::create_dir_all(&inside).unwrap();
    let ctx = f
        .context()
        .with_private([&private])
        .with_state_dir(Some(inside.clone()));
    let p = prepare_with(
        policy(Mode::WorkspaceWrite),
        Availability::probe_kernel(),
        &ctx,
    );
    assert!(!p.can_write(&inside.join("f")));
    // (Refused, or not even there: the mount namespace seals it.)
    let out = run(
        &p,
        &f.home,
        &f.ws,
        &format!("touch {}", sh(&inside.join("f"))),
    );
    assert!(!out.status.success(), "{}", text(&out));
    assert!(!inside.join("f").exists());
    // Under a writable root (the temp dir): writable through it alone, so
    // in read-only mode too; nothing beside it is granted.
    let in_tmp = f.in_tmp("state/x");
    std::fs::create_dir_all(&in_tmp).unwrap();
    let ctx = f.context().with_state_dir(Some(in_tmp.clone()));
    let p = prepare_with(policy(Mode::ReadOnly), Availability::probe_kernel(), &ctx);
    assert!(p.can_write(&in_tmp.join("f")));
    assert_ok(&run(
        &p,
        &f.home,
        &f.ws,
        &format!("touch {}", sh(&in_tmp.join("f"))),
    ));
}
