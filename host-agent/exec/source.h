/*
 * Where an execution's VM comes from: the first seam of the execution core (exec.h). A source
 * gets one VM (restored from a snapshot, booted cold, claimed from a warm pool) and hands the
 * core the VM and a session to its guest agent; it releases the VM when the execution is over.
 * source-vm.c starts a VM of its own, source-pool.c claims one from a pool, lease.c lends a
 * session's VM (held across executions) to one execution at a time.
 *
 * A source serves one execution and is owned by it (sbx_exec_new() takes it).
 */
#pragma once

#include <gio/gio.h>

#include "pool.h"
#include "session.h"
#include "vm.h"

typedef struct SbxExecSource SbxExecSource;

/** How an acquire ended: @error NULL = the VM is in hand. Runs once, from the main loop. */
typedef void (*SbxExecAcquiredFunc)(SbxExecSource *src, const GError *error, gpointer data);

/** The VM in hand died by itself (QEMU exited, the bridge died): @reason says how. */
typedef void (*SbxExecVmExitFunc)(SbxExecSource *src, const char *reason, gpointer data);

typedef struct {
    /*
     * Start getting the VM. @done runs exactly once, from the loop (never from inside acquire),
     * also after cancel: then with an error, or with a VM that the core releases at once.
     */
    void (*acquire)(SbxExecSource *src, SbxExecAcquiredFunc done, gpointer data);
    /* Hurry an acquire in progress to its end; its done still runs. No-op otherwise. */
    void (*cancel)(SbxExecSource *src);
    /* The VM in hand after a successful acquire (its console, its PIDs), else NULL. */
    SbxVm *(*vm)(SbxExecSource *src);
    /* After a successful acquire: call @func if the VM dies by itself, until released. */
    void (*watch)(SbxExecSource *src, SbxExecVmExitFunc func, gpointer data);
    /* The execute went out: the VM's CPU policy counts the execution from now (vm-cpu.c). */
    void (*begin)(SbxExecSource *src);
    /*
     * A session on the VM's channel, with no callbacks yet (ownership to the caller): a new one,
     * or the pooled VM's, handshaken ahead of the claim. NULL with @error if there is none.
     */
    SbxSession *(*take_session)(SbxExecSource *src, GError **error);
    /*
     * Optional: take back the session of take_session when the execution is freed (a lease's
     * VM serves the next execution). NULL: the execution frees it with the VM.
     */
    void (*give_back)(SbxExecSource *src, SbxSession *session);
    /*
     * The report's members about the start, each `"name":value` with a leading comma (the
     * core writes `"start"` before them): how long the VM took, what the pool did.
     */
    void (*describe)(SbxExecSource *src, GString *out);
    /* The VM's start (restore-to-ready or cold boot to ready) in microseconds, 0 if unknown. */
    gint64 (*boot_us)(SbxExecSource *src);
    /* End the VM now: one execution per VM, nothing of the guest outlives its result. */
    void (*release)(SbxExecSource *src);
    /* Free the source (after its acquire ended); the VM is killed and reaped if still there. */
    void (*free)(SbxExecSource *src);
} SbxExecSourceOps;

struct SbxExecSource {
    const SbxExecSourceOps *ops;
    const char *start; /* the report's `start`: "restore", "cold", "pool" */
};

/**
 * A source that starts a VM of @profile + @image: restored from @snapshot, or booted cold when
 * @snapshot is NULL. @profile, @image and @snapshot must outlive the source.
 */
SbxExecSource *sbx_exec_source_new_vm(const SbxProfile *profile, const SbxImage *image,
                                      const SbxSnapshot *snapshot, const SbxVmOptions *opts);

/** A source that claims a restored, handshaken VM from @pool (which may be freed first). */
SbxExecSource *sbx_exec_source_new_pool(SbxPool *pool);

/** Free @src (accepts NULL). */
void sbx_exec_source_free(SbxExecSource *src);
