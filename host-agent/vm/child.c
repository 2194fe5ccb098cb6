/* Owned child processes, reaped through a pidfd (see child.h). */
#include "child.h"

#include <errno.h>
#include <glib-unix.h>
#include <poll.h>
#include <signal.h>
#include <sys/pidfd.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vm-error.h"

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

struct SbxChild {
    char *what;
    GPid pid;
    int pidfd;
    gboolean reaped;
    int status;
    guint watch;
    guint retry;
    SbxChildExitFunc func;
    gpointer func_data;
};

/* Runs in the child between fork and exec: only async-signal-safe calls. */
static void child_setup(gpointer data)
{
    pid_t parent = (pid_t)GPOINTER_TO_INT(data);

    setpgid(0, 0);
    /* If our parent died before prctl, the signal would never come: die now instead. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
        raise(SIGKILL);
}

SbxChild *sbx_child_spawn(const char *const *argv, const SbxChildFds *fds, const char *what,
                          GError **error)
{
    g_autoptr(GError) local = NULL;
    SbxChild *child;
    GPid pid = 0;
    int pidfd;

    if (!g_spawn_async_with_pipes_and_fds(
            NULL, argv, NULL,
            G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_SEARCH_PATH | G_SPAWN_STDOUT_TO_DEV_NULL |
                (fds->stderr_fd < 0 ? G_SPAWN_STDERR_TO_DEV_NULL : 0),
            child_setup, GINT_TO_POINTER(getpid()), -1, -1, fds->stderr_fd, fds->source_fds,
            fds->target_fds, fds->n_fds, &pid, NULL, NULL, NULL, &local)) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SPAWN, "cannot start %s (%s): %s", what,
                    argv[0], local->message);
        return NULL;
    }
    /* Nobody else reaps our children, so @pid is still ours even if it already exited. */
    pidfd = pidfd_open(pid, 0);
    if (pidfd < 0) {
        int e = errno;
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SPAWN,
                    "pidfd_open for %s: %s (Linux >= 5.4 is needed)", what, g_strerror(e));
        return NULL;
    }
    child = g_new0(SbxChild, 1);
    child->what = g_strdup(what);
    child->pid = pid;
    child->pidfd = pidfd;
    return child;
}

/* waitid()'s decomposed status as a waitpid() status (what WIFEXITED etc. expect). */
static int status_of(const siginfo_t *info)
{
    switch (info->si_code) {
    case CLD_EXITED:
        return (info->si_status & 0xff) << 8;
    case CLD_DUMPED:
        return (info->si_status & 0x7f) | 0x80;
    default:
        return info->si_status & 0x7f; /* CLD_KILLED */
    }
}

/* Reap the child if it can be reaped now. TRUE once it is (now or before). */
static gboolean try_reap(SbxChild *child)
{
    siginfo_t info = {0};

    if (child->reaped)
        return TRUE;
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
    child->status = status_of(&info);
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
    /* Not reaped, so the pid (and group id) cannot have been reused. The group: QEMU's
     * `exec:` migration runs a shell that must die with it. */
    kill(-child->pid, SIGKILL);
    pidfd_send_signal(child->pidfd, SIGKILL, NULL, 0);
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

void sbx_child_free(SbxChild *child)
{
    if (!child)
        return;
    sbx_child_kill(child, KILL_WAIT_MS);
    close(child->pidfd);
    g_free(child->what);
    g_free(child);
}
