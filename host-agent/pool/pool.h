/*
 * The warm pool: a number of started VMs kept ready for requests (docs/pool.md). A request
 * claims one; the claimer owns it from then on (one execution, then destroyed: a VM is never
 * handed out twice); the pool refills in the background on the GLib main loop.
 *
 * The pool does not know what a VM is: it drives a factory (SbxPoolVmOps), so its logic is
 * tested with a fake one (tests/pool/test-pool.c) and the real one is pool-vm.c.
 */
#pragma once

#include <glib.h>

typedef struct SbxPool SbxPool;

/* What the pool needs from a VM factory. @vm is the factory's opaque handle. */
typedef struct {
    /* Begin starting a VM; the factory reports the outcome once with sbx_pool_started(). */
    gpointer (*start)(SbxPool *pool, gpointer factory_data);
    /* Whether a started VM can be handed out right now (e.g. its session is idle). */
    gboolean (*usable)(gpointer vm, gpointer factory_data);
    /*
     * Periodic health check of a pooled VM: FALSE drops it (the pool destroys it). May make
     * it unusable for a while (then sbx_pool_usable() when it is usable again).
     */
    gboolean (*check)(gpointer vm, gpointer factory_data);
    /* For status and tests: the VM's main process (0 if none). */
    GPid (*pid)(gpointer vm, gpointer factory_data);
    /* Kill and free, whatever its state (also while it starts: no report follows). */
    void (*destroy)(gpointer vm, gpointer factory_data);
} SbxPoolVmOps;

typedef struct {
    guint size;              /* VMs kept ready (0 = restore on demand only) */
    guint max_starting;      /* starts in flight at once; 0 = SBX_POOL_MAX_STARTING_DEFAULT */
    guint check_interval_ms; /* health check period; 0 = SBX_POOL_CHECK_INTERVAL_MS */
    /*
     * After a VM is handed out, the pool's refill waits this long unless a claim waits (0 =
     * none): a start right away would share the cores with the execution just claimed.
     */
    guint refill_delay_ms;
} SbxPoolConfig;

/*
 * Restores in flight at once. A restore is mostly CPU (QEMU's start, a 117 MB RAM copy, the
 * guest's hot-plug under TCG): on this 2-core machine two at once use both cores; more only
 * slow each other down and the executions that run meanwhile.
 */
#define SBX_POOL_MAX_STARTING_DEFAULT 2

/*
 * Health check period: the real factory pings each pooled VM's agent this often, so a VM that
 * stopped answering is dropped within this plus the ping's timeout (SBX_SESSION_PING_TIMEOUT_MS).
 */
#define SBX_POOL_CHECK_INTERVAL_MS 1000

/*
 * After this many starts in a row failed, the pool waits SBX_POOL_BACKOFF_MS before the next
 * (a broken image must not become a busy loop of QEMU spawns).
 */
#define SBX_POOL_FAILURES_BEFORE_BACKOFF 3
#define SBX_POOL_BACKOFF_MS 2000

/** Counters, for status requests and tests. */
typedef struct {
    guint ready; /* started, waiting to be claimed */
    guint starting;
    guint waiting; /* claims waiting for a VM */
    guint64 started_total;
    guint64 failed_total;
    guint64 dropped_total; /* pooled VMs that died or failed a check */
    guint64 claimed_total;
} SbxPoolStats;

/** A new pool; it starts filling on the thread-default main context at once. */
SbxPool *sbx_pool_new(const SbxPoolVmOps *ops, gpointer factory_data, const SbxPoolConfig *cfg);

/** Destroy every VM (ready or starting); fail waiting claims with G_IO_ERROR_CANCELLED. */
void sbx_pool_free(SbxPool *pool);

/** From the factory: the start of @vm finished; @error NULL = ready. */
void sbx_pool_started(SbxPool *pool, gpointer vm, const GError *error);

/** From the factory: pooled @vm died (QEMU exited...). The pool destroys it and refills. */
void sbx_pool_lost(SbxPool *pool, gpointer vm);

/** From the factory: pooled @vm is usable again (after check() made it unusable). */
void sbx_pool_usable(SbxPool *pool, gpointer vm);

/**
 * The claim's outcome: @vm (now owned by the claimer: destroy it with the factory) or NULL
 * with @error (the start failed, or the pool was freed: G_IO_ERROR_CANCELLED).
 */
typedef void (*SbxPoolClaimFunc)(gpointer vm, const GError *error, gpointer user_data);

/**
 * Claim a VM. @func runs later on the main loop (never from inside this call): at once if
 * one is ready, else when one is (an empty pool starts one now). Returns an id for
 * sbx_pool_cancel_claim().
 */
guint64 sbx_pool_claim(SbxPool *pool, SbxPoolClaimFunc func, gpointer user_data);

/** Withdraw a claim whose function has not run yet. No-op otherwise. */
void sbx_pool_cancel_claim(SbxPool *pool, guint64 id);

void sbx_pool_stats(SbxPool *pool, SbxPoolStats *out);

/** Handles of the ready VMs, in claim order (the array is the caller's, the handles not). */
GPtrArray *sbx_pool_ready_vms(SbxPool *pool);
