//! Getting a `dsh mcp` running on the target, as VS Code Remote does: the
//! bridge opens the stream, asks the target what it is, installs its own
//! static build there when the target lacks it, and starts it.
//!
//! The far side is `sh -s`; the bridge writes one script to it and then
//! says nothing until the script asks. The script is one function called
//! on its last line, so every shell has read all of it before it runs,
//! and whatever the shell buffered of its input is script, never an
//! answer or the binary. The exchange, one line each way:
//!
//! ```text
//! target: @dsh-remote os=Linux arch=x86_64 have=no
//! bridge: send            (then exactly SIZE bytes)   — or: go
//! target: @dsh-remote start                           — or: @dsh-remote error WHY
//! ```
//!
//! After `start` the script `exec`s `dsh mcp` and the stream is MCP. The
//! build lands in the remote user's data directory
//! (`${XDG_DATA_HOME:-~/.local/share}/dsh/bin`, mode 0700, never
//! system-wide), named by version and checksum, written to a temporary
//! name, checked with `sha256sum` (or `shasum -a 256`) against the sum
//! the bridge computed, and only then renamed into place. Nothing is sent
//! before the target's system and architecture are confirmed to run the
//! build. Lines a login script prints before ours are passed to stderr.
//!
//! Nothing at the install path runs unless the script verified it (another
//! user who could create the path first must not get their program run as
//! this one): `dsh/` and `dsh/bin` must be real directories (no symbolic
//! links) owned by the user, `dsh/` writable by no one else, `dsh/bin`
//! mode 0700 once `chmod 700` is checked to have taken; the build a
//! regular file (no symbolic link) owned by the user, mode 0700 (or 0500).
//! Anything else is refused with an `@dsh-remote error` saying what is
//! wrong and to remove it: the script never removes what another user
//! made. The user's own file whose SHA-256 is not the build's is removed
//! and the build installed again (stderr says so). The SHA-256 is checked
//! again, with the directories and modes, right before each of the two
//! times the build runs (`--version`, then `exec … mcp`).

use std::collections::VecDeque;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use sha2::Digest as _;

use crate::remotes::target::Target;

/// The environment variable that names the static build to install on
/// targets (by default: this executable, when it is statically linked).
pub const BINARY_VAR: &str = "DSH_REMOTE_BINARY";

/// The longest line read from the stream (a tool result is far smaller).
pub const MAX_LINE: u64 = 64 * 1024 * 1024;

/// How long the target may take to answer each step of the bootstrap.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

/// How many lines of the transport's stderr are kept for messages.
const STDERR_TAIL: usize = 6;

/// Why the build to install could not be found, or a target could not be
/// bootstrapped: what failed and why, in words a model can act on.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// This executable's path could not be found.
    #[error("cannot find this dsh executable: {0}")]
    CurrentExe(std::io::Error),
    /// The build to install could not be opened.
    #[error("cannot read the build to install, {}: {error}", path.display())]
    OpenBuild {
        /// The build.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// A file could not be read.
    #[error("cannot read {}: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        error: std::io::Error,
    },
    /// The build `$DSH_REMOTE_BINARY` names is not a static Linux
    /// executable.
    #[error(
        "{} (${BINARY_VAR}) is not a statically linked Linux executable; build one with `cargo xtask static`",
        path.display(),
        BINARY_VAR = BINARY_VAR
    )]
    NotStatic {
        /// The build.
        path: PathBuf,
    },
    /// The stream's command could not be started.
    #[error("cannot start the stream to {host}: {error}")]
    Spawn {
        /// The target's host.
        host: String,
        /// Why.
        error: std::io::Error,
    },
    /// The stream's command started without its pipes.
    #[error("cannot start the stream to {host}: no pipes")]
    NoPipes {
        /// The target's host.
        host: String,
    },
    /// A dynamically linked build does not run on the target.
    #[error(
        "{error}; this dsh ({}) is dynamically linked: build the static one with `cargo xtask static`, which runs on any {arch} Linux",
        path.display()
    )]
    Dynamic {
        /// What the target said.
        error: Box<BootstrapError>,
        /// The build.
        path: PathBuf,
        /// Its architecture.
        arch: &'static str,
    },
    /// The target is not Linux.
    #[error("{host} runs {os}; dsh's daemon runs on Linux only, so it cannot be the remote end")]
    NotLinux {
        /// The target's host.
        host: String,
        /// What `uname -s` said.
        os: String,
    },
    /// The target's architecture is not the build's.
    #[error(
        "{host} is {arch}, and the build this dsh installs ({}) is {build_arch}: name a static {arch} build of dsh in ${BINARY_VAR}",
        path.display(),
        BINARY_VAR = BINARY_VAR
    )]
    WrongArch {
        /// The target's host.
        host: String,
        /// The target's architecture.
        arch: String,
        /// The build.
        path: PathBuf,
        /// The build's architecture.
        build_arch: &'static str,
    },
    /// The stream closed while the build was sent.
    #[error("the stream to {host} closed while dsh was installed there ({error}{status}){said}")]
    ClosedWhileInstalling {
        /// The target's host.
        host: String,
        /// The failed write.
        error: std::io::Error,
        /// How the transport exited (`, ssh exited with 255`), or nothing.
        status: String,
        /// Its last words (`; it said: …`), or nothing.
        said: String,
    },
    /// The bootstrap script said dsh could not start.
    #[error("dsh could not start on {host}: {why}")]
    CouldNotStart {
        /// The target's host.
        host: String,
        /// The script's words.
        why: String,
    },
    /// The stream ended before dsh started.
    #[error("the stream to {host} ended before dsh started there ({why}{status}){said}")]
    EndedBeforeStart {
        /// The target's host.
        host: String,
        /// How the stream ended.
        why: String,
        /// How the transport exited, or nothing.
        status: String,
        /// Its last words, or nothing.
        said: String,
    },
    /// The target said nothing in time.
    #[error("{host} did not answer within {secs} s{said}")]
    NoAnswer {
        /// The target's host.
        host: String,
        /// How long it was given.
        secs: u64,
        /// The transport's last words, or nothing.
        said: String,
    },
    /// The stream closed while the bootstrap script was written.
    #[error("the stream to {host} closed during the bootstrap ({error}{status}){said}")]
    ClosedDuringBootstrap {
        /// The target's host.
        host: String,
        /// The failed write.
        error: std::io::Error,
        /// How the transport exited, or nothing.
        status: String,
        /// Its last words, or nothing.
        said: String,
    },
}

/// The build installed on targets.
#[derive(Debug, Clone)]
pub struct Build {
    /// The file.
    pub path: PathBuf,
    /// The name it is installed under: `dsh-VERSION-SHA256[..16]`.
    pub name: String,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// The architecture it is for, as `uname -m` names it.
    pub arch: &'static str,
    /// Whether it is dynamically linked: it runs only where the target's
    /// C library is as new as the one it was built against.
    pub dynamic: bool,
}

impl Build {
    /// The build to install: the one `$DSH_REMOTE_BINARY` names (it must
    /// be statically linked), else this executable when it is; else the
    /// static build the project's own build put beside this one (`cargo
    /// xtask static`, or the tests' static build) when it is of this
    /// version; else this dynamically linked executable, which runs on a
    /// target whose C library is as new as this machine's (the target's
    /// `--version` check says when it is not, and how to get the static
    /// one). The error says how to get a build.
    pub fn find() -> Result<Self, BootstrapError> {
        let (path, dynamic) = match std::env::var_os(BINARY_VAR).filter(|v| !v.is_empty()) {
            Some(path) => (PathBuf::from(path), false),
            None => {
                let exe = std::env::current_exe().map_err(BootstrapError::CurrentExe)?;
                if static_arch(&exe)?.is_some() {
                    (exe, false)
                } else if let Some(sibling) = static_sibling(&exe) {
                    (sibling, false)
                } else {
                    (exe, true)
                }
            }
        };
        let mut file = std::fs::File::open(&path).map_err(|error| BootstrapError::OpenBuild {
            path: path.clone(),
            error,
        })?;
        let arch = if dynamic {
            elf_arch(&path)?.map(|(arch, _)| arch)
        } else {
            static_arch(&path)?
        };
        let Some(arch) = arch else {
            return Err(BootstrapError::NotStatic { path });
        };
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut size = 0u64;
        loop {
            let n = file.read(&mut buf).map_err(|error| BootstrapError::Read {
                path: path.clone(),
                error,
            })?;
            if n == 0 {
                break;
            }
            size += n as u64;
            hasher.update(&buf[..n]);
        }
        let sha256: String = hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let name = format!("dsh-{}-{}", env!("CARGO_PKG_VERSION"), &sha256[..16]);
        Ok(Self {
            path,
            name,
            sha256,
            size,
            arch,
            dynamic,
        })
    }
}

/// The static build of this version that the project's own build put
/// beside `exe` (`target/release/dsh` → `target/ARCH-unknown-linux-musl/
/// {static,release,static-test}/dsh`), the newest first; `None` when there
/// is none or it says another version.
fn static_sibling(exe: &std::path::Path) -> Option<PathBuf> {
    let target = exe.parent()?.parent()?;
    let triple = format!("{}-unknown-linux-musl", std::env::consts::ARCH);
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = ["static", "release", "static-test"]
        .iter()
        .map(|profile| target.join(&triple).join(profile).join("dsh"))
        .filter(|p| matches!(static_arch(p), Ok(Some(_))))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .collect();
    found.sort_by_key(|f| std::cmp::Reverse(f.0));
    found.into_iter().map(|(_, p)| p).find(|p| {
        std::process::Command::new(p)
            .arg("--version")
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .is_ok_and(|out| {
                out.status.success()
                    && String::from_utf8_lossy(&out.stdout)
                        .split_whitespace()
                        .any(|w| w == env!("CARGO_PKG_VERSION"))
            })
    })
}

/// The architecture of `path` when it is a 64-bit little-endian ELF
/// executable with no program interpreter (statically linked), as every
/// Linux build of dsh is; `None` for anything else. Reads the ELF header
/// and the program headers only.
fn static_arch(path: &std::path::Path) -> Result<Option<&'static str>, BootstrapError> {
    Ok(elf_arch(path)?.and_then(|(arch, interp)| (!interp).then_some(arch)))
}

/// The architecture of `path` when it is a 64-bit little-endian ELF
/// executable, and whether it names a program interpreter (is dynamically
/// linked); `None` for anything else.
fn elf_arch(path: &std::path::Path) -> Result<Option<(&'static str, bool)>, BootstrapError> {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(path).map_err(|error| BootstrapError::Read {
        path: path.to_path_buf(),
        error,
    })?;
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    // ELF magic, 64-bit, little-endian.
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        return Ok(None);
    }
    let arch = match u16_at(0x12) {
        Some(62) => "x86_64",
        Some(183) => "aarch64",
        Some(243) => "riscv64",
        _ => return Ok(None),
    };
    let (Some(phoff), Some(phentsize), Some(phnum)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return Ok(None);
    };
    let interp = (0..usize::from(phnum)).any(|i| {
        usize::try_from(phoff)
            .ok()
            .and_then(|off| u32_at(off + i * usize::from(phentsize)))
            == Some(PT_INTERP)
    });
    Ok(Some((arch, interp)))
}

/// `uname -m` as Rust names the architecture.
fn normalised_arch(uname_m: &str) -> &str {
    match uname_m {
        "amd64" => "x86_64",
        "arm64" | "armv8l" => "aarch64",
        other => other,
    }
}

/// The shell functions that check the install path before anything there
/// is trusted (see the module docs). Each check ends the script with an
/// `@dsh-remote error` line that says what is wrong and how to fix it.
const CHECKS: &str = r#"dsh_fail() {
  echo "@dsh-remote error $*"
  exit 1
}
dsh_ls() { set -- $(ls -ldn -- "$1" 2>/dev/null); echo "$1 $3"; }
dsh_sum() { { sha256sum "$1" 2>/dev/null || shasum -a 256 "$1" 2>/dev/null; } | cut -d ' ' -f 1; }
dsh_check_dir() {
  if [ -L "$1" ]; then dsh_fail "$1 is a symbolic link, not a directory dsh made: whoever made it chooses what would run as you; remove it (rm -- $1) and connect again"; fi
  [ -d "$1" ] || dsh_fail "$1 is not a directory; remove it and connect again"
  set -- "$1" $(dsh_ls "$1")
  [ "$3" = "$me" ] || dsh_fail "$1 is owned by another user (uid $3), who could put a program there that would run as you; remove it (rm -rf -- $1, as root if need be) and connect again"
}
dsh_check_dirs() {
  for d in "$top" "$dir"; do
    if [ -e "$d" ] || [ -L "$d" ]; then dsh_check_dir "$d"; fi
  done
  if [ -d "$top" ]; then
    case $(dsh_ls "$top") in
      ?????w????*|????????w?*) dsh_fail "$top can be written by other users (mode $(dsh_ls "$top" | cut -d ' ' -f 1)), who could replace what is in it; make it private (chmod 700 $top), or remove it, and connect again" ;;
    esac
  fi
  if [ -d "$dir" ]; then
    chmod 700 "$dir" || dsh_fail "cannot make $dir private (chmod 700 failed); remove it and connect again"
    case $(dsh_ls "$dir") in
      "drwx------"*) ;;
      *) dsh_fail "$dir is mode $(dsh_ls "$dir" | cut -d ' ' -f 1) even after chmod 700 (a file system that ignores modes?); set XDG_DATA_HOME on the target to a directory on a local file system and connect again" ;;
    esac
  fi
}
dsh_check_file() {
  if [ -L "$bin" ]; then dsh_fail "$bin is a symbolic link, not the file dsh installed: whoever made it chooses what would run as you; remove it (rm -- $bin) and connect again"; fi
  [ -f "$bin" ] || dsh_fail "$bin is not a regular file; remove it (rm -rf -- $bin) and connect again"
  set -- $(dsh_ls "$bin")
  [ "$2" = "$me" ] || dsh_fail "$bin is owned by another user (uid $2), not installed by dsh as you: remove it (rm -f -- $bin) and connect again"
}
dsh_verify() {
  dsh_check_dirs
  dsh_check_file
  case $(dsh_ls "$bin") in
    "-rwx------"*|"-r-x------"*) ;;
    *) chmod 700 "$bin" || dsh_fail "cannot make $bin private (chmod 700 failed); remove it and connect again" ;;
  esac
  case $(dsh_ls "$bin") in
    "-rwx------"*|"-r-x------"*) ;;
    *) dsh_fail "$bin is mode $(dsh_ls "$bin" | cut -d ' ' -f 1) even after chmod 700; remove it and connect again" ;;
  esac
  got=$(dsh_sum "$bin")
  [ -n "$got" ] || dsh_fail "the target has neither sha256sum nor shasum to check $bin; install coreutils there and connect again"
  [ "$got" = "$sum" ] || dsh_fail "$bin changed after it was checked (sha256 $got, expected $sum); remove it (rm -f -- $bin) and connect again"
}
"#;

/// The script the target's `sh -s` runs (see the module docs).
fn script(build: &Build, path: Option<&str>, preset: Option<&str>) -> String {
    let preset_args = preset.map_or(String::new(), |p| format!(" --preset {}", quote(p)));
    let main = format!(
        r#"dsh_bootstrap() {{
  name={name}; sum={sum}; size={size}; workdir={workdir}
  set -f
  umask 077
  me=$(id -u)
  top="${{XDG_DATA_HOME:-$HOME/.local/share}}/dsh"
  dir="$top/bin"
  bin="$dir/$name"
  dsh_check_dirs
  have=no
  if [ -e "$bin" ] || [ -L "$bin" ]; then
    dsh_check_file
    if [ "$(dsh_sum "$bin")" = "$sum" ]; then
      have=yes
    else
      echo "dsh: $bin is not the build this dsh installs (its sha256 differs): removing it and installing the build again" >&2
      rm -f "$bin" || dsh_fail "cannot remove $bin, which is not the build this dsh installs; remove it and connect again"
    fi
  fi
  echo "@dsh-remote os=$(uname -s) arch=$(uname -m) have=$have"
  IFS= read -r answer || exit 1
  case "$answer" in
    send)
      mkdir -p "$dir" || dsh_fail "cannot create $dir"
      dsh_check_dirs
      tmp="$bin.part.$$"
      trap 'rm -f "$tmp"' EXIT HUP INT TERM
      head -c "$size" > "$tmp" || {{ rm -f "$tmp"; dsh_fail "cannot write $tmp"; }}
      got=$(dsh_sum "$tmp")
      if [ -z "$got" ]; then rm -f "$tmp"; dsh_fail "the target has neither sha256sum nor shasum to check the upload"; fi
      if [ "$got" != "$sum" ]; then rm -f "$tmp"; dsh_fail "the upload arrived damaged (sha256 $got, expected $sum)"; fi
      chmod 700 "$tmp" && mv -f "$tmp" "$bin" || dsh_fail "cannot install $bin"
      trap - EXIT HUP INT TERM
      ;;
    go) ;;
    *) exit 1 ;;
  esac
  if [ -n "$workdir" ]; then
    cd "$workdir" || dsh_fail "the target has no directory $workdir"
  fi
  dsh_verify
  why=$("$bin" --version 2>&1) || dsh_fail "$bin does not run on the target: $(echo "$why" | head -n 1) (a data directory on a noexec mount?)"
  echo "@dsh-remote start"
  # With SSH_CLIENT set, bash reads ~/.bashrc even to run one command: the
  # agent's commands would each pay for the login's start-up files.
  unset SSH_CLIENT SSH2_CLIENT
  dsh_verify
  exec "$bin" mcp{preset_args}
}}
dsh_bootstrap
"#,
        name = quote(&build.name),
        sum = quote(&build.sha256),
        size = build.size,
        workdir = quote(path.unwrap_or("")),
    );
    format!("{CHECKS}{main}")
}

/// A word for a POSIX shell, in single quotes.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// One line from the stream, or its end.
#[derive(Debug)]
pub enum Line {
    /// A line, without its newline.
    Text(Vec<u8>),
    /// The stream ended (or a line was too long to be MCP).
    End(String),
}

/// A running stream to `dsh mcp` on the target.
pub struct Stream {
    /// The transport (ssh, or the exec command).
    pub child: Child,
    /// Its stdin: MCP to the target.
    pub stdin: ChildStdin,
    /// Its stdout, line by line.
    pub lines: mpsc::Receiver<Line>,
    /// The last lines it wrote to stderr (also passed to ours).
    pub stderr: Arc<Mutex<VecDeque<String>>>,
    /// Closed once its stderr reached its end.
    pub stderr_done: mpsc::Receiver<()>,
}

impl Stream {
    /// What the transport last said on stderr, for a message.
    pub fn stderr_tail(&self) -> String {
        tail_of(&self.stderr)
    }

    /// Ends the transport and reaps it.
    pub fn end(mut self) {
        let _ = finish(&mut self.child, &self.stderr_done);
    }
}

/// The transport after its stream ended: how it exited (waiting a moment
/// for it, then ending its process group) once its last words on stderr
/// are in. Never blocks for long.
pub fn finish(child: &mut Child, stderr_done: &mpsc::Receiver<()>) -> String {
    let status = crate::remotes::wait_within(child, Duration::from_secs(2));
    // Its whole process group (ssh, or what an exec command started) —
    // only while the leader is unreaped, so the group's id is still ours.
    if let (None, Ok(pid)) = (status, i32::try_from(child.id())) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let waited = child.wait();
    let _ = stderr_done.recv_timeout(Duration::from_secs(1));
    match status {
        Some(s) => format!(", {s}"),
        None => waited
            .map(|_| ", ended by dsh".to_owned())
            .unwrap_or_default(),
    }
}

fn tail_of(lines: &Mutex<VecDeque<String>>) -> String {
    lines
        .lock()
        .map(|l| l.iter().cloned().collect::<Vec<_>>().join(" / "))
        .unwrap_or_default()
}

/// Opens the stream, bootstraps the target and starts `dsh mcp` there;
/// `say` reports progress to the person (stderr). The error says what
/// failed and why, in words a model can act on.
pub fn open(
    target: &Target,
    build: &Build,
    preset: Option<&str>,
    control: Option<&std::path::Path>,
    say: &dyn Fn(&str),
) -> Result<Stream, BootstrapError> {
    let host = target.host();
    let mut command = target.command(control);
    // A group of its own: ending the stream ends all of it, and a Ctrl-C
    // meant for the bridge does not reach ssh.
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().map_err(|error| BootstrapError::Spawn {
        host: host.clone(),
        error,
    })?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(BootstrapError::NoPipes { host });
    };
    let tail = Arc::new(Mutex::new(VecDeque::new()));
    let (done, stderr_done) = mpsc::channel();
    {
        let tail = tail.clone();
        let host = host.clone();
        std::thread::spawn(move || {
            relay_stderr(stderr, &tail, &host);
            drop(done);
        });
    }
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || read_lines(stdout, &tx));
    let mut stream = Stream {
        child,
        stdin,
        lines,
        stderr: tail,
        stderr_done,
    };
    match handshake(&mut stream, &host, target, build, preset, say) {
        Ok(()) => Ok(stream),
        Err(e) => {
            stream.end();
            // The bootstrap script's words for a build the target cannot
            // run, wherever the message carries them.
            Err(
                if build.dynamic && e.to_string().contains("does not run on the target") {
                    BootstrapError::Dynamic {
                        error: Box::new(e),
                        path: build.path.clone(),
                        arch: build.arch,
                    }
                } else {
                    e
                },
            )
        }
    }
}

fn handshake(
    stream: &mut Stream,
    host: &str,
    target: &Target,
    build: &Build,
    preset: Option<&str>,
    say: &dyn Fn(&str),
) -> Result<(), BootstrapError> {
    write_to(
        stream,
        host,
        script(build, target.path(), preset).as_bytes(),
    )?;
    let hello = expect(stream, host)?;
    let fields: std::collections::HashMap<&str, &str> = hello
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .collect();
    let os = fields.get("os").copied().unwrap_or("?");
    let arch = normalised_arch(fields.get("arch").copied().unwrap_or("?"));
    if os != "Linux" {
        return Err(BootstrapError::NotLinux {
            host: host.to_owned(),
            os: os.to_owned(),
        });
    }
    if arch != build.arch {
        return Err(BootstrapError::WrongArch {
            host: host.to_owned(),
            arch: arch.to_owned(),
            path: build.path.clone(),
            build_arch: build.arch,
        });
    }
    if fields.get("have") == Some(&"yes") {
        write_to(stream, host, b"go\n")?;
    } else {
        say(&format!(
            "installing dsh on {host} ({:.1} MB, {}{})",
            build.size as f64 / 1e6,
            build.name,
            if build.dynamic {
                "; dynamically linked: it runs where the C library is as new as here"
            } else {
                ""
            }
        ));
        write_to(stream, host, b"send\n")?;
        let mut file = std::fs::File::open(&build.path).map_err(|error| BootstrapError::Read {
            path: build.path.clone(),
            error,
        })?;
        if let Err(error) = std::io::copy(&mut (&mut file).take(build.size), &mut stream.stdin) {
            // The script may have said why it stopped reading (a full disk).
            return Err(match expect(stream, host) {
                Err(why @ BootstrapError::CouldNotStart { .. }) => why,
                _ => {
                    let status = finish(&mut stream.child, &stream.stderr_done);
                    BootstrapError::ClosedWhileInstalling {
                        host: host.to_owned(),
                        error,
                        status,
                        said: said(&stream.stderr_tail()),
                    }
                }
            });
        }
        let _ = stream.stdin.flush();
    }
    let started = expect(stream, host)?;
    if started.trim() == "start" {
        Ok(())
    } else {
        Err(BootstrapError::CouldNotStart {
            host: host.to_owned(),
            why: started.trim_start_matches("error").trim().to_owned(),
        })
    }
}

/// The next `@dsh-remote` line's rest; other lines (a login script's
/// greeting) go to stderr.
fn expect(stream: &mut Stream, host: &str) -> Result<String, BootstrapError> {
    let deadline = Instant::now() + STEP_TIMEOUT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match stream.lines.recv_timeout(left) {
            Ok(Line::Text(line)) => {
                let line = String::from_utf8_lossy(&line);
                match line.strip_prefix("@dsh-remote ") {
                    Some(rest) if rest.starts_with("error") => {
                        return Err(BootstrapError::CouldNotStart {
                            host: host.to_owned(),
                            why: rest.trim_start_matches("error").trim().to_owned(),
                        });
                    }
                    Some(rest) => return Ok(rest.to_owned()),
                    None => eprintln!("dsh: {host} printed: {}", line.escape_debug()),
                }
            }
            Ok(Line::End(why)) => {
                let status = finish(&mut stream.child, &stream.stderr_done);
                return Err(BootstrapError::EndedBeforeStart {
                    host: host.to_owned(),
                    why,
                    status,
                    said: said(&stream.stderr_tail()),
                });
            }
            Err(_) => {
                return Err(BootstrapError::NoAnswer {
                    host: host.to_owned(),
                    secs: STEP_TIMEOUT.as_secs(),
                    said: said(&stream.stderr_tail()),
                });
            }
        }
    }
}

/// Writes `bytes` to the target; a stream that closed meanwhile is an
/// error with the transport's exit and its last words (all of them: its
/// stderr is read to its end first).
fn write_to(stream: &mut Stream, host: &str, bytes: &[u8]) -> Result<(), BootstrapError> {
    stream
        .stdin
        .write_all(bytes)
        .and_then(|()| stream.stdin.flush())
        .map_err(|error| {
            let status = finish(&mut stream.child, &stream.stderr_done);
            BootstrapError::ClosedDuringBootstrap {
                host: host.to_owned(),
                error,
                status,
                said: said(&stream.stderr_tail()),
            }
        })
}

fn said(tail: &str) -> String {
    if tail.is_empty() {
        String::new()
    } else {
        format!("; it said: {tail}")
    }
}

fn read_lines(stdout: std::process::ChildStdout, tx: &mpsc::Sender<Line>) {
    let mut reader = BufReader::with_capacity(64 * 1024, stdout);
    loop {
        let mut line = Vec::new();
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => {
                let _ = tx.send(Line::End("end of stream".into()));
                return;
            }
            Ok(_) if line.last() == Some(&b'\n') => {
                line.pop();
                if tx.send(Line::Text(line)).is_err() {
                    return;
                }
            }
            Ok(_) => {
                let _ = tx.send(Line::End(format!(
                    "a line longer than {} MiB, or cut off",
                    MAX_LINE / (1024 * 1024)
                )));
                return;
            }
            Err(e) => {
                let _ = tx.send(Line::End(format!("read failed: {e}")));
                return;
            }
        }
    }
}

fn relay_stderr(stderr: std::process::ChildStderr, tail: &Mutex<VecDeque<String>>, host: &str) {
    let reader = BufReader::new(stderr);
    for line in reader.split(b'\n') {
        let Ok(line) = line else { return };
        let line = String::from_utf8_lossy(&line).trim_end().to_owned();
        if line.is_empty() {
            continue;
        }
        eprintln!("dsh: [{host}] {}", line.escape_debug());
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn words_are_quoted_for_sh() {
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn this_test_binary_is_not_taken_for_a_static_build() {
        // Test binaries are linked dynamically against glibc.
        let exe = std::env::current_exe().unwrap();
        assert_eq!(static_arch(&exe).unwrap(), None);
        assert_eq!(static_arch(std::path::Path::new("/bin/sh")).unwrap(), None);
    }
}
