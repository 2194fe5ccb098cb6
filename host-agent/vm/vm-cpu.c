/*
 * The CPU policy between VMs: short executions before long ones (docs/vm.md, "CPU policy").
 *
 * Each VM's cgroup starts with the default CPU weight. An execution that runs longer than the
 * burst (SANDBOX_CPU_BURST_MS, default SBX_VM_CPU_BURST_MS_DEFAULT) has its VM's weight lowered
 * to SBX_VM_CPU_WEIGHT_LONG until the next execution on that VM begins. The weight only matters
 * while VMs compete for the CPU: alone, a long execution runs as fast as before. Under
 * contention a new execution gets most of a core against long-running ones (a fork bomb, an
 * endless loop, a flood) instead of an equal share, so what one tenant runs for minutes costs
 * another's quick call little (scripts/bench, "neighbours"). The long ones are slowed, never
 * stopped: CFS gives every weight its share.
 */
#include "vm-private.h"

#include <errno.h>

/*
 * The weight of an execution past its burst (v2 scale; v1 cpu.shares 102): a tenth of a new
 * execution's 100. Against three such VMs a new one gets 100/130 of a contended CPU; lower
 * would add little and make a long execution's progress depend on short ones even more.
 */
#define SBX_VM_CPU_WEIGHT_LONG 10

/* Longer than any pooled quick call takes here (~30 ms), shorter than what counts as a batch. */
#define SBX_VM_CPU_BURST_MS_DEFAULT 1000

/* A day: longer is a typo, not a policy. */
#define SBX_VM_CPU_BURST_MS_MAX (24 * 3600 * 1000)

gboolean sbx_vm_cpu_prepare(SbxVm *vm, GError **error)
{
    const char *v = g_getenv("SANDBOX_CPU_BURST_MS");
    char *end = NULL;
    guint64 ms;

    vm->cpu_burst_ms = SBX_VM_CPU_BURST_MS_DEFAULT;
    if (v == NULL || *v == '\0')
        return TRUE;
    errno = 0;
    ms = g_ascii_strtoull(v, &end, 10);
    if (errno != 0 || end == v || *end != '\0' || !g_ascii_isdigit(*v) ||
        ms > SBX_VM_CPU_BURST_MS_MAX)
        return sbx_vm_fail(error, SBX_VM_ERROR_CONFIG,
                           "SANDBOX_CPU_BURST_MS=%s: want milliseconds 0..%d (0: every VM keeps "
                           "the same CPU weight)",
                           v, SBX_VM_CPU_BURST_MS_MAX);
    vm->cpu_burst_ms = (guint)ms;
    return TRUE;
}

/* A failed write is the host's problem, not the execution's: say it once and go on. */
static void set_weight(SbxVm *vm, guint weight)
{
    static gint warned;
    g_autoptr(GError) error = NULL;

    if (!sbx_cgroup_set_cpu_weight(vm->cgroup, weight, &error) &&
        g_atomic_int_compare_and_exchange(&warned, 0, 1))
        g_printerr("sandbox: warning: %s: VMs keep their CPU weight\n", error->message);
}

static gboolean on_burst_over(gpointer data)
{
    SbxVm *vm = data;

    vm->cpu_timer = 0;
    set_weight(vm, SBX_VM_CPU_WEIGHT_LONG);
    vm->cpu_demoted = TRUE;
    return G_SOURCE_REMOVE;
}

void sbx_vm_execution_begin(SbxVm *vm)
{
    g_return_if_fail(vm != NULL);
    if (vm->state != VM_RUNNING || vm->cgroup == NULL || !sbx_cgroup_has_cpu_weight(vm->cgroup) ||
        vm->cpu_burst_ms == 0)
        return;
    if (vm->cpu_demoted) {
        set_weight(vm, SBX_CGROUP_CPU_WEIGHT_DEFAULT);
        vm->cpu_demoted = FALSE;
    }
    g_clear_handle_id(&vm->cpu_timer, g_source_remove);
    vm->cpu_timer = g_timeout_add(vm->cpu_burst_ms, on_burst_over, vm);
}

gboolean sbx_vm_cpu_demoted(SbxVm *vm)
{
    g_return_val_if_fail(vm != NULL, FALSE);
    return vm->cpu_demoted;
}
