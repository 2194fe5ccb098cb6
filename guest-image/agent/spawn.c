/*
 * Starting a runner: `node runner.mjs` or `python3 runner.py` in its own process group, as the
 * unprivileged user when configured, with a minimal environment, cwd the workspace, stdin
 * /dev/null, stdout and stderr on pipes, fd 3 the runner channel, and the syscall filter of
 * seccomp.c.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "util.h"

/* The runner channel's fd number in the runner (docs/protocol.md, "Runner channel"). */
#define RUNNER_CHANNEL_FD 3

/* File descriptors the child moves out of the way before placing its 0..3 (see child()). */
#define CHILD_FD_BASE 10

/*
 * The runners' environment. MPLBACKEND and MPLCONFIGDIR: matplotlib (in the default image) draws
 * to files with Agg, and finds the font cache the image build made (guest-image/build-image,
 * configure_matplotlib) instead of scanning the fonts in every VM.
 */
static const char *const runner_env[] = {
    "PATH=/usr/local/bin:/usr/bin:/bin",
    "HOME=/tmp",
    "LANG=C.UTF-8",
    "PYTHONUNBUFFERED=1",
    "PYTHONDONTWRITEBYTECODE=1",
    "MPLBACKEND=Agg",
    "MPLCONFIGDIR=/var/cache/matplotlib",
    NULL,
};

/* QEMU's hypervisor signature (CPUID leaf 0x40000000) when it emulates the CPU (TCG). */
static bool cpu_emulated(void)
{
#if defined(__x86_64__) || defined(__i386__)
    unsigned int eax, ebx, ecx, edx;
    char sig[13] = "";

    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 31))) /* no hypervisor */
        return false;
    __cpuid(0x40000000, eax, ebx, ecx, edx);
    memcpy(sig, &ebx, 4);
    memcpy(sig + 4, &ecx, 4);
    memcpy(sig + 8, &edx, 4);
    return strcmp(sig, "TCGTCGTCGTCG") == 0;
#else
    return false;
#endif
}

/*
 * V8 flags for node (guest-image/runners/README.md, "V8 flags"):
 * - one CPU: --single-threaded. V8's helper threads (concurrent marking, background compiles)
 *   would only take turns with the code on the one vCPU, and a compile queued while the runner
 *   warmed up would finish during the execution.
 * - TCG: --no-sparkplug. Its baseline compiler turns functions that got warm into new machine
 *   code, which the emulator must translate before running it: in a pooled VM, the first
 *   execution paid for that (a pooled console.log(1): 26 -> 22 ms). TurboFan still optimizes
 *   hot code.
 */
static size_t node_flags(const char **flags)
{
    size_t n = 0;

    if (sysconf(_SC_NPROCESSORS_ONLN) == 1)
        flags[n++] = "--single-threaded";
    if (cpu_emulated())
        flags[n++] = "--no-sparkplug";
    return n;
}

SbxLanguage spawn_runner_language(SbxLanguage lang)
{
    return lang == SBX_LANG_TYPESCRIPT ? SBX_LANG_JAVASCRIPT : lang;
}

static const char *runtime_of(const AgentOptions *o, SbxLanguage lang)
{
    return spawn_runner_language(lang) == SBX_LANG_JAVASCRIPT ? o->node : o->python;
}

static const char *script_of(SbxLanguage lang)
{
    return spawn_runner_language(lang) == SBX_LANG_JAVASCRIPT ? "runner.mjs" : "runner.py";
}

static int script_path(const AgentOptions *o, SbxLanguage lang, char *buf, size_t size)
{
    int n = snprintf(buf, size, "%s/%s", o->runners_dir, script_of(lang));

    return (n < 0 || (size_t)n >= size) ? -ENAMETOOLONG : 0;
}

bool spawn_available(const AgentOptions *o, SbxLanguage lang)
{
    char script[PATH_MAX];

    return script_path(o, lang, script, sizeof(script)) == 0 && access(script, R_OK) == 0 &&
           access(runtime_of(o, lang), X_OK) == 0;
}

/* Report errno to the parent through the status pipe and die. */
static void __attribute__((noreturn)) child_fail(int status_fd)
{
    int err = errno;

    if (write(status_fd, &err, sizeof(err)) < 0)
        _exit(126);
    _exit(127);
}

/* Put @fds (stdin, stdout, stderr, channel) at 0..3; every other fd is closed on exec. */
static int child_fds(int fds[4])
{
    /* Move them above 0..3 first: one of them may already sit where another must go. */
    for (int i = 0; i < 4; i++)
        if ((fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, CHILD_FD_BASE)) < 0)
            return -1;
    for (int i = 0; i < 4; i++)
        if (dup2(fds[i], i) < 0)
            return -1;
    /* Belt and braces: our fds are all O_CLOEXEC, and this catches any that is not. */
    close_range(4, ~0U, CLOSE_RANGE_CLOEXEC);
    return 0;
}

static int child_identity(long uid)
{
    if (uid < 0)
        return 0;
    if (setgroups(0, NULL) < 0 || setgid((gid_t)uid) < 0 || setuid((uid_t)uid) < 0)
        return -1;
    return 0;
}

/* `runtime [flags] script`: at most RUNNER_ARGV_MAX entries with the NULL. */
#define RUNNER_ARGV_MAX 5

static void runner_argv(const AgentOptions *o, SbxLanguage lang, const char *script,
                        const char *argv[RUNNER_ARGV_MAX])
{
    size_t n = 0;

    argv[n++] = runtime_of(o, lang);
    if (spawn_runner_language(lang) == SBX_LANG_JAVASCRIPT)
        n += node_flags(argv + n);
    argv[n++] = script;
    argv[n] = NULL;
}

static void __attribute__((noreturn))
child(const AgentOptions *o, const char *const *argv, int fds[4], int status_fd, pid_t parent)
{
    setpgid(0, 0);
    pid1_signals_reset();
    if (child_fds(fds) < 0 || child_identity(o->run_as) < 0)
        child_fail(status_fd);
    /* The workspace (files.c creates it at start); /tmp if it is not there. */
    if (chdir(o->workspace) < 0 && chdir("/tmp") < 0 && chdir("/") < 0)
        child_fail(status_fd);
    /* Once it is its user, before exec: guest code never runs without the filter (seccomp.c). */
    if (seccomp_runner_install() < 0)
        child_fail(status_fd);
    /* Die with the agent (after setuid, which clears this); matters when it is not PID 1. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    execve(argv[0], (char *const *)argv, (char *const *)runner_env);
    child_fail(status_fd);
}

/* Wait for the child's exec: the status pipe closes on success or carries its errno. */
static int wait_exec(pid_t pid, int status_fd)
{
    int err = 0;
    ssize_t n;

    do
        n = read(status_fd, &err, sizeof(err));
    while (n < 0 && errno == EINTR);
    if (n == 0)
        return 0;
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return n == sizeof(err) && err > 0 ? -err : -EIO;
}

static void close_all(int *fds, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fds[i] = safe_close(fds[i]);
}

int spawn_runner(const AgentOptions *o, SbxLanguage lang, pid_t *ret_pid, int *ret_chan,
                 int ret_pipes[SBX_STREAM__COUNT])
{
    /* sv: channel (ours, theirs); out, err: pipes (read, write); st: exec status. */
    int fd[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    int *sv = fd, *out = fd + 2, *err = fd + 4, *st = fd + 6;
    char script[PATH_MAX];
    const char *argv[RUNNER_ARGV_MAX];
    pid_t pid, parent = getpid();
    int r = script_path(o, lang, script, sizeof(script));

    if (r < 0)
        return r;
    runner_argv(o, lang, script, argv);
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0 || pipe2(out, O_CLOEXEC) < 0 ||
        pipe2(err, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0 || (pid = fork()) < 0) {
        r = -errno;
        close_all(fd, 8);
        return r;
    }
    if (pid == 0) {
        int child_fd[4] = {open("/dev/null", O_RDONLY | O_CLOEXEC), out[1], err[1], sv[1]};

        child(o, argv, child_fd, st[1], parent);
    }
    setpgid(pid, pid); /* also in the parent: no window where the group does not exist yet */
    sv[1] = safe_close(sv[1]);
    out[1] = safe_close(out[1]);
    err[1] = safe_close(err[1]);
    st[1] = safe_close(st[1]);
    r = wait_exec(pid, st[0]);
    st[0] = safe_close(st[0]);
    if (r == 0 && ((r = fd_set_nonblock(sv[0])) < 0 || (r = fd_set_nonblock(out[0])) < 0 ||
                   (r = fd_set_nonblock(err[0])) < 0)) {
        kill(-pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    if (r < 0) {
        close_all(fd, 8);
        return r;
    }
    *ret_pid = pid;
    *ret_chan = sv[0];
    ret_pipes[SBX_STREAM_STDOUT] = out[0];
    ret_pipes[SBX_STREAM_STDERR] = err[0];
    return 0;
}

static bool kept(pid_t pid, const pid_t *keep, size_t nkeep)
{
    for (size_t i = 0; i < nkeep; i++)
        if (keep[i] == pid)
            return true;
    return false;
}

/*
 * Without a user of its own, code that left the group (setsid) is found as an orphan: we are
 * init or a subreaper (main.c), so orphans become our children. Our other children are the
 * pre-started runners (@keep), so every other child is the execution's. A list longer than
 * the buffer is cut: what is left is killed by the next sweep.
 */
static void kill_children(const pid_t *keep, size_t nkeep)
{
    char path[64], buf[4096];
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/self/task/%d/children", (int)getpid());
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (char *p = buf, *end;; p = end) {
        long pid = strtol(p, &end, 10);

        if (end == p)
            break;
        if (pid > 1 && !kept((pid_t)pid, keep, nkeep))
            kill((pid_t)pid, SIGKILL);
    }
}

/*
 * Rounds of the sweep below: each kills every process found, so only children forked during
 * a round survive it; a fork bomb loses its parents in the first rounds. 64 is far more than
 * a process tree ever needs and bounds the helper's time.
 */
#define SWEEP_ROUNDS_MAX 64

/* True if /proc/@pid is a zombie (dead already: killing it again would count forever). */
static bool zombie(const char *pid)
{
    char path[64], buf[256], *paren;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%s/stat", pid);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return true; /* gone */
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return true;
    buf[n] = '\0';
    paren = strrchr(buf, ')'); /* the name may contain anything, even ") Z" */
    return !paren || paren[1] != ' ' || paren[2] == 'Z' || paren[2] == 'X';
}

/* One round as the user: SIGKILL every process we may signal but ourselves and @keep. */
static int sweep_round(const pid_t *keep, size_t nkeep)
{
    DIR *d = opendir("/proc");
    struct dirent *de;
    int killed = 0;

    if (!d)
        return 0;
    while ((de = readdir(d))) {
        char *end;
        long pid = strtol(de->d_name, &end, 10);

        if (*end || pid <= 1 || pid == getpid() || kept((pid_t)pid, keep, nkeep) ||
            zombie(de->d_name))
            continue;
        /* Processes of other users refuse (EPERM): only the user's own die. */
        if (kill((pid_t)pid, SIGKILL) == 0)
            killed++;
    }
    closedir(d);
    return killed;
}

void spawn_kill_all(const AgentOptions *o, pid_t pgid, const pid_t *keep, size_t nkeep)
{
    pid_t pid;

    kill(-pgid, SIGKILL);
    if (o->run_as < 0) {
        kill_children(keep, nkeep);
        return;
    }
    /* A process can leave the group (setsid) but not the user: a helper running as that user
     * kills every process it may signal, which is every process of the user but itself.
     * Without runners to spare, kill(-1) does it in one call. */
    pid = fork();
    if (pid == 0) {
        if (setgid((gid_t)o->run_as) < 0 || setuid((uid_t)o->run_as) < 0)
            _exit(1);
        if (nkeep == 0) {
            kill(-1, SIGKILL);
            _exit(0);
        }
        for (int i = 0; i < SWEEP_ROUNDS_MAX && sweep_round(keep, nkeep) > 0; i++)
            ;
        _exit(0);
    }
    while (pid > 0 && waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
}
