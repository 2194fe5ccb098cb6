/*
 * Pre-started QEMUs for the warm pool (docs/pool.md, "Pre-started QEMUs"): a few restores
 * started ahead of need and held before the state load (sbx_vm_set_prestart): QEMU spawned with
 * -incoming defer, QMP connected, the RAM copied. The factory takes one for each restore, so a
 * restore on demand (an empty pool, a burst of claims) skips QEMU's start; the set refills in
 * the background. Everything is killed and reaped by sbx_prestart_set_free() (sbx_vm_free).
 */
#pragma once

#include <gio/gio.h>

#include "vm.h"

typedef struct SbxPrestartSet SbxPrestartSet;

/* Largest --prestart: each holds a QEMU process and a full copy of the snapshot's RAM. */
#define SBX_PRESTART_MAX 8

/*
 * A replacement is started this long after one is taken: the take comes with a claim, whose
 * execution would otherwise share the cores with QEMU's start (~130 ms of CPU under TCG); most
 * short executions are over by then.
 */
#define SBX_PRESTART_REFILL_DELAY_MS 500

/* After a pre-start failed, wait this long before the next (a broken setup is no spawn loop). */
#define SBX_PRESTART_RETRY_MS 2000

/** Keep @size restores of @snapshot pre-started (0: none). All must outlive the set. */
SbxPrestartSet *sbx_prestart_set_new(const SbxProfile *profile, const SbxImage *image,
                                     const SbxSnapshot *snapshot, guint size);

/** Kill and reap every pre-started QEMU (not those taken). Accepts NULL. */
void sbx_prestart_set_free(SbxPrestartSet *set);

/**
 * Take a pre-started VM (held, or still on its way to the hold), or NULL if none. The caller
 * owns it and resumes it with sbx_vm_prestart_resume(); its start's outcome goes to @callback
 * (as for sbx_vm_start_async: G_IO_ERROR_CANCELLED if freed meanwhile).
 */
SbxVm *sbx_prestart_set_take(SbxPrestartSet *set, GAsyncReadyCallback callback, gpointer user_data);

/** QEMU PIDs of the pre-started VMs waiting at the hold (for status and tests). */
GArray *sbx_prestart_set_pids(SbxPrestartSet *set);
