/*
 * The warm pool's bookkeeping (pool.h): which VMs are starting, which are ready, which claims
 * wait; refill up to size + waiting claims with at most max_starting starts in flight; a
 * periodic health check; a back-off after repeated failed starts. No I/O of its own.
 */
#include <gio/gio.h>

#include "pool.h"

typedef struct {
    guint64 id;
    SbxPoolClaimFunc func;
    gpointer user_data;
} Waiter;

struct SbxPool {
    const SbxPoolVmOps *ops;
    gpointer data;
    SbxPoolConfig cfg;
    GQueue ready;        /* factory handles, oldest first */
    GPtrArray *starting; /* factory handles */
    GQueue waiters;      /* Waiter*, oldest first */
    guint64 next_id;
    guint failures_in_row;
    guint check_source;
    guint dispatch_source;
    guint backoff_source;
    guint delay_source; /* the refill held back after a claim (cfg.refill_delay_ms) */
    gint64 quiet_until; /* monotonic us: no refill for the pool's size before this */
    SbxPoolStats counters;
};

static void refill(SbxPool *pool);

static void drop_ready(SbxPool *pool, GList *link)
{
    gpointer vm = link->data;

    g_queue_delete_link(&pool->ready, link);
    pool->counters.dropped_total++;
    pool->ops->destroy(vm, pool->data);
}

/* Hand ready, usable VMs to waiting claims, oldest first. */
static gboolean dispatch(gpointer data)
{
    SbxPool *pool = data;

    pool->dispatch_source = 0;
    while (!g_queue_is_empty(&pool->waiters)) {
        GList *l = pool->ready.head;
        while (l != NULL && !pool->ops->usable(l->data, pool->data)) {
            l = l->next;
        }
        if (l == NULL) {
            break;
        }
        gpointer vm = l->data;
        g_queue_delete_link(&pool->ready, l);
        Waiter *w = g_queue_pop_head(&pool->waiters);
        pool->counters.claimed_total++;
        pool->quiet_until = g_get_monotonic_time() + pool->cfg.refill_delay_ms * 1000ll;
        w->func(vm, NULL, w->user_data);
        g_free(w);
    }
    refill(pool);
    return G_SOURCE_REMOVE;
}

static void schedule_dispatch(SbxPool *pool)
{
    if (pool->dispatch_source == 0) {
        pool->dispatch_source = g_idle_add(dispatch, pool);
    }
}

static gboolean end_backoff(gpointer data)
{
    SbxPool *pool = data;

    pool->backoff_source = 0;
    /* One more try; another failure backs off again. */
    pool->failures_in_row = SBX_POOL_FAILURES_BEFORE_BACKOFF - 1;
    refill(pool);
    return G_SOURCE_REMOVE;
}

static gboolean end_delay(gpointer data)
{
    SbxPool *pool = data;

    pool->delay_source = 0;
    refill(pool);
    return G_SOURCE_REMOVE;
}

/*
 * Start VMs until ready + starting covers the pool size and the waiting claims; just after a
 * claim only what the waiting claims need (the rest after cfg.refill_delay_ms).
 */
static void refill(SbxPool *pool)
{
    guint waiting = g_queue_get_length(&pool->waiters);
    guint want = pool->cfg.size + waiting;
    gint64 now = g_get_monotonic_time();

    if (pool->backoff_source != 0) {
        return;
    }
    if (now < pool->quiet_until) {
        if (pool->delay_source == 0) {
            guint ms = (guint)((pool->quiet_until - now + 999) / 1000);
            pool->delay_source = g_timeout_add(ms, end_delay, pool);
        }
        want = waiting;
    }
    while (g_queue_get_length(&pool->ready) + pool->starting->len < want &&
           pool->starting->len < pool->cfg.max_starting) {
        gpointer vm = pool->ops->start(pool, pool->data);
        g_ptr_array_add(pool->starting, vm);
        pool->counters.started_total++;
    }
}

static gboolean health_check(gpointer data)
{
    SbxPool *pool = data;
    GList *l = pool->ready.head;

    while (l != NULL) {
        GList *next = l->next;
        if (!pool->ops->check(l->data, pool->data)) {
            drop_ready(pool, l);
        }
        l = next;
    }
    refill(pool);
    return G_SOURCE_CONTINUE;
}

SbxPool *sbx_pool_new(const SbxPoolVmOps *ops, gpointer factory_data, const SbxPoolConfig *cfg)
{
    SbxPool *pool = g_new0(SbxPool, 1);

    pool->ops = ops;
    pool->data = factory_data;
    pool->cfg = *cfg;
    if (pool->cfg.max_starting == 0) {
        pool->cfg.max_starting = SBX_POOL_MAX_STARTING_DEFAULT;
    }
    if (pool->cfg.check_interval_ms == 0) {
        pool->cfg.check_interval_ms = SBX_POOL_CHECK_INTERVAL_MS;
    }
    g_queue_init(&pool->ready);
    g_queue_init(&pool->waiters);
    pool->starting = g_ptr_array_new();
    pool->check_source = g_timeout_add(pool->cfg.check_interval_ms, health_check, pool);
    refill(pool);
    return pool;
}

static void fail_first_waiter(SbxPool *pool, const GError *error)
{
    Waiter *w = g_queue_pop_head(&pool->waiters);

    if (w != NULL) {
        w->func(NULL, error, w->user_data);
        g_free(w);
    }
}

void sbx_pool_started(SbxPool *pool, gpointer vm, const GError *error)
{
    if (!g_ptr_array_remove_fast(pool->starting, vm)) {
        return; /* not ours (any more) */
    }
    if (error != NULL) {
        pool->counters.failed_total++;
        pool->ops->destroy(vm, pool->data);
        /* A request must not wait forever on a pool whose starts fail: it gets the error. */
        fail_first_waiter(pool, error);
        if (++pool->failures_in_row >= SBX_POOL_FAILURES_BEFORE_BACKOFF) {
            pool->backoff_source = g_timeout_add(SBX_POOL_BACKOFF_MS, end_backoff, pool);
        }
    } else {
        pool->failures_in_row = 0;
        g_queue_push_tail(&pool->ready, vm);
        schedule_dispatch(pool);
    }
    refill(pool);
}

void sbx_pool_lost(SbxPool *pool, gpointer vm)
{
    GList *l = g_queue_find(&pool->ready, vm);

    /* A VM that dies while it starts is reported by its failed start instead. */
    if (l != NULL) {
        drop_ready(pool, l);
        refill(pool);
    }
}

void sbx_pool_usable(SbxPool *pool, gpointer vm)
{
    if (g_queue_find(&pool->ready, vm) != NULL) {
        schedule_dispatch(pool);
    }
}

guint64 sbx_pool_claim(SbxPool *pool, SbxPoolClaimFunc func, gpointer user_data)
{
    Waiter *w = g_new0(Waiter, 1);

    w->id = ++pool->next_id;
    w->func = func;
    w->user_data = user_data;
    g_queue_push_tail(&pool->waiters, w);
    schedule_dispatch(pool); /* refills after handing out */
    if (g_queue_is_empty(&pool->ready)) {
        refill(pool); /* nothing to hand out: start now */
    }
    return w->id;
}

void sbx_pool_cancel_claim(SbxPool *pool, guint64 id)
{
    for (GList *l = pool->waiters.head; l != NULL; l = l->next) {
        Waiter *w = l->data;
        if (w->id == id) {
            g_queue_delete_link(&pool->waiters, l);
            g_free(w);
            return;
        }
    }
}

void sbx_pool_stats(SbxPool *pool, SbxPoolStats *out)
{
    *out = pool->counters;
    out->ready = g_queue_get_length(&pool->ready);
    out->starting = pool->starting->len;
    out->waiting = g_queue_get_length(&pool->waiters);
}

GPtrArray *sbx_pool_ready_vms(SbxPool *pool)
{
    GPtrArray *out = g_ptr_array_new();

    for (GList *l = pool->ready.head; l != NULL; l = l->next) {
        g_ptr_array_add(out, l->data);
    }
    return out;
}

void sbx_pool_free(SbxPool *pool)
{
    g_autoptr(GError) cancelled = NULL;
    gpointer vm;

    if (pool == NULL) {
        return;
    }
    g_clear_handle_id(&pool->check_source, g_source_remove);
    g_clear_handle_id(&pool->dispatch_source, g_source_remove);
    g_clear_handle_id(&pool->backoff_source, g_source_remove);
    g_clear_handle_id(&pool->delay_source, g_source_remove);
    while ((vm = g_queue_pop_head(&pool->ready)) != NULL) {
        pool->ops->destroy(vm, pool->data);
    }
    for (guint i = 0; i < pool->starting->len; i++) {
        pool->ops->destroy(pool->starting->pdata[i], pool->data);
    }
    g_ptr_array_free(pool->starting, TRUE);
    cancelled = g_error_new_literal(G_IO_ERROR, G_IO_ERROR_CANCELLED, "the pool is shut down");
    while (!g_queue_is_empty(&pool->waiters)) {
        fail_first_waiter(pool, cancelled);
    }
    g_free(pool);
}
