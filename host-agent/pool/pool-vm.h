/*
 * The real VM factory of the warm pool: VMs restored from a snapshot (sbx_vm_start_async),
 * each holding a connected, unused channel to its guest agent. The agent drops a channel that
 * sees no `hello` within 5 s, so a pooled VM's channel is replaced every few seconds; that
 * reconnect is also the health check (an agent that stops accepting is dropped).
 */
#pragma once

#include "pool.h"
#include "vm.h"

typedef struct SbxPoolVm SbxPoolVm;
typedef struct SbxPoolVmFactory SbxPoolVmFactory;

/*
 * A channel older than this is replaced before it is handed out: the agent closes it at 5 s
 * without hello, and the session sends hello within milliseconds of the claim; 1.5 s margin
 * absorbs a loaded host.
 */
#define SBX_POOL_VM_CHANNEL_FRESH_MS 3500

/* The reconnect of a pooled VM's channel must be answered within this, or the VM is dropped. */
#define SBX_POOL_VM_RECONNECT_TIMEOUT_MS 2000

/** The factory's ops (factory_data is an SbxPoolVmFactory). */
extern const SbxPoolVmOps sbx_pool_vm_ops;

/** A factory of VMs of @profile + @image restored from @snapshot (all must outlive it). */
SbxPoolVmFactory *sbx_pool_vm_factory_new(const SbxProfile *profile, const SbxImage *image,
                                          const SbxSnapshot *snapshot);
void sbx_pool_vm_factory_free(SbxPoolVmFactory *f);

/** Attach the pool the factory reports to (before the pool starts anything). */
void sbx_pool_vm_factory_set_pool(SbxPoolVmFactory *f, SbxPool *pool);

/** The VM of a claimed handle (to set its exit handler, read its PIDs, kill it). */
SbxVm *sbx_pool_vm_vm(SbxPoolVm *pv);

/** The channel of a claimed handle (ownership passes to the caller), or -1. */
int sbx_pool_vm_take_channel(SbxPoolVm *pv);

/** Microseconds the VM took to restore (sbx_vm_restore_times' total). */
gint64 sbx_pool_vm_restore_us(SbxPoolVm *pv);

/** Kill and free a claimed handle. Accepts NULL. */
void sbx_pool_vm_free(SbxPoolVm *pv);
