//! A PID namespace per session, so that the kernel, not a helper that might
//! be killed with the host, ends every process of it when the host dies.
//!
//! **Why.** A session's leader dies with the host (its parent-death
//! signal), and so does whatever reads the terminal in the foreground (the
//! hang-up). A background process (`server &`, a daemonised build) has
//! neither: it outlives the host unless the guardian ends it, and a
//! `kill -9` of every dsh process at once, or an OOM kill of the host's
//! group, takes the guardian too. When the first process (the *init*) of a
//! PID namespace dies, the kernel kills every other process in it, and no
//! process can leave a PID namespace.
//!
//! **The shape.** Three processes where there was one, and no `exec`
//! but the program's:
//!
//! * the *leader* (the session leader the host holds, in the host's
//!   namespace): after the site's steps (and the sandbox's entry into its
//!   user namespace, which gives the right to make the others) it unshares
//!   a PID and a mount namespace, starts the two others, and stays on as
//!   the *waiter*: it waits for the program, leaves the program's wait
//!   status where the host reads it, and exits, so the host sees how the
//!   program ended, as it always did;
//! * the *init* (pid 1 inside, `dsh-init` in `ps -o comm`), started with
//!   `CLONE_PARENT` so that it is the host's child, not the leader's:
//!   armed to die with the host, it only reaps orphans;
//! * the *program* (pid 2 inside), in a process group of its own that it
//!   puts in the terminal's foreground, mounts the namespace's own `/proc`
//!   (so `ps`, `kill` and pid files inside agree), runs the program's
//!   steps (the sandbox's restrictions) and `exec`s it.
//!
//! The waiter and the init are not programs: they run a few lines of this
//! crate in the host's memory (`CLONE_VM`, as the leader has from the
//! start), each on a stack the host keeps until it has exited, making raw
//! system calls only (`crate::raw`: a C library call would write `errno`
//! into a host thread's storage). Their command line is therefore the
//! host's; their name (`comm`) says what they are.
//!
//! When the program exits, so does the waiter, and the host ends what the
//! program left as it always did — with its escalation, and counted
//! ("1 background process(es) still running at exit were ended") — but
//! now also what left the session inside the namespace (`setsid cmd &`),
//! and then kills the init ([`crate::Leader::end_session`]). The init
//! outlives the leader for that: were it the leader's child, its death
//! signal would end the namespace, unsignalled and uncounted, the moment
//! the program exits. When the host dies, its spawner thread's death
//! kills the leader and the init (parent-death signals), and the init's
//! death makes the kernel kill the rest.
//!
//! **Cost.** Two more `clone`s sharing the host's memory, the namespaces
//! and a `/proc` mount; `cargo xtask bench spawn` measures each stage.
//! (Until these helpers ran in place, the init and the waiter each
//! `exec`ed the whole host binary: two thirds of the namespace's price.)
//!
//! **Where it cannot be had.** Making a PID namespace needs
//! `CAP_SYS_ADMIN` in the caller's user namespace: root has it, and so has
//! a process inside the sandbox's user namespace. Elsewhere (no sandbox,
//! not root) `unshare` fails and the session runs as before, without one;
//! [`Spawned::program`](crate::Spawned::program) is then the leader. When
//! the namespace's `/proc` cannot be mounted (a container that masks parts
//! of the host's), the namespace is kept and `/proc` stays the host's.

use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Lets sessions that ask for a PID namespace have one from now on (the
/// kernel still decides at each spawn). A host calls it once it reaps
/// what it adopts ([`crate::become_subreaper`], [`crate::reap_adopted`]):
/// the inits are its children.
pub fn enable() {
    ENABLED.store(true, Ordering::Relaxed);
}

/// Whether sessions that ask for a namespace can get one here: enabled,
/// on an architecture whose helpers this crate can run (see `raw`).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed) && crate::raw::AVAILABLE
}
