/*
 * A VM source that claims a VM from a warm pool (source.h, docs/pool.md): restored ahead of the
 * request, its session handshaken (the execute goes out at once with the clock and fresh
 * entropy). The report says how long the claim took and what the pool did for the VM.
 */
#include "exec/source.h"

#include "pool-vm.h"

typedef struct {
    SbxExecSource base;
    SbxPool *pool;
    guint64 claim_id;
    gboolean claiming;
    SbxPoolVm *pv;
    guint idle_source; /* reports a cancelled claim */
    gint64 t_created;  /* monotonic us: the source was made, with the request */
    gint64 claim_us;   /* the request's arrival to the VM in hand (a wait for a slot included) */
    gint64 hello_age_us;
    SbxExecAcquiredFunc done;
    gpointer data;
    SbxExecVmExitFunc exit_func;
    gpointer exit_data;
} PoolSource;

static void on_claimed(gpointer vm, const GError *error, gpointer data)
{
    PoolSource *s = data;

    s->claiming = FALSE;
    s->claim_us = g_get_monotonic_time() - s->t_created;
    s->pv = vm;
    if (s->pv != NULL) {
        sbx_pool_vm_detach(s->pv);
        s->done(&s->base, NULL, s->data);
        return;
    }
    g_autoptr(GError) e =
        g_error_new(error->domain, error->code, "cannot start the VM: %s", error->message);
    s->done(&s->base, e, s->data);
}

static void pool_acquire(SbxExecSource *src, SbxExecAcquiredFunc done, gpointer data)
{
    PoolSource *s = (PoolSource *)src;

    s->done = done;
    s->data = data;
    s->claiming = TRUE;
    s->claim_id = sbx_pool_claim(s->pool, on_claimed, s);
}

static gboolean report_cancelled(gpointer data)
{
    PoolSource *s = data;
    g_autoptr(GError) e =
        g_error_new_literal(G_IO_ERROR, G_IO_ERROR_CANCELLED, "the claim was cancelled");

    s->idle_source = 0;
    s->done(&s->base, e, s->data);
    return G_SOURCE_REMOVE;
}

static void pool_cancel(SbxExecSource *src)
{
    PoolSource *s = (PoolSource *)src;

    if (!s->claiming) {
        return;
    }
    sbx_pool_cancel_claim(s->pool, s->claim_id); /* the pool never answers it now */
    s->claiming = FALSE;
    s->idle_source = g_idle_add(report_cancelled, s);
}

static SbxVm *pool_vm(SbxExecSource *src)
{
    PoolSource *s = (PoolSource *)src;

    return s->pv != NULL ? sbx_pool_vm_vm(s->pv) : NULL;
}

static void on_vm_exit(SbxVm *vm, const char *reason, gpointer data)
{
    PoolSource *s = data;
    (void)vm;

    s->exit_func(&s->base, reason, s->exit_data);
}

static void pool_watch(SbxExecSource *src, SbxExecVmExitFunc func, gpointer data)
{
    PoolSource *s = (PoolSource *)src;

    s->exit_func = func;
    s->exit_data = data;
    sbx_vm_set_exit_handler(sbx_pool_vm_vm(s->pv), on_vm_exit, s);
}

static void pool_begin(SbxExecSource *src)
{
    PoolSource *s = (PoolSource *)src;

    sbx_vm_execution_begin(sbx_pool_vm_vm(s->pv));
}

static SbxSession *pool_take_session(SbxExecSource *src, GError **error)
{
    PoolSource *s = (PoolSource *)src;
    SbxSession *session = sbx_pool_vm_take_session(s->pv);

    if (session == NULL) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_FAILED, "the pooled VM has no session");
        return NULL;
    }
    s->hello_age_us = g_get_monotonic_time() - sbx_session_hello_time(session);
    return session;
}

static gint64 pool_boot_us(SbxExecSource *src)
{
    PoolSource *s = (PoolSource *)src;

    return s->pv != NULL ? sbx_pool_vm_restore_us(s->pv) : 0;
}

/*
 * How long the claim took, the VM's hello (and warm-up) before it, how long it then waited
 * handshaken, whether its runners warmed up again, whether its QEMU was pre-started.
 */
static void pool_describe(SbxExecSource *src, GString *out)
{
    PoolSource *s = (PoolSource *)src;
    gint64 hello_us = s->pv != NULL ? sbx_pool_vm_hello_us(s->pv) : 0;
    gboolean warmed = s->pv != NULL && sbx_pool_vm_warmed(s->pv);
    gboolean prestarted = s->pv != NULL && sbx_pool_vm_prestarted(s->pv);

    g_string_append_printf(out,
                           ",\"claim_ms\":%" G_GINT64_FORMAT ",\"hello_ms\":%" G_GINT64_FORMAT
                           ",\"hello_age_ms\":%" G_GINT64_FORMAT ",\"warmed\":%s,\"prestarted\":%s",
                           s->claim_us / 1000, hello_us / 1000, s->hello_age_us / 1000,
                           warmed ? "true" : "false", prestarted ? "true" : "false");
}

static void pool_release(SbxExecSource *src)
{
    SbxVm *vm = pool_vm(src);

    if (vm != NULL) {
        sbx_vm_kill(vm); /* never back to the pool: one execution per VM */
    }
}

static void pool_free(SbxExecSource *src)
{
    PoolSource *s = (PoolSource *)src;

    if (s->claiming) {
        sbx_pool_cancel_claim(s->pool, s->claim_id);
    }
    g_clear_handle_id(&s->idle_source, g_source_remove);
    sbx_pool_vm_free(s->pv);
    g_free(s);
}

static const SbxExecSourceOps pool_ops = {
    .acquire = pool_acquire,
    .cancel = pool_cancel,
    .vm = pool_vm,
    .watch = pool_watch,
    .begin = pool_begin,
    .take_session = pool_take_session,
    .describe = pool_describe,
    .boot_us = pool_boot_us,
    .release = pool_release,
    .free = pool_free,
};

SbxExecSource *sbx_exec_source_new_pool(SbxPool *pool)
{
    PoolSource *s = g_new0(PoolSource, 1);

    s->base.ops = &pool_ops;
    s->base.start = "pool";
    s->pool = pool;
    s->t_created = g_get_monotonic_time();
    return &s->base;
}
