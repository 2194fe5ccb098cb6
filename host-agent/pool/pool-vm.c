/*
 * Real VMs for the warm pool (pool-vm.h): restore, hello (+ warm-up), keep alive with pings.
 *
 * Lifetime: an async operation (the start, an idle report) holds the handle; a handle
 * destroyed while one runs is marked and freed when that operation's callback comes back.
 * The session's own callbacks (hello, ping, broken) never outlive it: it is freed with the VM.
 */
#include "pool-vm.h"
#include "prestart.h"

struct SbxPoolVmFactory {
    const SbxProfile *profile;
    const SbxImage *image;
    const SbxSnapshot *snapshot;
    SbxPool *pool;
    gboolean warm_up;
    SbxPrestartSet *prestart; /* pre-started QEMUs the restores take, or NULL */
    guint handshaking;        /* VMs whose hello is under way */
};

struct SbxPoolVm {
    SbxPoolVmFactory *f;
    SbxVm *vm;
    GCancellable *cancel;
    SbxSession *session;   /* handshaken with the agent; NULL before, and once taken */
    gint64 hello_start_us; /* monotonic: the start's end, hello sent */
    gint64 hello_us;       /* hello sent to hello_ok (with the warm-up) */
    gboolean lost;         /* broken or not answering: reported, no more pings */
    gboolean claimed;      /* sbx_pool_vm_detach(): the pool no longer hears of it */
    gboolean warmed;       /* the hello asked for the runners' warm-up */
    gboolean prestarted;   /* restored in a pre-started QEMU */
    gboolean handshaking;  /* counted in f->handshaking */
    guint ops_in_flight;   /* start callbacks and idle reports still to come */
    gboolean destroyed;
};

SbxPoolVmFactory *sbx_pool_vm_factory_new(const SbxProfile *profile, const SbxImage *image,
                                          const SbxSnapshot *snapshot)
{
    SbxPoolVmFactory *f = g_new0(SbxPoolVmFactory, 1);

    f->profile = profile;
    f->image = image;
    f->snapshot = snapshot;
    f->warm_up = TRUE;
    return f;
}

void sbx_pool_vm_factory_set_warm_up(SbxPoolVmFactory *f, gboolean warm_up)
{
    f->warm_up = warm_up;
}

void sbx_pool_vm_factory_free(SbxPoolVmFactory *f)
{
    if (f != NULL) {
        sbx_prestart_set_free(f->prestart);
    }
    g_free(f);
}

void sbx_pool_vm_factory_set_prestart(SbxPoolVmFactory *f, guint n)
{
    g_clear_pointer(&f->prestart, sbx_prestart_set_free);
    if (n > 0) {
        f->prestart = sbx_prestart_set_new(f->profile, f->image, f->snapshot, n);
    }
}

GArray *sbx_pool_vm_factory_prestart_pids(SbxPoolVmFactory *f)
{
    return sbx_prestart_set_pids(f->prestart);
}

void sbx_pool_vm_factory_set_pool(SbxPoolVmFactory *f, SbxPool *pool)
{
    f->pool = pool;
}

/* Free once destroyed and no callback is still to come. */
static void maybe_release(SbxPoolVm *pv)
{
    if (pv->destroyed && pv->ops_in_flight == 0) {
        g_clear_object(&pv->cancel);
        g_free(pv);
    }
}

void sbx_pool_vm_free(SbxPoolVm *pv)
{
    if (pv == NULL || pv->destroyed) {
        return;
    }
    pv->destroyed = TRUE;
    if (pv->handshaking) {
        pv->handshaking = FALSE;
        pv->f->handshaking--;
    }
    g_cancellable_cancel(pv->cancel);
    g_clear_pointer(&pv->session, sbx_session_free);
    /*
     * sbx_vm_free() may run the start's callback at once (a restore into a pre-started QEMU
     * has no cancellable of ours): that callback must not release @pv under our feet.
     */
    pv->ops_in_flight++;
    g_clear_pointer(&pv->vm, sbx_vm_free);
    pv->ops_in_flight--;
    maybe_release(pv);
}

void sbx_pool_vm_detach(SbxPoolVm *pv)
{
    pv->claimed = TRUE;
    if (pv->session != NULL) {
        sbx_session_ping_cancel(pv->session);
        sbx_session_set_callbacks(pv->session, &(SbxSessionCallbacks){0}, NULL);
    }
}

static gboolean report_lost(gpointer data)
{
    SbxPoolVm *pv = data;

    pv->ops_in_flight--;
    if (pv->destroyed) {
        maybe_release(pv);
    } else if (!pv->claimed) { /* the claimer learns it from its own handlers */
        sbx_pool_lost(pv->f->pool, pv);
    }
    return G_SOURCE_REMOVE;
}

/* Tell the pool (once) from an idle callback, not from inside the VM's or session's callback. */
static void lose(SbxPoolVm *pv)
{
    if (pv->lost) {
        return;
    }
    pv->lost = TRUE;
    pv->ops_in_flight++;
    g_idle_add(report_lost, pv);
}

/* QEMU exited while pooled. */
static void on_vm_exit(SbxVm *vm, const char *reason, gpointer data)
{
    (void)vm;
    (void)reason;
    lose(data);
}

/* The guest broke the channel while pooled (EOF, a protocol violation). */
static void on_session_broken(SbxSession *s, const char *reason, gpointer data)
{
    (void)s;
    (void)reason;
    lose(data);
}

static const SbxSessionCallbacks pooled_callbacks = {.on_broken = on_session_broken};

typedef struct {
    SbxPoolVm *pv;
    GError *error;
} FailedStart;

static gboolean report_failed(gpointer data)
{
    FailedStart *fs = data;
    SbxPoolVm *pv = fs->pv;

    pv->ops_in_flight--;
    if (pv->destroyed) {
        maybe_release(pv);
    } else if (!pv->claimed) {
        sbx_pool_started(pv->f->pool, pv, fs->error); /* the pool destroys it */
    }
    g_error_free(fs->error);
    g_free(fs);
    return G_SOURCE_REMOVE;
}

static void fail_start(SbxPoolVm *pv, GError *error)
{
    /* Reported from an idle callback: the pool frees the VM, not inside its own callback. */
    FailedStart *fs = g_new0(FailedStart, 1);

    fs->pv = pv;
    fs->error = error;
    pv->ops_in_flight++;
    g_idle_add(report_failed, fs);
}

/* hello_ok (after the runners' warm-up): the VM is ready to be claimed. */
static void on_handshake(SbxSession *s, const GError *error, gpointer data)
{
    SbxPoolVm *pv = data;
    (void)s;

    pv->hello_us = g_get_monotonic_time() - pv->hello_start_us;
    pv->handshaking = FALSE;
    pv->f->handshaking--;
    if (error != NULL) {
        fail_start(pv, g_error_copy(error));
        return;
    }
    sbx_pool_started(pv->f->pool, pv, NULL);
}

/*
 * The VM is restored and the agent accepted: the hello now, not at the claim (docs/pool.md).
 * The warm-up pays off only for a VM that waits for its claim: a claim waiting now, that no
 * VM already saying hello will serve, takes this VM as soon as it is ready, and the warm-up
 * (~0.5 s of guest CPU) would cost it more than the execution gains.
 */
static void start_handshake(SbxPoolVm *pv)
{
    GError *error = NULL;
    SbxPoolStats st;

    sbx_pool_stats(pv->f->pool, &st);
    pv->warmed = pv->f->warm_up && st.waiting <= pv->f->handshaking;
    pv->hello_start_us = g_get_monotonic_time();
    pv->handshaking = TRUE;
    pv->f->handshaking++;
    pv->session = sbx_session_new(sbx_vm_take_channel(pv->vm), &pooled_callbacks, pv, &error);
    if (pv->session == NULL ||
        !sbx_session_handshake_async(pv->session, pv->warmed, on_handshake, pv, &error)) {
        fail_start(pv, error);
    }
}

static void on_started(GObject *src, GAsyncResult *res, gpointer data)
{
    SbxPoolVm *pv = data;
    GError *error = NULL;
    (void)src;

    pv->ops_in_flight--;
    if (pv->destroyed) {
        maybe_release(pv); /* the VM is gone: do not finish its start */
        return;
    }
    if (!sbx_vm_start_finish(pv->vm, res, &error)) {
        fail_start(pv, error);
        return;
    }
    sbx_vm_set_exit_handler(pv->vm, on_vm_exit, pv);
    start_handshake(pv);
}

static gpointer pv_start(SbxPool *pool, gpointer data)
{
    SbxPoolVmFactory *f = data;
    SbxPoolVm *pv = g_new0(SbxPoolVm, 1);
    SbxVmOptions opts = {.snapshot = f->snapshot};
    (void)pool;

    pv->f = f;
    pv->cancel = g_cancellable_new();
    pv->ops_in_flight++;
    /* A pre-started QEMU if there is one: the restore goes on from its state load. */
    pv->vm = sbx_prestart_set_take(f->prestart, on_started, pv);
    if (pv->vm != NULL) {
        pv->prestarted = TRUE;
        sbx_vm_prestart_resume(pv->vm);
        return pv;
    }
    pv->vm = sbx_vm_new(f->profile, f->image, &opts);
    sbx_vm_start_async(pv->vm, pv->cancel, on_started, pv);
    return pv;
}

static gboolean pv_usable(gpointer vm, gpointer data)
{
    SbxPoolVm *pv = vm;
    (void)data;

    return !pv->lost && pv->session != NULL && sbx_session_is_ready(pv->session);
}

static void on_pong(SbxSession *s, const GError *error, gpointer data)
{
    (void)s;
    if (error != NULL) {
        lose(data); /* no pong in time, or the channel broke: the agent stopped answering */
    }
}

/*
 * Health check: QEMU must run and the agent answer a ping (within SBX_SESSION_PING_TIMEOUT_MS;
 * a ping still outstanding from the last check is left to its timeout). After hello the agent
 * keeps an idle connection open as long as we like: the pings are the only traffic.
 */
static gboolean pv_check(gpointer vm, gpointer data)
{
    SbxPoolVm *pv = vm;
    (void)data;

    if (sbx_vm_qemu_pid(pv->vm) == 0) {
        return FALSE;
    }
    if (!pv->lost && pv->session != NULL) {
        sbx_session_ping_async(pv->session, on_pong, pv);
    }
    return TRUE;
}

static GPid pv_pid(gpointer vm, gpointer data)
{
    (void)data;
    return sbx_vm_qemu_pid(((SbxPoolVm *)vm)->vm);
}

static void pv_destroy(gpointer vm, gpointer data)
{
    (void)data;
    sbx_pool_vm_free(vm);
}

const SbxPoolVmOps sbx_pool_vm_ops = {
    .start = pv_start,
    .usable = pv_usable,
    .check = pv_check,
    .pid = pv_pid,
    .destroy = pv_destroy,
};

SbxVm *sbx_pool_vm_vm(SbxPoolVm *pv)
{
    return pv->vm;
}

SbxSession *sbx_pool_vm_take_session(SbxPoolVm *pv)
{
    SbxSession *s = g_steal_pointer(&pv->session);

    if (s != NULL) {
        sbx_session_ping_cancel(s); /* a pong still due is accepted, nobody waits for it */
        sbx_session_set_callbacks(s, &(SbxSessionCallbacks){0}, NULL);
    }
    return s;
}

gint64 sbx_pool_vm_hello_us(SbxPoolVm *pv)
{
    return pv->hello_us;
}

gboolean sbx_pool_vm_warmed(SbxPoolVm *pv)
{
    return pv->warmed;
}

gboolean sbx_pool_vm_prestarted(SbxPoolVm *pv)
{
    return pv->prestarted;
}

gint64 sbx_pool_vm_restore_us(SbxPoolVm *pv)
{
    SbxVmRestoreTimes t;

    sbx_vm_restore_times(pv->vm, &t);
    return t.total;
}
