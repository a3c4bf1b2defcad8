//! What the running kernel can enforce, and the switch that makes a test
//! believe it runs on an older one.
//!
//! [`TEST_PRETEND_VAR`] (`DSH_SANDBOX_TEST_PRETEND`) exists for tests only:
//! its value is a comma-separated list of `landlock-abi=N` (pretend the
//! kernel offers Landlock ABI `N`; `0` means no Landlock at all),
//! `no-seccomp`, `no-connect-guard` and `no-userns`. It can only take features away, never add
//! them, and every status built under it says that it was simulated.

use std::fmt;

/// The environment variable that simulates an older kernel in tests.
pub const TEST_PRETEND_VAR: &str = "DSH_SANDBOX_TEST_PRETEND";

/// The Landlock ABI the sandbox is written against: filesystem rights with
/// truncate (3), TCP bind/connect (4), scoped abstract sockets and signals
/// (6). Newer kernels are used at this level.
pub const TARGET_LANDLOCK_ABI: i32 = 6;

/// What the kernel offers the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Availability {
    /// The Landlock ABI version (0: no Landlock), capped at
    /// [`TARGET_LANDLOCK_ABI`].
    pub landlock_abi: i32,
    /// Whether seccomp filters can be installed.
    pub seccomp: bool,
    /// Whether `connect` can be guarded: seccomp user notification with a
    /// listener that reports when its processes are gone (Linux 5.8) and
    /// `pidfd_getfd` (5.6).
    pub connect_guard: bool,
    /// Whether user namespaces may be tried (the real test is made when
    /// one is first needed).
    pub user_namespaces: bool,
    /// The value of [`TEST_PRETEND_VAR`] when it changed anything.
    pub pretended: Option<String>,
}

/// A [`TEST_PRETEND_VAR`] value that cannot be understood.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{var}={value:?}: {message} (expected a list of landlock-abi=N, no-seccomp, no-connect-guard, no-userns)",
    var = TEST_PRETEND_VAR
)]
pub struct PretendError {
    /// The whole value.
    pub value: String,
    /// What is wrong with it.
    pub message: String,
}

impl Availability {
    /// The real kernel's features, then [`TEST_PRETEND_VAR`] if it is set.
    pub fn probe() -> Result<Self, PretendError> {
        Self::probe_with(std::env::var(TEST_PRETEND_VAR).ok().as_deref())
    }

    /// The real kernel's features, then `pretend` (the value of
    /// [`TEST_PRETEND_VAR`], if set).
    pub fn probe_with(pretend: Option<&str>) -> Result<Self, PretendError> {
        let kernel = Self::probe_kernel();
        match pretend {
            Some(value) if !value.trim().is_empty() => kernel.pretend(value),
            _ => Ok(kernel),
        }
    }

    /// The real kernel's features; no environment variable is read.
    pub fn probe_kernel() -> Self {
        // SAFETY: LANDLOCK_CREATE_RULESET_VERSION with a null attribute is
        // the documented version query; it touches no memory.
        let abi = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<libc::c_void>(),
                0usize,
                1u32, // LANDLOCK_CREATE_RULESET_VERSION
            )
        };
        let landlock_abi = i32::try_from(abi)
            .unwrap_or(0)
            .clamp(0, TARGET_LANDLOCK_ABI);
        // SAFETY: PR_GET_SECCOMP only reads this thread's mode.
        let seccomp = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) } >= 0;
        Self {
            landlock_abi,
            seccomp,
            connect_guard: seccomp && connect_guard_available(),
            user_namespaces: true,
            pretended: None,
        }
    }

    /// These features with some taken away, as `spec` (the
    /// [`TEST_PRETEND_VAR`] syntax) says.
    pub fn pretend(mut self, spec: &str) -> Result<Self, PretendError> {
        let fail = |message: String| PretendError {
            value: spec.to_owned(),
            message,
        };
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                Some(("landlock-abi", n)) => {
                    let n: i32 = n
                        .trim()
                        .parse()
                        .map_err(|_| fail(format!("{n:?} is not an ABI number")))?;
                    self.landlock_abi = self.landlock_abi.min(n.max(0));
                }
                None if item == "no-seccomp" => {
                    self.seccomp = false;
                    self.connect_guard = false;
                }
                None if item == "no-connect-guard" => self.connect_guard = false,
                None if item == "no-userns" => self.user_namespaces = false,
                _ => return Err(fail(format!("unknown item {item:?}"))),
            }
        }
        self.pretended = Some(spec.to_owned());
        Ok(self)
    }

    /// The reason suffix for a status built under [`TEST_PRETEND_VAR`].
    pub(crate) fn simulated_note(&self) -> &'static str {
        if self.pretended.is_some() {
            " (simulated by DSH_SANDBOX_TEST_PRETEND)"
        } else {
            ""
        }
    }
}

/// Whether the kernel is 5.8 or later (a user-notification listener
/// reports `POLLHUP` once its processes are gone) and has `pidfd_getfd`.
fn connect_guard_available() -> bool {
    // SAFETY: pidfd_getfd on an invalid pidfd only returns an error.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, -1, 0, 0u32) };
    let has_getfd = rc >= 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS);
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut numbers = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<u32>().ok());
    let version = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    has_getfd && version >= (5, 8)
}

impl fmt::Display for Availability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.landlock_abi == 0 {
            f.write_str("no Landlock")?;
        } else {
            write!(f, "Landlock ABI {}", self.landlock_abi)?;
        }
        write!(
            f,
            ", seccomp {}, user namespaces {}",
            if self.seccomp { "yes" } else { "no" },
            if self.user_namespaces { "maybe" } else { "no" }
        )?;
        if let Some(p) = &self.pretended {
            write!(f, " (simulated: {TEST_PRETEND_VAR}={p})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn full() -> Availability {
        Availability {
            landlock_abi: 6,
            seccomp: true,
            connect_guard: true,
            user_namespaces: true,
            pretended: None,
        }
    }

    #[test]
    fn pretend_only_takes_away() {
        let a = full().pretend("landlock-abi=3, no-seccomp").unwrap();
        assert_eq!(
            (a.landlock_abi, a.seccomp, a.user_namespaces),
            (3, false, true)
        );
        assert_eq!(full().pretend("landlock-abi=9").unwrap().landlock_abi, 6);
        assert_eq!(full().pretend("landlock-abi=0").unwrap().landlock_abi, 0);
        assert!(!full().pretend("no-userns").unwrap().user_namespaces);
    }

    #[test]
    fn pretend_rejects_what_it_does_not_know() {
        assert_eq!(
            full().pretend("landlock=1").unwrap_err().to_string(),
            "DSH_SANDBOX_TEST_PRETEND=\"landlock=1\": unknown item \"landlock=1\" (expected a list of landlock-abi=N, no-seccomp, no-connect-guard, no-userns)"
        );
    }

    #[test]
    fn probe_applies_the_switch_only_when_set() {
        let real = Availability::probe_kernel();
        assert_eq!(Availability::probe_with(None).unwrap(), real);
        assert_eq!(Availability::probe_with(Some(" ")).unwrap(), real);
        let old = Availability::probe_with(Some("landlock-abi=0")).unwrap();
        assert_eq!(old.landlock_abi, 0);
        assert_eq!(old.pretended.as_deref(), Some("landlock-abi=0"));
        assert!(Availability::probe_with(Some("bogus")).is_err());
    }

    #[test]
    fn this_kernel_is_probed() {
        // The probe must not fail; on the CI kernel Landlock is present.
        let a = Availability::probe_kernel();
        assert!(a.landlock_abi >= 0 && a.landlock_abi <= TARGET_LANDLOCK_ABI);
    }
}
