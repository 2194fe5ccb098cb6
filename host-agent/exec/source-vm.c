/*
 * A VM source that starts its own VM (source.h): restored from a snapshot (`sandbox run`'s
 * default) or booted cold (`--cold`). The session is a new one on the VM's channel; its hello
 * goes out with the execute.
 */
#include "exec/source.h"

typedef struct VmSource VmSource;

/*
 * The start's callback data: the source, or NULL once the source was freed while the start ran
 * (sbx_vm_free() ends the start, and its callback may come later, from the loop).
 */
typedef struct {
    VmSource *s;
} Ticket;

struct VmSource {
    SbxExecSource base;
    SbxVm *vm;
    GCancellable *cancel; /* the start */
    Ticket *ticket;       /* while the start runs */
    gboolean started;
    SbxExecAcquiredFunc done;
    gpointer data;
    SbxExecVmExitFunc exit_func;
    gpointer exit_data;
};

static void on_started(GObject *obj, GAsyncResult *res, gpointer data)
{
    Ticket *ticket = data;
    VmSource *s = ticket->s;
    g_autoptr(GError) error = NULL;
    (void)obj;

    g_free(ticket);
    if (s == NULL) {
        return; /* freed meanwhile, and its VM with it */
    }
    s->ticket = NULL;
    s->started = sbx_vm_start_finish(s->vm, res, &error);
    if (!s->started) {
        g_prefix_error(&error, "cannot start the VM: ");
    }
    s->done(&s->base, error, s->data);
}

static void vm_acquire(SbxExecSource *src, SbxExecAcquiredFunc done, gpointer data)
{
    VmSource *s = (VmSource *)src;

    s->done = done;
    s->data = data;
    s->ticket = g_new0(Ticket, 1);
    s->ticket->s = s;
    sbx_vm_start_async(s->vm, s->cancel, on_started, s->ticket);
}

static void vm_cancel(SbxExecSource *src)
{
    VmSource *s = (VmSource *)src;

    g_cancellable_cancel(s->cancel); /* the start fails with it, and on_started runs */
}

static SbxVm *vm_vm(SbxExecSource *src)
{
    VmSource *s = (VmSource *)src;

    return s->started ? s->vm : NULL;
}

static SbxSession *vm_take_session(SbxExecSource *src, GError **error)
{
    static const SbxSessionCallbacks none = {0};
    VmSource *s = (VmSource *)src;

    return sbx_session_new(sbx_vm_take_channel(s->vm), &none, NULL, error);
}

static void on_vm_exit(SbxVm *vm, const char *reason, gpointer data)
{
    VmSource *s = data;
    (void)vm;

    s->exit_func(&s->base, reason, s->exit_data);
}

static void vm_watch(SbxExecSource *src, SbxExecVmExitFunc func, gpointer data)
{
    VmSource *s = (VmSource *)src;

    s->exit_func = func;
    s->exit_data = data;
    sbx_vm_set_exit_handler(s->vm, on_vm_exit, s);
}

static void vm_begin(SbxExecSource *src)
{
    VmSource *s = (VmSource *)src;

    sbx_vm_execution_begin(s->vm);
}

static gint64 vm_boot_us(SbxExecSource *src)
{
    VmSource *s = (VmSource *)src;
    SbxVmRestoreTimes t;

    if (!s->started) {
        return 0;
    }
    if (!sbx_vm_restored(s->vm)) {
        return sbx_vm_boot_us(s->vm);
    }
    sbx_vm_restore_times(s->vm, &t);
    return t.total;
}

static void vm_describe(SbxExecSource *src, GString *out)
{
    (void)src;
    (void)out; /* boot_ms (the core's) says it all */
}

static void vm_release(SbxExecSource *src)
{
    VmSource *s = (VmSource *)src;

    sbx_vm_kill(s->vm);
}

static void vm_free(SbxExecSource *src)
{
    VmSource *s = (VmSource *)src;

    if (s->ticket != NULL) {
        s->ticket->s = NULL;
    }
    sbx_vm_free(s->vm);
    g_clear_object(&s->cancel);
    g_free(s);
}

static const SbxExecSourceOps vm_ops = {
    .acquire = vm_acquire,
    .cancel = vm_cancel,
    .vm = vm_vm,
    .watch = vm_watch,
    .begin = vm_begin,
    .take_session = vm_take_session,
    .describe = vm_describe,
    .boot_us = vm_boot_us,
    .release = vm_release,
    .free = vm_free,
};

SbxExecSource *sbx_exec_source_new_vm(const SbxProfile *profile, const SbxImage *image,
                                      const SbxSnapshot *snapshot, const SbxVmOptions *opts)
{
    VmSource *s = g_new0(VmSource, 1);
    SbxVmOptions o = *opts;

    o.snapshot = snapshot;
    s->base.ops = &vm_ops;
    s->base.start = snapshot != NULL ? "restore" : "cold";
    s->vm = sbx_vm_new(profile, image, &o);
    s->cancel = g_cancellable_new();
    return &s->base;
}

void sbx_exec_source_free(SbxExecSource *src)
{
    if (src != NULL) {
        src->ops->free(src);
    }
}
