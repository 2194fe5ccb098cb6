/*
 * The real VM factory of the warm pool: VMs restored from a snapshot (sbx_vm_start_async),
 * each holding a session to its guest agent that has done its hello (fresh entropy, clock,
 * token) and, unless disabled, had the runners warm up again for TCG before the VM counts as
 * ready. The health check pings the agent; a VM whose agent does not answer is dropped.
 */
#pragma once

#include "pool.h"
#include "session.h"
#include "vm.h"

typedef struct SbxPoolVm SbxPoolVm;
typedef struct SbxPoolVmFactory SbxPoolVmFactory;

/** The factory's ops (factory_data is an SbxPoolVmFactory). */
extern const SbxPoolVmOps sbx_pool_vm_ops;

/** A factory of VMs of @profile + @image restored from @snapshot (all must outlive it). */
SbxPoolVmFactory *sbx_pool_vm_factory_new(const SbxProfile *profile, const SbxImage *image,
                                          const SbxSnapshot *snapshot);
void sbx_pool_vm_factory_free(SbxPoolVmFactory *f);

/** Whether a VM's hello asks the runners to warm up again first (default TRUE). */
void sbx_pool_vm_factory_set_warm_up(SbxPoolVmFactory *f, gboolean warm_up);

/**
 * Keep @n QEMUs pre-started for the restores (prestart.h; 0: none, the default). Call before
 * the pool starts anything.
 */
void sbx_pool_vm_factory_set_prestart(SbxPoolVmFactory *f, guint n);

/** QEMU PIDs of the pre-started VMs waiting (the array is the caller's). */
GArray *sbx_pool_vm_factory_prestart_pids(SbxPoolVmFactory *f);

/** Attach the pool the factory reports to (before the pool starts anything). */
void sbx_pool_vm_factory_set_pool(SbxPoolVmFactory *f, SbxPool *pool);

/**
 * The claimer's first call on a claimed handle: from now on nothing about it reaches the pool
 * (which may be freed before the handle: serve's shutdown), no ping is pending, and the
 * session has no callbacks until the claimer sets its own. QEMU's exit reaches the claimer
 * through its own exit handler (sbx_vm_set_exit_handler()).
 */
void sbx_pool_vm_detach(SbxPoolVm *pv);

/** The VM of a claimed handle (to set its exit handler, read its PIDs, kill it). */
SbxVm *sbx_pool_vm_vm(SbxPoolVm *pv);

/**
 * The handshaken session of a claimed handle (ownership passes to the caller; set its
 * callbacks with sbx_session_set_callbacks() before running), or NULL.
 */
SbxSession *sbx_pool_vm_take_session(SbxPoolVm *pv);

/** Microseconds from the restore's end to hello_ok (the hello and the runners' warm-up). */
gint64 sbx_pool_vm_hello_us(SbxPoolVm *pv);

/** Microseconds the VM took to restore (sbx_vm_restore_times' total). */
gint64 sbx_pool_vm_restore_us(SbxPoolVm *pv);

/** Whether the runners warmed up again before the VM was offered (see start_handshake). */
gboolean sbx_pool_vm_warmed(SbxPoolVm *pv);

/** Whether the VM was restored in a pre-started QEMU. */
gboolean sbx_pool_vm_prestarted(SbxPoolVm *pv);

/** Kill and free a claimed handle. Accepts NULL. */
void sbx_pool_vm_free(SbxPoolVm *pv);
