/*
 * The bridge's seccomp allow-list (libseccomp). See seccomp-filter.h; bridge/README.md,
 * "System calls", explains the list. A new system call in the bridge's code (or one that a new
 * libc makes for an old call) must be added here, or the bridge dies by SIGSYS on that path:
 * find it with --seccomp=log (the kernel logs it) or with strace -f.
 */
#include "seccomp-filter.h"

#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

/*
 * Sanitizer builds (meson -Db_sanitize=..., which defines BRIDGE_SANITIZED; or a compiler that
 * says so itself) get the extra calls their runtime makes: see sanitizer_rules below.
 */
#if defined(BRIDGE_SANITIZED) || defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define SANITIZED 1
#endif
#endif

/* One allow rule: a system call, and up to two conditions on its arguments (all must hold). */
struct rule {
    int nr;
    unsigned n_args;
    struct scmp_arg_cmp args[2];
};

/* Table entries (clang-format would spread each over four lines). */
// clang-format off
#define ANY(name) {.nr = SCMP_SYS(name)}
#define IF1(name, cond) {.nr = SCMP_SYS(name), .n_args = 1, .args = {cond}}
#define ARG_EQ(i, v) {.arg = (i), .op = SCMP_CMP_EQ, .datum_a = (v)}
/* Argument @i has none of @bits set. */
#define ARG_CLEAR(i, bits) {.arg = (i), .op = SCMP_CMP_MASKED_EQ, .datum_a = (bits), .datum_b = 0}
// clang-format on

static const struct rule rules[] = {
    /* loop.c: the event loop and its clock (the vDSO falls back to the system call when the
     * clock source has no vDSO support). A newer libc may call epoll_pwait for epoll_wait. */
    ANY(epoll_wait),
    ANY(epoll_pwait),
    ANY(epoll_ctl),
    ANY(clock_gettime),
    /* Descriptors we already hold: eventfds (kick, call), the signalfd, the vhost-user socket
     * (messages with SCM_RIGHTS), host clients (the CONNECT line, "OK", relayed bytes), stderr.
     * writev: libc's fatal-error messages. poll: vhost-user.c waits for a full socket. */
    ANY(read),
    ANY(readv),
    ANY(write),
    ANY(writev),
    ANY(recvmsg),
    ANY(recvfrom),
    ANY(sendmsg),
    ANY(sendto),
    ANY(poll),
    ANY(ppoll),
    ANY(shutdown),
    ANY(close),
    /* bridge.c, hybrid.c: QEMU and host clients connecting in. */
    ANY(accept4),
    /* hybrid.c connect_host(): the guest connecting out to <uds>_<port>, a unix socket;
     * never another address family. */
    IF1(socket, ARG_EQ(0, AF_UNIX)),
    ANY(connect),
    /* vhost-user.c: kick, call and error fds from QEMU made non-blocking; nothing else. */
    IF1(fcntl, ARG_EQ(1, F_GETFL)),
    IF1(fcntl, ARG_EQ(1, F_SETFL)),
    /* vhost-user.c map_region(): fstat of a memory region's fd (glibc 2.33+ makes it
     * newfstatat(fd, "", AT_EMPTY_PATH), older and newer ones fstat). */
    ANY(fstat),
    IF1(newfstatat, ARG_EQ(3, AT_EMPTY_PATH)),
    /* Guest RAM (SET_MEM_TABLE, MAP_SHARED on QEMU's fds) and malloc (brk, and mmap for the
     * connection buffers): never executable. No mprotect: nothing here changes protections. */
    IF1(mmap, ARG_CLEAR(2, PROT_EXEC)),
    ANY(munmap),
    ANY(brk),
    /* Exit: the listening sockets are unlinked (bridge_stop), then exit_group. restart_syscall:
     * the kernel resumes an interrupted poll with it after SIGSTOP/SIGCONT. */
    ANY(unlink),
    IF1(unlinkat, ARG_EQ(2, 0)),
    ANY(exit_group),
    ANY(restart_syscall),
    /* abort() (a failed stack-protector or heap check in libc) blocks signals and sends itself
     * SIGABRT (tgkill: added by add_rules, for this process only): it dies of SIGABRT with
     * its message, not of a misleading SIGSYS. */
    ANY(rt_sigprocmask),
    ANY(getpid),
    ANY(gettid),
};

#ifdef SANITIZED
/*
 * Only when built with ASan/UBSan (-Db_sanitize, never a production build): what their
 * runtime needs, measured with --seccomp=log on the bridge suites and on forced reports
 * (README.md, "System calls"). execve, other address families and executable memory stay
 * forbidden here too (test-seccomp checks it in both builds).
 */
static const struct rule sanitizer_rules[] = {
    /* The allocator (shadow memory, quarantine, guard pages) and its spin locks. */
    IF1(mprotect, ARG_CLEAR(2, PROT_EXEC)),
    ANY(madvise),
    ANY(sched_yield),
    ANY(futex),
    /* LeakSanitizer at exit stops the world: a tracer clone that installs its own signal
     * handlers, ptraces the process (made dumpable again for that) and is waited for. */
    ANY(clone),
    ANY(ptrace),
    ANY(wait4),
    ANY(getppid),
    ANY(exit),
    ANY(rt_sigaction),
    ANY(sigaltstack),
    IF1(prctl, ARG_EQ(0, PR_GET_DUMPABLE)),
    IF1(prctl, ARG_EQ(0, PR_SET_DUMPABLE)),
    IF1(prctl, ARG_EQ(0, PR_SET_PTRACER)),
    IF1(prctl, ARG_EQ(0, PR_SET_PDEATHSIG)),
    /* Threads and reports: /proc/self/{task,maps,exe} and debug info read (never written),
     * isatty(stderr) for colours, a pipe to test whether memory is readable. */
    IF1(open, ARG_CLEAR(1, O_ACCMODE | O_CREAT | O_TRUNC)),
    IF1(openat, ARG_CLEAR(2, O_ACCMODE | O_CREAT | O_TRUNC)),
    ANY(getdents),
    ANY(getdents64),
    ANY(lseek),
    ANY(readlink),
    ANY(newfstatat),
    IF1(fcntl, ARG_EQ(1, F_GETFD)),
    IF1(fcntl, ARG_EQ(1, F_SETFD)),
    IF1(ioctl, ARG_EQ(1, TCGETS)),
    ANY(pipe2),
};
#endif

static int add_all(scmp_filter_ctx ctx, const struct rule *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        /* A call this architecture does not have (open, poll, ... on arm64): SCMP_SYS gives
         * a negative pseudo number; nothing to allow then. */
        if (r[i].nr < 0)
            continue;
        int rc = seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, r[i].nr, r[i].n_args, r[i].args);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int add_rules(scmp_filter_ctx ctx)
{
    int r = add_all(ctx, rules, sizeof(rules) / sizeof(rules[0]));
#ifdef SANITIZED
    if (r == 0)
        r = add_all(ctx, sanitizer_rules, sizeof(sanitizer_rules) / sizeof(sanitizer_rules[0]));
#endif
    if (r < 0)
        return r;
    /* abort(): SIGABRT to this process only (its pid is known only now). */
    const struct rule tgkill = {.nr = SCMP_SYS(tgkill),
                                .n_args = 2,
                                .args = {ARG_EQ(0, (scmp_datum_t)getpid()), ARG_EQ(2, SIGABRT)}};
    return add_all(ctx, &tgkill, 1);
}

int bridge_seccomp_install(enum bridge_seccomp_mode mode)
{
    uint32_t action = mode == BRIDGE_SECCOMP_LOG ? SCMP_ACT_LOG : SCMP_ACT_KILL_PROCESS;
    /* Without CAP_SYS_ADMIN the kernel takes a filter only with no_new_privs. */
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        return -errno;
    /* No core dump of guest RAM, no ptrace by other processes of our user; log mode keeps
     * the process dumpable so that a developer can attach gdb or strace. */
    if (mode == BRIDGE_SECCOMP_KILL && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
        return -errno;
    scmp_filter_ctx ctx = seccomp_init(action);
    if (!ctx)
        return -EINVAL; /* the action is unknown to this kernel or libseccomp */
    /* System calls of another ABI (x32, i386 via int 0x80) are refused the same way. */
    int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, action);
    if (r == 0)
        r = add_rules(ctx);
    if (r == 0)
        r = seccomp_load(ctx);
    seccomp_release(ctx);
    return r;
}
