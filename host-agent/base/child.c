/* Owned child processes, reaped through a pidfd (see child.h). */
#include "base/child.h"

#include <errno.h>
#include <glib-unix.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/*
 * How long sbx_child_free() waits for a SIGKILLed child to be reaped. Tearing down a QEMU
 * with gigabytes of RAM takes the kernel a few hundred ms; 5 s is ample, and only a process
 * stuck in uninterruptible sleep (which nothing can kill) runs into it.
 */
#define KILL_WAIT_MS 5000

/*
 * The pidfd turns readable a moment before the child can be reaped; retry this often. The
 * window is microseconds, so one or two retries at most.
 */
#define REAP_RETRY_MS 1

/*
 * How long a launcher gets to reap its killed program and exit by itself: bubblewrap does at
 * once; a QEMU of gigabytes takes the kernel a few hundred ms to tear down before that.
 */
#define LAUNCHER_EXIT_MS 2000

/* What a launcher's report of its program's pid may take: a few hundred bytes of JSON. */
#define LAUNCHER_INFO_MAX 4096

struct SbxChild {
    char *what;
    GPid pid;
    int pidfd;
    int info_fd;   /* the launcher's report (-1: none, or read to the end) */
    GString *info; /* what it said so far */
    guint info_watch;
    gboolean launched; /* started through a launcher (launcher_info_fd) */
    GPid program_pid;  /* the launcher's program, once reported; 0 before */
    int program_pidfd; /* its pidfd (not our child: signalled and polled, never reaped) */
    gboolean reaped;
    int status;
    guint watch;
    guint retry;
    SbxChildExitFunc func;
    gpointer func_data;
};

GQuark sbx_child_error_quark(void)
{
    return g_quark_from_static_string("sbx-child-error-quark");
}

typedef struct {
    pid_t parent;
    void (*setup)(gpointer data);
    gpointer setup_data;
} Setup;

/* Runs in the child between fork and exec: only async-signal-safe calls. */
static void child_setup(gpointer data)
{
    const Setup *s = data; /* the parent's stack, copied by fork */

    setpgid(0, 0);
    /* If our parent died before prctl, the signal would never come: die now instead. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != s->parent)
        raise(SIGKILL);
    if (s->setup)
        s->setup(s->setup_data);
}

/* "child-pid": N in the launcher's report: its program's pid, watched through a pidfd. */
static void parse_info(SbxChild *child)
{
    const char *p = strstr(child->info->str, "\"child-pid\":");
    char *end;
    guint64 pid;

    if (!p)
        return;
    p += strlen("\"child-pid\":");
    while (*p == ' ')
        p++;
    pid = g_ascii_strtoull(p, &end, 10);
    if (end == p || !*end || pid == 0 || pid > G_MAXINT32)
        return; /* not all of it yet (or nonsense: the process is still killed as a group) */
    child->program_pid = (GPid)pid;
    child->program_pidfd = pidfd_open(child->program_pid, 0);
}

/*
 * Read what the launcher wrote (non-blocking), to its end: it writes more after the pid, and a
 * pipe closed early would kill it with SIGPIPE. FALSE once the pipe is at its end.
 */
static gboolean read_info(SbxChild *child)
{
    char buf[512];

    while (child->info_fd >= 0) {
        ssize_t n = read(child->info_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return TRUE;
        if (n <= 0)
            break;
        if (child->program_pid == 0 && child->info->len + (gsize)n <= LAUNCHER_INFO_MAX) {
            g_string_append_len(child->info, buf, n);
            parse_info(child);
        }
    }
    return FALSE;
}

static void stop_info(SbxChild *child)
{
    g_clear_handle_id(&child->info_watch, g_source_remove);
    if (child->info_fd >= 0)
        close(child->info_fd);
    child->info_fd = -1;
}

static gboolean on_info(int fd, GIOCondition cond, gpointer data)
{
    SbxChild *child = data;

    (void)fd;
    (void)cond;
    if (read_info(child))
        return G_SOURCE_CONTINUE;
    child->info_watch = 0;
    stop_info(child);
    return G_SOURCE_REMOVE;
}

/* Our ends of the pipes, after the child was started and killed at once. */
static void close_pipes(const SbxChildFds *fds)
{
    int *ends[] = {fds->stdin_pipe, fds->stdout_pipe, fds->stderr_pipe};

    for (gsize i = 0; i < G_N_ELEMENTS(ends); i++) {
        if (ends[i] && *ends[i] >= 0) {
            close(*ends[i]);
            *ends[i] = -1;
        }
    }
}

/* The spawn flags for @fds: what is piped, what goes to /dev/null, where the program is looked up.
 */
static GSpawnFlags spawn_flags(const SbxChildFds *fds)
{
    /* Our ends of pipes close-on-exec: no other child (a second tool process started before
     * this one's stdin is closed) may hold them open. */
    GSpawnFlags flags = G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_CLOEXEC_PIPES;

    flags |= fds->path_from_envp ? G_SPAWN_SEARCH_PATH_FROM_ENVP : G_SPAWN_SEARCH_PATH;
    if (!fds->stdout_pipe)
        flags |= G_SPAWN_STDOUT_TO_DEV_NULL;
    if (!fds->stderr_pipe && fds->stderr_fd < 0)
        flags |= G_SPAWN_STDERR_TO_DEV_NULL;
    return flags;
}

SbxChild *sbx_child_spawn(const char *const *argv, const SbxChildFds *fds, const char *what,
                          GError **error)
{
    g_autoptr(GError) local = NULL;
    Setup setup = {getpid(), fds->setup, fds->setup_data};
    SbxChild *child;
    GPid pid = 0;
    int pidfd;

    if (!g_spawn_async_with_pipes_and_fds(
            fds->cwd, argv, (const char *const *)fds->envp, spawn_flags(fds), child_setup, &setup,
            -1, -1, fds->stderr_pipe ? -1 : fds->stderr_fd, fds->source_fds, fds->target_fds,
            fds->n_fds, &pid, fds->stdin_pipe, fds->stdout_pipe, fds->stderr_pipe, &local)) {
        g_set_error(error, SBX_CHILD_ERROR, SBX_CHILD_ERROR_SPAWN, "cannot start %s (%s): %s", what,
                    argv[0], local->message);
        if (fds->launcher_info_fd >= 0)
            close(fds->launcher_info_fd);
        return NULL;
    }
    /* Nobody else reaps our children, so @pid is still ours even if it already exited. */
    pidfd = pidfd_open(pid, 0);
    if (pidfd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        close_pipes(fds);
        g_set_error(error, SBX_CHILD_ERROR, SBX_CHILD_ERROR_SPAWN,
                    "pidfd_open for %s: %s (Linux >= 5.4 is needed)", what, g_strerror(e));
        if (fds->launcher_info_fd >= 0)
            close(fds->launcher_info_fd);
        return NULL;
    }
    child = g_new0(SbxChild, 1);
    child->what = g_strdup(what);
    child->pid = pid;
    child->pidfd = pidfd;
    child->program_pidfd = -1;
    child->info_fd = fds->launcher_info_fd;
    if (child->info_fd >= 0) {
        child->launched = TRUE;
        child->info = g_string_new(NULL);
        g_unix_set_fd_nonblocking(child->info_fd, TRUE, NULL);
        child->info_watch = g_unix_fd_add(child->info_fd, G_IO_IN | G_IO_HUP, on_info, child);
    }
    return child;
}

/*
 * waitid()'s decomposed status as a waitpid() status (what WIFEXITED etc. expect). A launcher
 * exits with 128 + N when its program was killed by signal N (bubblewrap does).
 */
static int status_of(const SbxChild *child, const siginfo_t *info)
{
    switch (info->si_code) {
    case CLD_EXITED:
        if (child->launched && info->si_status > 128 && info->si_status < 128 + 65)
            return info->si_status - 128;
        return (info->si_status & 0xff) << 8;
    case CLD_DUMPED:
        return (info->si_status & 0x7f) | 0x80;
    default:
        return info->si_status & 0x7f; /* CLD_KILLED */
    }
}

/*
 * Reap the child if it can be reaped now. TRUE once it is (now or before). Its process group
 * is SIGKILLed first, while the unreaped child still holds the group's id (no reuse).
 */
static gboolean try_reap(SbxChild *child)
{
    siginfo_t info = {0};

    if (child->reaped)
        return TRUE;
    if (waitid(P_PIDFD, (id_t)child->pidfd, &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
        info.si_pid != 0)
        kill(-child->pid, SIGKILL);
    memset(&info, 0, sizeof info);
    while (waitid(P_PIDFD, (id_t)child->pidfd, &info, WEXITED | WNOHANG) < 0) {
        if (errno == EINTR)
            continue;
        /* ECHILD: reaped behind our back (SIGCHLD set to SIG_IGN?). It is gone either way. */
        child->reaped = TRUE;
        child->status = 0xff << 8;
        return TRUE;
    }
    if (info.si_pid == 0)
        return FALSE; /* exiting, not yet a zombie */
    child->reaped = TRUE;
    child->status = status_of(child, &info);
    return TRUE;
}

static void report_exit(SbxChild *child)
{
    g_clear_handle_id(&child->watch, g_source_remove);
    g_clear_handle_id(&child->retry, g_source_remove);
    /* Last: the callback may free @child. */
    if (child->func)
        child->func(child, child->status, child->func_data);
}

static gboolean on_retry(gpointer data)
{
    SbxChild *child = data;

    if (!try_reap(child))
        return G_SOURCE_CONTINUE;
    child->retry = 0;
    report_exit(child);
    return G_SOURCE_REMOVE;
}

static gboolean on_pidfd(int fd, GIOCondition cond, gpointer data)
{
    SbxChild *child = data;

    (void)fd;
    (void)cond;
    child->watch = 0;
    if (try_reap(child))
        report_exit(child);
    else
        child->retry = g_timeout_add(REAP_RETRY_MS, on_retry, child);
    return G_SOURCE_REMOVE;
}

void sbx_child_watch(SbxChild *child, SbxChildExitFunc func, gpointer user_data)
{
    g_assert(!child->func);
    child->func = func;
    child->func_data = user_data;
    if (!child->reaped)
        child->watch = g_unix_fd_add(child->pidfd, G_IO_IN, on_pidfd, child);
}

GPid sbx_child_pid(const SbxChild *child)
{
    return child->reaped ? 0 : child->pid;
}

GPid sbx_child_program_pid(SbxChild *child)
{
    if (child->reaped)
        return 0;
    read_info(child);
    return child->program_pid ? child->program_pid : child->pid;
}

/* SIGKILL the launcher's program and wait (bounded) until it is gone: it is not our child, so
 * its memory is released by then but its parent (the launcher) reaps it. */
static gboolean kill_program(SbxChild *child, gint64 deadline)
{
    read_info(child);
    if (child->program_pidfd < 0)
        return FALSE;
    pidfd_send_signal(child->program_pidfd, SIGKILL, NULL, 0);
    for (;;) {
        gint64 left_ms = (deadline - g_get_monotonic_time()) / 1000;
        struct pollfd p = {child->program_pidfd, POLLIN, 0};
        int r;
        if (left_ms <= 0)
            break;
        r = poll(&p, 1, (int)MIN(left_ms, 1000));
        if (r > 0 || (r < 0 && errno != EINTR))
            break;
    }
    return TRUE;
}

/* Reap the child if it exits before @deadline (monotonic us). TRUE if it was reaped. */
static gboolean wait_reaped(SbxChild *child, gint64 deadline)
{
    while (!try_reap(child)) {
        gint64 left_ms = (deadline - g_get_monotonic_time()) / 1000;
        struct pollfd p = {child->pidfd, POLLIN, 0};
        if (left_ms <= 0)
            return FALSE;
        /* Readable but not reapable yet: the short window described in child.h. */
        if (poll(&p, 1, (int)MIN(left_ms, 1000)) > 0)
            g_usleep(REAP_RETRY_MS * 1000 / 10);
    }
    return TRUE;
}

char *sbx_child_describe_status(int status)
{
    if (WIFEXITED(status))
        return g_strdup_printf("exited with status %d", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return g_strdup_printf("killed by signal %d (%s)", WTERMSIG(status),
                               g_strsignal(WTERMSIG(status)));
    return g_strdup_printf("ended with wait status 0x%x", status);
}

gboolean sbx_child_kill(SbxChild *child, guint timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

    if (!child)
        return TRUE;
    g_clear_handle_id(&child->watch, g_source_remove);
    g_clear_handle_id(&child->retry, g_source_remove);
    child->func = NULL;
    if (child->reaped)
        return TRUE;
    /* The program first; then its launcher reaps it and exits by itself (a zombie left to
     * the host's init could outlive us), else it is killed below. */
    if (kill_program(child, deadline))
        wait_reaped(child, MIN(deadline, g_get_monotonic_time() + LAUNCHER_EXIT_MS * 1000));
    /* Not reaped, so the pid (and group id) cannot have been reused. The group: whatever the
     * child started must die with it. */
    kill(-child->pid, SIGKILL);
    pidfd_send_signal(child->pidfd, SIGKILL, NULL, 0);
    return wait_reaped(child, deadline);
}

void sbx_child_kill_async(SbxChild *child)
{
    if (!child || child->reaped)
        return;
    read_info(child);
    if (child->program_pidfd >= 0)
        pidfd_send_signal(child->program_pidfd, SIGKILL, NULL, 0);
    kill(-child->pid, SIGKILL);
    pidfd_send_signal(child->pidfd, SIGKILL, NULL, 0);
}

void sbx_child_free(SbxChild *child)
{
    if (!child)
        return;
    sbx_child_kill(child, KILL_WAIT_MS);
    close(child->pidfd);
    stop_info(child);
    if (child->info)
        g_string_free(child->info, TRUE);
    if (child->program_pidfd >= 0)
        close(child->program_pidfd);
    g_free(child->what);
    g_free(child);
}
