/*
 * Real VMs for the warm pool (pool-vm.h): restore, keep a fresh channel, check health.
 *
 * Lifetime: an async operation (the start, a reconnect) holds the handle; a handle destroyed
 * while one runs is marked and freed when that operation's callback comes back cancelled.
 */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "pool-vm.h"
#include "protocol/limits.h"

/*
 * Between closing an old channel and connecting the next: the agent must have seen the close
 * before the new connection arrives, or it refuses it as a second host connection.
 */
#define RECONNECT_DELAY_MS 50

struct SbxPoolVmFactory {
    const SbxProfile *profile;
    const SbxImage *image;
    const SbxSnapshot *snapshot;
    SbxPool *pool;
};

struct SbxPoolVm {
    SbxPoolVmFactory *f;
    SbxVm *vm;
    GCancellable *cancel;
    int fd;              /* unused channel to the agent, or -1 */
    gint64 fd_since;     /* monotonic us when it was connected */
    guint ops_in_flight; /* start or reconnect callbacks still to come */
    guint delay_source;
    gboolean destroyed;
};

SbxPoolVmFactory *sbx_pool_vm_factory_new(const SbxProfile *profile, const SbxImage *image,
                                          const SbxSnapshot *snapshot)
{
    SbxPoolVmFactory *f = g_new0(SbxPoolVmFactory, 1);

    f->profile = profile;
    f->image = image;
    f->snapshot = snapshot;
    return f;
}

void sbx_pool_vm_factory_free(SbxPoolVmFactory *f)
{
    g_free(f);
}

void sbx_pool_vm_factory_set_pool(SbxPoolVmFactory *f, SbxPool *pool)
{
    f->pool = pool;
}

static void close_channel(SbxPoolVm *pv)
{
    if (pv->fd >= 0) {
        close(pv->fd);
        pv->fd = -1;
    }
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
    g_clear_handle_id(&pv->delay_source, g_source_remove);
    g_cancellable_cancel(pv->cancel);
    close_channel(pv);
    g_clear_pointer(&pv->vm, sbx_vm_free);
    maybe_release(pv);
}

static gboolean report_lost(gpointer data)
{
    SbxPoolVm *pv = data;

    pv->ops_in_flight--;
    if (pv->destroyed) {
        maybe_release(pv);
    } else {
        sbx_pool_lost(pv->f->pool, pv);
    }
    return G_SOURCE_REMOVE;
}

/* QEMU exited while pooled: tell the pool from an idle callback, not from inside the VM's. */
static void on_vm_exit(SbxVm *vm, const char *reason, gpointer data)
{
    SbxPoolVm *pv = data;
    (void)vm;
    (void)reason;

    pv->ops_in_flight++;
    g_idle_add(report_lost, pv);
}

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
    } else {
        sbx_pool_started(pv->f->pool, pv, fs->error); /* the pool destroys it */
    }
    g_error_free(fs->error);
    g_free(fs);
    return G_SOURCE_REMOVE;
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
        /* Reported from an idle callback: the pool frees the VM, not inside its own callback. */
        FailedStart *fs = g_new0(FailedStart, 1);
        fs->pv = pv;
        fs->error = error;
        pv->ops_in_flight++;
        g_idle_add(report_failed, fs);
        return;
    }
    pv->fd = sbx_vm_take_channel(pv->vm);
    pv->fd_since = g_get_monotonic_time();
    sbx_vm_set_exit_handler(pv->vm, on_vm_exit, pv);
    sbx_pool_started(pv->f->pool, pv, NULL);
}

static gpointer pv_start(SbxPool *pool, gpointer data)
{
    SbxPoolVmFactory *f = data;
    SbxPoolVm *pv = g_new0(SbxPoolVm, 1);
    SbxVmOptions opts = {.snapshot = f->snapshot};
    (void)pool;

    pv->f = f;
    pv->fd = -1;
    pv->cancel = g_cancellable_new();
    pv->vm = sbx_vm_new(f->profile, f->image, &opts);
    pv->ops_in_flight++;
    sbx_vm_start_async(pv->vm, pv->cancel, on_started, pv);
    return pv;
}

/* Nothing to read and no hang-up: the agent still waits for our hello on this channel. */
static gboolean channel_quiet(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};

    return poll(&p, 1, 0) == 0;
}

static gboolean pv_usable(gpointer vm, gpointer data)
{
    SbxPoolVm *pv = vm;
    (void)data;

    return pv->fd >= 0 &&
           g_get_monotonic_time() - pv->fd_since < SBX_POOL_VM_CHANNEL_FRESH_MS * 1000ll &&
           channel_quiet(pv->fd);
}

static void on_reconnected(GObject *src, GAsyncResult *res, gpointer data)
{
    SbxPoolVm *pv = data;
    g_autoptr(GError) error = NULL;
    (void)src;

    pv->ops_in_flight--;
    if (pv->destroyed) {
        maybe_release(pv);
        return;
    }
    int fd = sbx_vm_connect_port_finish(pv->vm, res, &error);
    if (fd < 0) {
        sbx_pool_lost(pv->f->pool, pv); /* the agent stopped answering */
        return;
    }
    pv->fd = fd;
    pv->fd_since = g_get_monotonic_time();
    sbx_pool_usable(pv->f->pool, pv);
}

static gboolean reconnect(gpointer data)
{
    SbxPoolVm *pv = data;

    pv->delay_source = 0;
    pv->ops_in_flight++;
    sbx_vm_connect_port_async(pv->vm, SBX_AGENT_PORT, SBX_POOL_VM_RECONNECT_TIMEOUT_MS, pv->cancel,
                              on_reconnected, pv);
    return G_SOURCE_REMOVE;
}

/*
 * Health check: QEMU must run; a channel the agent closed (or wrote on) or one that gets old
 * is replaced by a new connection, whose answer shows the agent is alive.
 */
static gboolean pv_check(gpointer vm, gpointer data)
{
    SbxPoolVm *pv = vm;
    gint64 refresh_us = (SBX_POOL_VM_CHANNEL_FRESH_MS - SBX_POOL_CHECK_INTERVAL_MS) * 1000ll;
    (void)data;

    if (sbx_vm_qemu_pid(pv->vm) == 0) {
        return FALSE;
    }
    if (pv->fd < 0) {
        return TRUE; /* a reconnect is under way */
    }
    if (!channel_quiet(pv->fd) || g_get_monotonic_time() - pv->fd_since >= refresh_us) {
        close_channel(pv);
        pv->delay_source = g_timeout_add(RECONNECT_DELAY_MS, reconnect, pv);
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

int sbx_pool_vm_take_channel(SbxPoolVm *pv)
{
    int fd = pv->fd;

    pv->fd = -1;
    return fd;
}

gint64 sbx_pool_vm_restore_us(SbxPoolVm *pv)
{
    SbxVmRestoreTimes t;

    sbx_vm_restore_times(pv->vm, &t);
    return t.total;
}
