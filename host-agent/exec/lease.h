/*
 * A VM held across executions: a session's (docs/sessions.md). The lease gets one VM from a
 * source (source.h: a pool's claim, a restore, a boot), says hello to its guest agent, and then
 * lends the VM and its channel to one execution at a time (sbx_exec_lease_lend(): a source for
 * the execution core, which gives the channel back when the execution is freed). Between
 * executions its owner may use the channel for file operations (session/files.h). The VM is
 * never handed to anyone else: it dies with the lease.
 *
 * Reference counted: a lent source holds a reference, so the owner may close the lease while an
 * execution still runs on it (the VM is killed at once; the execution ends on its VM's exit).
 */
#pragma once

#include <gio/gio.h>

#include "exec/source.h"

typedef struct SbxExecLease SbxExecLease;

/* What the lease tells its owner, always from the main loop, never after close. */
typedef struct {
    /* The start ended: @error NULL = the VM is ready. Once. */
    void (*ready)(SbxExecLease *lease, const GError *error, gpointer data);
    /*
     * The VM died (QEMU exited; an execution on it ends too), or its channel broke, or an
     * execution gave it back unusable (it did not end with the guest's done): the lease is of
     * no more use. At most once.
     */
    void (*lost)(SbxExecLease *lease, const char *reason, gpointer data);
    /* An execution gave the VM back in good order: the lease is usable again. */
    void (*returned)(SbxExecLease *lease, gpointer data);
} SbxExecLeaseCallbacks;

/** A lease on the VM that @src (taken) will acquire. Nothing starts before sbx_exec_lease_start().
 */
SbxExecLease *sbx_exec_lease_new(SbxExecSource *src);

/**
 * Acquire the VM and handshake its guest agent (unless the source did: a pooled VM), then
 * report to @cb (which must outlive the lease).
 */
void sbx_exec_lease_start(SbxExecLease *lease, const SbxExecLeaseCallbacks *cb, gpointer data);

/** Ready, not lent, not lost, not closed: an execution or a file operation may start. */
gboolean sbx_exec_lease_usable(const SbxExecLease *lease);

/** Lost or closed: the VM is gone or of no more use. */
gboolean sbx_exec_lease_lost(const SbxExecLease *lease);

/** Whether an execution has the VM (a source of sbx_exec_lease_lend() not yet freed). */
gboolean sbx_exec_lease_lent(const SbxExecLease *lease);

/**
 * A source for one execution on the lease's VM (sbx_exec_new() takes it). Its acquire succeeds
 * when the VM is this execution's turn: at once, or once the execution lent it before gave it
 * back (executions run one at a time, in the order they were lent); it fails if the lease is
 * lost or closed first. Its release does not kill the VM; the channel comes back to the lease
 * when the execution is freed, usable if the execution ended properly (the guest's done).
 * Requires a lease that started (ready) and is not closed.
 */
SbxExecSource *sbx_exec_lease_lend(SbxExecLease *lease);

/** The channel to the guest agent while the lease is usable (file operations), else NULL. */
SbxSession *sbx_exec_lease_session(SbxExecLease *lease);

/** The VM once acquired (its QEMU's PID, its memory), else NULL. */
SbxVm *sbx_exec_lease_vm(SbxExecLease *lease);

/** The VM's start in microseconds (restore or boot to ready), 0 if unknown. */
gint64 sbx_exec_lease_boot_us(SbxExecLease *lease);

/**
 * Kill the VM now and drop the channel; no callback runs any more. An execution on it ends as
 * on any VM's exit. Idempotent.
 */
void sbx_exec_lease_close(SbxExecLease *lease);

SbxExecLease *sbx_exec_lease_ref(SbxExecLease *lease);

/** Drop a reference (accepts NULL); the last one closes the lease and frees it. */
void sbx_exec_lease_unref(SbxExecLease *lease);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxExecLease, sbx_exec_lease_unref)
