/* Owned child processes (see child.h). */
#include "child.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdio.h>

#include "vm-error.h"

/*
 * How long sbx_child_free() waits for a SIGKILLed child to be reaped. Tearing down a QEMU
 * with gigabytes of RAM takes the kernel a few hundred ms; 5 s is ample, and only a process
 * stuck in uninterruptible sleep (which nothing can kill) runs into it.
 */
#define KILL_WAIT_MS 5000

struct SbxChild {
    GSubprocess *proc;
    char *what;
    GPid pid;
    gboolean reaped;
    GCancellable *watch_cancel;
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

GSubprocessLauncher *sbx_child_launcher_new(void)
{
    GSubprocessLauncher *l = g_subprocess_launcher_new(G_SUBPROCESS_FLAGS_STDOUT_SILENCE);

    /*
     * PR_SET_PDEATHSIG fires when the *thread* that forked exits: spawn from the main thread
     * (the VM layer runs there), never from a worker thread that may come and go.
     */
    g_subprocess_launcher_set_child_setup(l, child_setup, GINT_TO_POINTER(getpid()), NULL);
    return l;
}

SbxChild *sbx_child_spawn(GSubprocessLauncher *launcher, const char *const *argv,
                          const char *what, GError **error)
{
    g_autoptr(GError) local = NULL;
    GSubprocess *proc = g_subprocess_launcher_spawnv(launcher, argv, &local);
    const char *id;
    SbxChild *child;

    if (!proc) {
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_SPAWN, "cannot start %s (%s): %s", what, argv[0],
                    local->message);
        return NULL;
    }
    child = g_new0(SbxChild, 1);
    child->proc = proc;
    child->what = g_strdup(what);
    /* NULL if it already exited and was reaped (a QEMU refusing its options is that fast). */
    id = g_subprocess_get_identifier(proc);
    child->pid = id ? (GPid)g_ascii_strtoll(id, NULL, 10) : 0;
    child->watch_cancel = g_cancellable_new();
    return child;
}

static void on_child_exited(GObject *source, GAsyncResult *res, gpointer data)
{
    g_autoptr(GError) error = NULL;
    SbxChild *child = data;

    /* Cancelled means sbx_child_kill() ran: @child may be freed already, do not touch it. */
    if (!g_subprocess_wait_finish(G_SUBPROCESS(source), res, &error))
        return;
    child->reaped = TRUE;
    if (child->func)
        child->func(child, g_subprocess_get_status(child->proc), child->func_data);
}

void sbx_child_watch(SbxChild *child, SbxChildExitFunc func, gpointer user_data)
{
    g_assert(!child->func);
    child->func = func;
    child->func_data = user_data;
    g_subprocess_wait_async(child->proc, child->watch_cancel, on_child_exited, child);
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

typedef struct {
    gboolean done;
    gboolean timed_out;
    GCancellable *cancel;
} KillWait;

static void kill_wait_done(GObject *source, GAsyncResult *res, gpointer data)
{
    KillWait *w = data;

    /* Exited or cancelled (timeout): either way this wait is over. */
    g_subprocess_wait_finish(G_SUBPROCESS(source), res, NULL);
    w->done = TRUE;
}

static gboolean kill_wait_timeout(gpointer data)
{
    KillWait *w = data;

    w->timed_out = TRUE;
    g_cancellable_cancel(w->cancel);
    return G_SOURCE_REMOVE;
}

/*
 * Wait for the reaping on a private main context (the default one may be inside a dispatch),
 * bounded by a timer. Iterates until the wait callback ran, so @w can live on the stack.
 */
static gboolean wait_bounded(GSubprocess *proc, guint timeout_ms)
{
    g_autoptr(GMainContext) ctx = g_main_context_new();
    g_autoptr(GCancellable) cancel = g_cancellable_new();
    KillWait w = {FALSE, FALSE, cancel};
    GSource *timer = g_timeout_source_new(timeout_ms);

    g_main_context_push_thread_default(ctx);
    g_subprocess_wait_async(proc, cancel, kill_wait_done, &w);
    g_source_set_callback(timer, kill_wait_timeout, &w, NULL);
    g_source_attach(timer, ctx);
    while (!w.done)
        g_main_context_iteration(ctx, TRUE);
    g_source_destroy(timer);
    g_source_unref(timer);
    g_main_context_pop_thread_default(ctx);
    return !w.timed_out || g_subprocess_get_identifier(proc) == NULL;
}

gboolean sbx_child_kill(SbxChild *child, guint timeout_ms)
{
    if (!child)
        return TRUE;
    g_cancellable_cancel(child->watch_cancel);
    if (child->reaped)
        return TRUE;
    /* The group: QEMU's `exec:` migration runs a shell that must die with it. */
    if (child->pid > 0 && g_subprocess_get_identifier(child->proc))
        kill(-child->pid, SIGKILL);
    g_subprocess_force_exit(child->proc);
    gint64 t0 = g_get_monotonic_time();
    gboolean ok = wait_bounded(child->proc, timeout_ms);
    fprintf(stderr, "DEBUG kill %s pid %d: ok %d after %lld us, id %s\n", child->what, child->pid, ok,
            (long long)(g_get_monotonic_time() - t0), g_subprocess_get_identifier(child->proc));
    if (!ok)
        return FALSE;
    child->reaped = TRUE;
    return TRUE;
}

void sbx_child_free(SbxChild *child)
{
    if (!child)
        return;
    sbx_child_kill(child, KILL_WAIT_MS);
    g_clear_object(&child->watch_cancel);
    g_clear_object(&child->proc);
    g_free(child->what);
    g_free(child);
}
