/*
 * Pre-started restores (docs/pool.md, "Pre-started QEMUs"): a restore whose QEMU is spawned and
 * ready ahead of need. The start runs as usual (bridge, QEMU with -incoming defer, QMP
 * handshake, x-ignore-shared, the RAM copy) and holds before the state load, the point from
 * which a restore is the guest's own work; sbx_vm_prestart_resume() goes on from there. QEMU's
 * start (~130 ms of CPU here) and the RAM copy are then no part of an on-demand restore.
 *
 * While held, the VM is still starting: its start task is pending (an exit or a QMP failure
 * fails it, like any start), the boot deadline is off (a held VM may wait minutes), and
 * sbx_vm_free() kills and reaps it like any other.
 */
#include "vm-private.h"

void sbx_vm_set_prestart(SbxVm *vm)
{
    g_assert(vm->state == VM_NEW && vm->snapshot != NULL);
    vm->prestart_hold = TRUE;
}

gboolean sbx_vm_prestart_hold(SbxVm *vm)
{
    if (!vm->prestart_hold)
        return FALSE;
    vm->prestart_held = TRUE;
    g_clear_handle_id(&vm->step_timer, g_source_remove); /* re-armed by the resume */
    return TRUE;
}

gboolean sbx_vm_prestart_is_held(SbxVm *vm)
{
    return vm->state == VM_STARTING && vm->prestart_held;
}

void sbx_vm_prestart_resume(SbxVm *vm)
{
    if (vm->state != VM_STARTING || !vm->prestart_hold)
        return;
    vm->prestart_hold = FALSE;
    /* The restore is timed from here: what ran before was done ahead of need. */
    vm->start_call_us = g_get_monotonic_time();
    if (!vm->prestart_held)
        return; /* still on its way to the hold: it goes on through without stopping */
    vm->prestart_held = FALSE;
    sbx_vm_arm_boot_deadline(vm);
    sbx_vm_restore_load_state(vm);
}
