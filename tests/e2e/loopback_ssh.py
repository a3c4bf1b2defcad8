"""A real OpenSSH server on 127.0.0.1 for the remote suite and its
benchmark: its own port, a throwaway host key and user key in a private
directory, password logins off, and the client's config that reaches it
under one host name. The remote side's environment (its XDG dirs, its
PATH) is set by the server (`SetEnv`), as a real host's login would give
them. Nothing here touches the user's own ssh config or any address
outside loopback."""

import os
import pathlib
import shutil
import socket
import subprocess
import threading

SSHD = "/usr/sbin/sshd"
HOST = "dsh-test-remote"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackSshd:
    """`with LoopbackSshd(directory, remote_env) as sshd:` — a running
    server; `sshd.ssh_command` is the ssh client command (for
    DSH_SSH_COMMAND) that reaches it as `HOST`."""

    def __init__(self, directory: pathlib.Path, remote_env: dict):
        self.dir = pathlib.Path(directory)
        self.remote_env = remote_env
        self.port = free_port()
        self.log = []
        self.server = None

    def __enter__(self):
        if not os.path.exists(SSHD):
            raise RuntimeError(f"{SSHD} is missing: install Debian's openssh-server (`cargo xtask test` does)")
        d = self.dir
        d.mkdir(mode=0o700, parents=True)
        for key in ("host", "user"):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / key)], check=True)
        shutil.copy(d / "user.pub", d / "authorized_keys")
        # sshd needs its privilege-separation directory.
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
        set_env = " ".join(f"{k}={v}" for k, v in self.remote_env.items())
        (d / "sshd_config").write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nPidFile {d}/sshd.pid\n"
            f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
            f"StrictModes no\nSetEnv {set_env}\nLogLevel INFO\n"
        )
        kind, key = (d / "host.pub").read_text().split()[:2]
        (d / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {kind} {key}\n")
        user = os.environ.get("USER") or "root"
        (d / "ssh_config").write_text(
            f"Host {HOST}\n  HostName 127.0.0.1\n  Port {self.port}\n  User {user}\n"
            f"  IdentityFile {d}/user\n  IdentitiesOnly yes\n  UserKnownHostsFile {d}/known_hosts\n"
            "  GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n"
        )
        self.ssh_command = f"ssh -F {d}/ssh_config"
        self.server = subprocess.Popen(
            [SSHD, "-D", "-e", "-f", str(d / "sshd_config")], stderr=subprocess.PIPE, text=True
        )
        # The server says when it listens: the wait is on that line.
        while True:
            line = self.server.stderr.readline()
            if not line:
                raise RuntimeError(f"sshd exited ({self.server.wait()}): {''.join(self.log)}")
            self.log.append(line)
            if "Server listening" in line:
                break
        # Keep reading, so sshd never blocks on a full pipe.
        threading.Thread(target=lambda: self.log.extend(self.server.stderr), daemon=True).start()
        return self

    def __exit__(self, *exc):
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=30)
