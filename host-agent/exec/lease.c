/*
 * A VM held across executions (lease.h), and the source each execution borrows it through.
 */
#include "exec/lease.h"

struct SbxExecLease {
    gint refs;
    SbxExecSource *src; /* the VM's own source: acquired once, released at close */
    SbxSession *session;
    const SbxExecLeaseCallbacks *cb;
    gpointer data;
    gboolean acquiring;
    gboolean acquired; /* the source has a VM: released at close */
    gboolean ready;
    gboolean lost;
    gboolean closed;
    gboolean doomed; /* the last reference went while acquiring: freed once the acquire returned */
    char *lost_reason;
    guint lost_source;      /* reports the loss from the loop */
    guint handshake_source; /* reports the hello's end from the loop */
    GError *handshake_error;
    SbxExecSource *borrower; /* the lent source, while an execution has the VM */
    GQueue waiting;          /* lent sources waiting for their turn (LentSource *) */
};

/* A source of sbx_exec_lease_lend(): one execution's borrowing of the VM. */
typedef struct {
    SbxExecSource base;
    SbxExecLease *lease; /* a reference */
    gboolean has_vm;     /* the acquire succeeded */
    gboolean has_session;
    gboolean acquiring; /* the core waits for its turn */
    gboolean cancelled;
    guint idle_source; /* reports the acquire */
    SbxExecAcquiredFunc done;
    gpointer done_data;
    SbxExecVmExitFunc exit_func;
    gpointer exit_data;
} LentSource;

static gboolean report_acquired(gpointer data);

/* ---- the lease's own channel --------------------------------------------------------------- */

static void lose(SbxExecLease *lease, const char *reason);

static void idle_done(SbxSession *s, const SbxRunResult *r, gpointer data)
{
    (void)s, (void)r, (void)data; /* no run without an execution's callbacks */
}

static void on_broken(SbxSession *s, const char *reason, gpointer data)
{
    (void)s;
    lose(data, reason);
}

static const SbxSessionCallbacks idle_callbacks = {.on_done = idle_done, .on_broken = on_broken};

static gboolean report_lost(gpointer data)
{
    SbxExecLease *lease = data;

    lease->lost_source = 0;
    if (!lease->closed && lease->cb->lost != NULL) {
        lease->cb->lost(lease, lease->lost_reason, lease->data);
    }
    return G_SOURCE_REMOVE;
}

/* The lease is of no more use; its owner hears of it from the loop (not from inside a callback
 * of the session or the VM, which it may free). */
static void lose(SbxExecLease *lease, const char *reason)
{
    if (lease->lost || lease->closed) {
        return;
    }
    lease->lost = TRUE;
    lease->lost_reason = g_strdup(reason);
    lease->lost_source = g_idle_add(report_lost, lease);
    for (GList *l = lease->waiting.head; l != NULL; l = l->next) {
        LentSource *w = l->data;
        if (w->acquiring && w->idle_source == 0) {
            w->idle_source = g_idle_add(report_acquired, w); /* fails: the VM is gone */
        }
    }
}

static void ready(SbxExecLease *lease, const GError *error)
{
    lease->ready = error == NULL;
    if (!lease->closed) {
        lease->cb->ready(lease, error, lease->data);
    }
}

static gboolean report_handshake(gpointer data)
{
    SbxExecLease *lease = data;
    g_autoptr(GError) e = g_steal_pointer(&lease->handshake_error);

    lease->handshake_source = 0;
    lease->lost = e != NULL;
    ready(lease, e);
    return G_SOURCE_REMOVE;
}

/* From the session's callback: its owner hears of it from the loop, where it may close the
 * lease (and so free the session) without pulling it from under its own callback. */
static void on_handshake(SbxSession *s, const GError *error, gpointer data)
{
    SbxExecLease *lease = data;
    (void)s;

    if (error != NULL) {
        lease->handshake_error = g_error_new(error->domain, error->code,
                                             "the guest agent did not answer: %s", error->message);
    }
    lease->handshake_source = g_idle_add(report_handshake, lease);
}

/* ---- the VM -------------------------------------------------------------------------------- */

static void free_lease(SbxExecLease *lease)
{
    g_clear_error(&lease->handshake_error);
    sbx_exec_source_free(lease->src); /* reaps the VM */
    g_free(lease->lost_reason);
    g_free(lease);
}

static void on_vm_exit(SbxExecSource *src, const char *reason, gpointer data);

static void on_acquired(SbxExecSource *src, const GError *error, gpointer data)
{
    SbxExecLease *lease = data;
    g_autoptr(GError) e = NULL;

    lease->acquiring = FALSE;
    lease->acquired = error == NULL;
    if (lease->closed) {
        if (lease->acquired) {
            src->ops->release(src);
        }
        if (lease->doomed) {
            free_lease(lease);
        }
        return;
    }
    if (error != NULL) {
        lease->lost = TRUE;
        ready(lease, error);
        return;
    }
    src->ops->watch(src, on_vm_exit, lease);
    lease->session = src->ops->take_session(src, &e);
    if (lease->session == NULL) {
        lease->lost = TRUE;
        ready(lease, e);
        return;
    }
    sbx_session_set_callbacks(lease->session, &idle_callbacks, lease);
    if (sbx_session_is_ready(lease->session)) {
        ready(lease, NULL); /* a pooled VM: handshaken ahead */
    } else if (!sbx_session_handshake_async(lease->session, FALSE, on_handshake, lease, &e)) {
        lease->lost = TRUE;
        ready(lease, e);
    }
}

/* ---- the lent source ----------------------------------------------------------------------- */

static void on_vm_exit(SbxExecSource *src, const char *reason, gpointer data)
{
    SbxExecLease *lease = data;
    LentSource *b = (LentSource *)lease->borrower;
    (void)src;

    if (b != NULL && b->exit_func != NULL) {
        b->exit_func(&b->base, reason, b->exit_data); /* the execution ends on it */
    }
    g_autofree char *why = g_strdup_printf("the VM exited: %s", reason);
    lose(lease, why);
}

static gboolean report_acquired(gpointer data)
{
    LentSource *b = data;
    SbxExecLease *lease = b->lease;
    g_autoptr(GError) e = NULL;

    b->idle_source = 0;
    b->acquiring = FALSE;
    if (b->cancelled) {
        e = g_error_new_literal(G_IO_ERROR, G_IO_ERROR_CANCELLED, "cancelled");
    } else if (lease->closed || lease->lost) {
        e = g_error_new(G_IO_ERROR, G_IO_ERROR_CLOSED, "the session's VM is gone%s%s",
                        lease->lost_reason != NULL ? ": " : "",
                        lease->lost_reason != NULL ? lease->lost_reason : "");
    }
    b->has_vm = e == NULL;
    b->done(&b->base, e, b->done_data);
    return G_SOURCE_REMOVE;
}

static void lent_acquire(SbxExecSource *src, SbxExecAcquiredFunc done, gpointer data)
{
    LentSource *b = (LentSource *)src;
    SbxExecLease *lease = b->lease;

    b->done = done;
    b->done_data = data;
    b->acquiring = TRUE;
    /* its turn now, or when the execution before it gave the VM back (lent_free) */
    if (lease->borrower == src || lease->closed || lease->lost) {
        b->idle_source = g_idle_add(report_acquired, b);
    }
}

static void lent_cancel(SbxExecSource *src)
{
    LentSource *b = (LentSource *)src;

    if (b->acquiring && b->idle_source == 0) {
        b->cancelled = TRUE;
        g_queue_remove(&b->lease->waiting, b);
        b->idle_source = g_idle_add(report_acquired, b);
    }
}

static SbxVm *lent_vm(SbxExecSource *src)
{
    LentSource *b = (LentSource *)src;

    return b->has_vm ? sbx_exec_lease_vm(b->lease) : NULL;
}

static void lent_watch(SbxExecSource *src, SbxExecVmExitFunc func, gpointer data)
{
    LentSource *b = (LentSource *)src;

    b->exit_func = func;
    b->exit_data = data;
}

static void lent_begin(SbxExecSource *src)
{
    LentSource *b = (LentSource *)src;

    b->lease->src->ops->begin(b->lease->src); /* the CPU policy counts each execution */
}

static SbxSession *lent_take_session(SbxExecSource *src, GError **error)
{
    LentSource *b = (LentSource *)src;
    SbxExecLease *lease = b->lease;

    if (lease->session == NULL || lease->lost || lease->closed) {
        g_set_error_literal(error, G_IO_ERROR, G_IO_ERROR_CLOSED, "the session's VM is gone");
        return NULL;
    }
    b->has_session = TRUE;
    return g_steal_pointer(&lease->session);
}

static void lent_give_back(SbxExecSource *src, SbxSession *session)
{
    LentSource *b = (LentSource *)src;
    SbxExecLease *lease = b->lease;

    b->has_session = FALSE;
    if (lease->closed) {
        sbx_session_free(session);
        return;
    }
    lease->session = session;
    sbx_session_set_callbacks(session, &idle_callbacks, lease);
    if (!sbx_session_is_ready(session)) {
        /* no proper done (a timeout, a cancel, a breach): the guest may still run the code */
        lose(lease, "the execution did not end in good order: the VM cannot be used again");
    }
}

static void lent_describe(SbxExecSource *src, GString *out)
{
    (void)src, (void)out; /* the session's VM started long before: nothing to add */
}

static gint64 lent_boot_us(SbxExecSource *src)
{
    (void)src;
    return 0;
}

static void lent_release(SbxExecSource *src)
{
    (void)src; /* the VM stays with the lease */
}

static gboolean report_returned(gpointer data)
{
    SbxExecLease *lease = data;

    if (!lease->closed && !lease->lost && lease->cb->returned != NULL) {
        lease->cb->returned(lease, lease->data);
    }
    sbx_exec_lease_unref(lease);
    return G_SOURCE_REMOVE;
}

static void lent_free(SbxExecSource *src)
{
    LentSource *b = (LentSource *)src;
    SbxExecLease *lease = b->lease;

    g_clear_handle_id(&b->idle_source, g_source_remove);
    g_assert(!b->has_session); /* the execution gave it back first */
    g_queue_remove(&lease->waiting, b);
    if (lease->borrower == src) {
        LentSource *next = g_queue_pop_head(&lease->waiting);

        lease->borrower = next != NULL ? &next->base : NULL;
        if (next != NULL && next->acquiring && next->idle_source == 0) {
            next->idle_source = g_idle_add(report_acquired, next); /* its turn */
        } else if (next == NULL) {
            /* from the loop: the owner may use the VM again, not from inside a free */
            g_idle_add(report_returned, sbx_exec_lease_ref(lease));
        }
    }
    sbx_exec_lease_unref(lease);
    g_free(b);
}

static const SbxExecSourceOps lent_ops = {
    .acquire = lent_acquire,
    .cancel = lent_cancel,
    .vm = lent_vm,
    .watch = lent_watch,
    .begin = lent_begin,
    .take_session = lent_take_session,
    .give_back = lent_give_back,
    .describe = lent_describe,
    .boot_us = lent_boot_us,
    .release = lent_release,
    .free = lent_free,
};

/* ---- the API ------------------------------------------------------------------------------- */

SbxExecLease *sbx_exec_lease_new(SbxExecSource *src)
{
    SbxExecLease *lease = g_new0(SbxExecLease, 1);

    lease->refs = 1;
    lease->src = src;
    return lease;
}

void sbx_exec_lease_start(SbxExecLease *lease, const SbxExecLeaseCallbacks *cb, gpointer data)
{
    g_assert(cb != NULL && cb->ready != NULL && lease->cb == NULL);
    lease->cb = cb;
    lease->data = data;
    lease->acquiring = TRUE;
    lease->src->ops->acquire(lease->src, on_acquired, lease);
}

gboolean sbx_exec_lease_usable(const SbxExecLease *lease)
{
    return lease->ready && !lease->lost && !lease->closed && lease->borrower == NULL &&
           lease->session != NULL;
}

gboolean sbx_exec_lease_lost(const SbxExecLease *lease)
{
    return lease->lost || lease->closed;
}

gboolean sbx_exec_lease_lent(const SbxExecLease *lease)
{
    return lease->borrower != NULL;
}

SbxExecSource *sbx_exec_lease_lend(SbxExecLease *lease)
{
    LentSource *b = g_new0(LentSource, 1);

    g_assert(lease->ready && !lease->closed);
    b->base.ops = &lent_ops;
    b->base.start = "session";
    b->lease = sbx_exec_lease_ref(lease);
    if (lease->borrower == NULL) {
        lease->borrower = &b->base;
    } else {
        g_queue_push_tail(&lease->waiting, b); /* its acquire waits for the VM's return */
    }
    return &b->base;
}

SbxSession *sbx_exec_lease_session(SbxExecLease *lease)
{
    return sbx_exec_lease_usable(lease) ? lease->session : NULL;
}

SbxVm *sbx_exec_lease_vm(SbxExecLease *lease)
{
    return lease->acquired && !lease->closed ? lease->src->ops->vm(lease->src) : NULL;
}

gint64 sbx_exec_lease_boot_us(SbxExecLease *lease)
{
    return lease->acquired ? lease->src->ops->boot_us(lease->src) : 0;
}

void sbx_exec_lease_close(SbxExecLease *lease)
{
    if (lease->closed) {
        return;
    }
    lease->closed = TRUE;
    g_clear_handle_id(&lease->lost_source, g_source_remove);
    g_clear_handle_id(&lease->handshake_source, g_source_remove);
    /* the waiting borrowers' acquires fail: the VM is gone */
    for (GList *l = lease->waiting.head; l != NULL; l = l->next) {
        LentSource *w = l->data;
        if (w->acquiring && w->idle_source == 0) {
            w->idle_source = g_idle_add(report_acquired, w);
        }
    }
    g_clear_pointer(&lease->session, sbx_session_free);
    if (lease->acquiring) {
        lease->src->ops->cancel(lease->src); /* its done releases what it got */
    } else if (lease->acquired) {
        lease->src->ops->release(lease->src); /* kills the VM: a borrower ends on its exit */
    }
}

SbxExecLease *sbx_exec_lease_ref(SbxExecLease *lease)
{
    g_atomic_int_inc(&lease->refs);
    return lease;
}

void sbx_exec_lease_unref(SbxExecLease *lease)
{
    if (lease == NULL || !g_atomic_int_dec_and_test(&lease->refs)) {
        return;
    }
    sbx_exec_lease_close(lease);
    if (lease->acquiring) {
        lease->doomed = TRUE; /* a source is freed only once its acquire returned */
        return;
    }
    free_lease(lease);
}
