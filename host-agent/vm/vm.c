/*
 * A VM's public API, teardown and exit handling (the start sequence is in vm-start.c).
 *
 * Ownership: the SbxVm owns its two children (SbxChild kills and reaps), its runtime dir, the
 * QMP connection, the console and stderr logs, and the channel until it is taken. Teardown is
 * one function used by every path: a failed start, an unexpected exit, kill, free.
 */
#include "vm-private.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "base/jsonfile.h"
#include "channel.h"
#include "hvsock.h"
#include "protocol/json.h"
#include "protocol/limits.h"

/* Lines of each log quoted in an error message: enough to show a panic's cause. */
#define DIAG_LINES 25

/*
 * When the bridge exits, QEMU has often just died (the bridge exits when QEMU disconnects),
 * and the two exits are noticed in either order. QEMU's exit says more (status, SHUTDOWN reason),
 * so the bridge's is reported only if QEMU's does not come within this time.
 */
#define BRIDGE_EXIT_GRACE_MS 200

/*
 * When QEMU exits, its last QMP messages (the SHUTDOWN event with its reason) may still be
 * unread in the socket: wait for the QMP EOF, at most this long, before reporting the exit.
 */
#define QEMU_EXIT_QMP_WAIT_MS 100

/* How long a teardown waits for each SIGKILLed child to be reaped (see child.c). */
#define REAP_WAIT_MS 5000

/* CIDs 0-2 are reserved (hypervisor, local, host); each VM has its own bridge, so the CID only
 * has to be valid, but distinct ones make logs easier to follow. */
static guint32 next_cid(void)
{
    static guint32 counter;
    guint32 cid = 3 + (counter++ % 0x7fffff00u);

    return cid;
}

SbxVm *sbx_vm_new(const SbxProfile *profile, const SbxImage *image, const SbxVmOptions *opts)
{
    SbxVm *vm = g_new0(SbxVm, 1);

    vm->profile = profile;
    vm->image = image;
    vm->channel_fd = -1;
    vm->ready_fd = -1;
    vm->ram_fd = -1;
    vm->state_fd = -1;
    vm->state = VM_NEW;
    vm->life_cancel = g_cancellable_new();
    if (opts) {
        vm->runtime_parent = g_strdup(opts->runtime_parent);
        vm->cid = opts->guest_cid;
        vm->boot_timeout_ms = opts->boot_timeout_ms;
        vm->console_to_stderr = opts->console_to_stderr;
        vm->snapshot = opts->snapshot;
    }
    if (vm->cid < 3)
        vm->cid = sbx_profile_channel(profile) == SBX_CHANNEL_VSOCK_KERNEL
                      ? sbx_vm_kernel_pick_cid()
                      : next_cid();
    return vm;
}

/* Remove what the bridge and we put in the runtime dir (sockets only), then the dir. */
void sbx_vm_teardown(SbxVm *vm)
{
    vm->state = VM_DEAD;
    g_cancellable_cancel(vm->life_cancel);
    if (vm->start_cancel)
        g_cancellable_cancel(vm->start_cancel);
    g_clear_handle_id(&vm->ready_watch, g_source_remove);
    g_clear_handle_id(&vm->step_timer, g_source_remove);
    g_clear_handle_id(&vm->retry_timer, g_source_remove);
    g_clear_handle_id(&vm->bridge_grace, g_source_remove);
    g_clear_handle_id(&vm->qemu_exit_wait, g_source_remove);
    g_clear_handle_id(&vm->poll_timer, g_source_remove);
    g_clear_handle_id(&vm->cpu_timer, g_source_remove);
    if (vm->user_cancel) {
        g_source_destroy(vm->user_cancel);
        g_clear_pointer(&vm->user_cancel, g_source_unref);
    }
    g_clear_pointer(&vm->qmp, sbx_qmp_free);
    /* QEMU first: the bridge exits by itself when QEMU goes, but we do not rely on it. */
    sbx_child_kill(vm->qemu, REAP_WAIT_MS);
    sbx_child_kill(vm->bridge, REAP_WAIT_MS);
    g_clear_pointer(&vm->qemu, sbx_child_free);
    g_clear_pointer(&vm->bridge, sbx_child_free);
    /* Anything left in the cgroup is killed; then the uid is free again: nothing runs as it. */
    g_clear_pointer(&vm->cgroup, sbx_cgroup_free);
    g_clear_pointer(&vm->jail, sbx_jail_free);
    if (vm->console)
        sbx_log_ring_finish(vm->console);
    if (vm->qemu_err)
        sbx_log_ring_finish(vm->qemu_err);
    if (vm->bridge_err)
        sbx_log_ring_finish(vm->bridge_err);
    if (vm->ready_fd >= 0)
        close(vm->ready_fd);
    vm->ready_fd = -1;
    if (vm->channel_fd >= 0)
        close(vm->channel_fd);
    vm->channel_fd = -1;
    /* Nameless: closing the last fd (QEMU's is gone with it) frees the RAM. */
    if (vm->ram_fd >= 0)
        close(vm->ram_fd);
    vm->ram_fd = -1;
    if (vm->state_fd >= 0)
        close(vm->state_fd);
    vm->state_fd = -1;
    vm->runtime_dir = NULL;
    g_clear_pointer(&vm->rundir, sbx_rundir_free);
}

/* "--- title ---\n<last lines>\n" if the log has anything. */
static void append_log(GString *out, const char *title, SbxLogRing *ring)
{
    g_autofree char *tail = NULL;

    if (!ring)
        return;
    sbx_log_ring_drain(ring);
    tail = sbx_log_ring_tail_lines(ring, DIAG_LINES);
    if (*tail)
        g_string_append_printf(out, "\n--- %s ---\n%s", title, tail);
}

char *sbx_vm_diagnostics(SbxVm *vm)
{
    GString *out = g_string_new(NULL);

    append_log(out, "QEMU stderr", vm->qemu_err);
    append_log(out, "bridge stderr", vm->bridge_err);
    append_log(out, "guest console (last lines)", vm->console);
    return g_string_free(out, FALSE);
}

void sbx_vm_fail_start(SbxVm *vm, GError *error)
{
    g_autofree char *diag = NULL;
    GTask *task;

    if (vm->state != VM_STARTING) {
        g_error_free(error);
        return;
    }
    /* After the teardown: the logs then hold everything the dying processes wrote. */
    sbx_vm_teardown(vm);
    diag = sbx_vm_diagnostics(vm);
    if (*diag) {
        GError *full = g_error_new(error->domain, error->code, "%s%s", error->message, diag);
        g_error_free(error);
        error = full;
    }
    task = g_steal_pointer(&vm->start);
    g_clear_object(&vm->start_cancel);
    /* Last: the callback may free @vm. */
    g_task_return_error(task, error);
    g_object_unref(task);
}

void sbx_vm_die(SbxVm *vm, const char *reason)
{
    g_autofree char *why = g_strdup(reason);
    SbxVmExitFunc func = vm->exit_func;

    if (vm->state != VM_RUNNING)
        return;
    sbx_vm_teardown(vm);
    vm->exit_func = NULL;
    /* Last: the handler may free @vm. */
    if (func)
        func(vm, why, vm->exit_data);
}

/* "QEMU exited with status 0 (guest-shutdown)". */
static char *exit_text(SbxVm *vm, const char *what, int status)
{
    g_autofree char *st = sbx_child_describe_status(status);

    if (vm->shutdown_reason && g_str_equal(what, "QEMU"))
        return g_strdup_printf("%s %s (%s)", what, st, vm->shutdown_reason);
    return g_strdup_printf("%s %s", what, st);
}

/* QEMU or the bridge is gone: the start fails, or the running VM dies. */
static void report_exit(SbxVm *vm, const char *text)
{
    if (vm->state == VM_STARTING)
        sbx_vm_fail_start(vm, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_EXITED,
                                          "%s while the VM was starting", text));
    else
        sbx_vm_die(vm, text);
}

static void report_qemu_exit(SbxVm *vm)
{
    g_autofree char *text = exit_text(vm, "QEMU", vm->qemu_status);

    g_clear_handle_id(&vm->qemu_exit_wait, g_source_remove);
    report_exit(vm, text);
}

static gboolean on_qemu_exit_wait(gpointer data)
{
    SbxVm *vm = data;

    vm->qemu_exit_wait = 0;
    report_qemu_exit(vm);
    return G_SOURCE_REMOVE;
}

void sbx_vm_on_qemu_exit(SbxChild *child, int status, gpointer data)
{
    SbxVm *vm = data;

    (void)child;
    vm->qemu_exited = TRUE;
    vm->qemu_status = status;
    if (vm->qmp && !sbx_qmp_is_broken(vm->qmp))
        vm->qemu_exit_wait = g_timeout_add(QEMU_EXIT_QMP_WAIT_MS, on_qemu_exit_wait, vm);
    else
        report_qemu_exit(vm);
}

static gboolean on_bridge_grace(gpointer data)
{
    SbxVm *vm = data;
    g_autofree char *text = g_steal_pointer(&vm->bridge_exit_text);

    vm->bridge_grace = 0;
    report_exit(vm, text);
    return G_SOURCE_REMOVE;
}

void sbx_vm_on_bridge_exit(SbxChild *child, int status, gpointer data)
{
    SbxVm *vm = data;

    (void)child;
    if (vm->bridge_detached) {
        /* Removed with the vsock device before a save; reap it, nothing ends. */
        g_clear_pointer(&vm->bridge, sbx_child_free);
        return;
    }
    g_free(vm->bridge_exit_text);
    vm->bridge_exit_text = exit_text(vm, "the vsock bridge", status);
    if (!vm->qemu) {
        on_bridge_grace(vm); /* no QEMU yet: nothing else to wait for */
        return;
    }
    vm->bridge_grace = g_timeout_add(BRIDGE_EXIT_GRACE_MS, on_bridge_grace, vm);
}

/* Run states after which the guest never runs again in this QEMU (QAPI RunState). */
static gboolean dead_run_state(const char *status)
{
    static const char *const dead[] = {"internal-error", "io-error", "guest-panicked", "shutdown"};

    for (guint i = 0; i < G_N_ELEMENTS(dead); i++)
        if (g_str_equal(status, dead[i]))
            return TRUE;
    return FALSE;
}

static void on_status_after_stop(GObject *source, GAsyncResult *res, gpointer data);

/* Ask @qmp (@vm's) why the guest stopped, unless a question is out already (then once more
 * after it). */
static void ask_status(SbxVm *vm, SbxQmp *qmp)
{
    if (vm->status_asked) {
        vm->stop_again = TRUE;
        return;
    }
    vm->status_asked = TRUE;
    sbx_qmp_execute_async(qmp, "query-status", NULL, 0, vm->life_cancel, on_status_after_stop, vm);
}

/* The answer to the query-status sent after a STOP event. */
static void on_status_after_stop(GObject *source, GAsyncResult *res, gpointer data)
{
    g_autoptr(GError) error = NULL;
    g_autofree char *json = sbx_qmp_execute_finish(NULL, res, &error);
    g_autoptr(cJSON) obj = NULL;
    const cJSON *status;
    SbxVm *vm = data;
    g_autofree char *why = NULL;

    (void)source;
    if (!json)
        return; /* cancelled (@vm may be gone), or QMP broke: that path reports */
    vm->status_asked = FALSE;
    if (vm->stop_again) { /* a STOP after our question: its answer may predate it */
        vm->stop_again = FALSE;
        ask_status(vm, vm->qmp);
    }
    obj = sbx_json_parse(json, strlen(json), SBX_JSON_DEPTH_MAX, NULL);
    status = cJSON_GetObjectItemCaseSensitive(obj, "status");
    if (!cJSON_IsString(status) || !dead_run_state(status->valuestring))
        return; /* a stop someone asked for (a snapshot): not our business */
    why = g_strdup_printf("QEMU stopped the guest: %s (see QEMU's stderr)", status->valuestring);
    if (vm->state == VM_STARTING)
        sbx_vm_fail_start(vm, g_error_new_literal(SBX_VM_ERROR, SBX_VM_ERROR_STOPPED, why));
    else
        sbx_vm_die(vm, why);
}

void sbx_vm_on_qmp_event(SbxQmp *qmp, const char *event, const char *data_json, gpointer data)
{
    SbxVm *vm = data;
    g_autoptr(cJSON) obj = NULL;
    const cJSON *reason;

    /*
     * QEMU does not exit on a KVM internal error or an I/O error: it stops the guest and
     * waits. Ask why it stopped, so such a VM fails now rather than at the boot deadline.
     */
    if (g_str_equal(event, "STOP")) {
        ask_status(vm, qmp);
        return;
    }
    sbx_vm_channel_on_event(vm, event, data_json);
    if (!g_str_equal(event, "SHUTDOWN") || vm->shutdown_reason)
        return;
    obj = sbx_json_parse(data_json, strlen(data_json), SBX_JSON_DEPTH_MAX, NULL);
    reason = cJSON_GetObjectItemCaseSensitive(obj, "reason");
    if (cJSON_IsString(reason) && strlen(reason->valuestring) <= 64)
        vm->shutdown_reason = sbx_log_sanitize(reason->valuestring, strlen(reason->valuestring));
}

void sbx_vm_on_qmp_broken(SbxQmp *qmp, const GError *error, gpointer data)
{
    SbxVm *vm = data;

    (void)qmp;
    /* EOF: QEMU is exiting; its exit watch reports why. Anything else (a timeout, garbage)
     * means QEMU is not sane: kill it. */
    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CLOSED)) {
        if (vm->qemu_exited)
            report_qemu_exit(vm); /* everything QEMU said has been read */
        return;
    }
    if (vm->state == VM_STARTING)
        sbx_vm_fail_start(
            vm, g_error_new(error->domain, error->code, "QEMU's monitor: %s", error->message));
    else
        sbx_vm_die(vm, error->message);
}

int sbx_vm_take_channel(SbxVm *vm)
{
    int fd = vm->channel_fd;

    vm->channel_fd = -1;
    return fd;
}

void sbx_vm_set_exit_handler(SbxVm *vm, SbxVmExitFunc func, gpointer user_data)
{
    vm->exit_func = func;
    vm->exit_data = user_data;
}

const char *sbx_vm_console_tail(SbxVm *vm)
{
    g_free(vm->tail);
    if (vm->console)
        sbx_log_ring_drain(vm->console);
    vm->tail = vm->console ? sbx_log_ring_text(vm->console) : g_strdup("");
    return vm->tail;
}

void sbx_vm_kill(SbxVm *vm)
{
    if (vm->state == VM_STARTING) {
        sbx_vm_fail_start(
            vm, g_error_new(G_IO_ERROR, G_IO_ERROR_CANCELLED, "the VM was killed while starting"));
        return;
    }
    if (vm->state != VM_DEAD)
        sbx_vm_teardown(vm);
}

static void on_qmp_done(GObject *source, GAsyncResult *res, gpointer data)
{
    g_autoptr(GTask) task = data;
    GError *error = NULL;
    char *json = sbx_qmp_execute_finish(NULL, res, &error);

    (void)source;
    if (json)
        g_task_return_pointer(task, json, g_free);
    else
        g_task_return_error(task, error);
}

void sbx_vm_qmp_execute_async(SbxVm *vm, const char *command, const char *args_json,
                              guint timeout_ms, GCancellable *cancellable,
                              GAsyncReadyCallback callback, gpointer user_data)
{
    GTask *task = g_task_new(NULL, cancellable, callback, user_data);

    if (vm->state != VM_RUNNING || !vm->qmp) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CLOSED, "the VM is not running");
        g_object_unref(task);
        return;
    }
    /* Through our own task: the QMP object may be gone (VM killed) when the answer comes. */
    sbx_qmp_execute_async(vm->qmp, command, args_json, timeout_ms, NULL, on_qmp_done, task);
}

char *sbx_vm_qmp_execute_finish(SbxVm *vm, GAsyncResult *result, GError **error)
{
    (void)vm;
    return g_task_propagate_pointer(G_TASK(result), error);
}

void sbx_vm_connect_port_async(SbxVm *vm, guint32 port, guint timeout_ms, GCancellable *cancellable,
                               GAsyncReadyCallback callback, gpointer user_data)
{
    if (vm->state != VM_RUNNING) {
        GTask *task = g_task_new(NULL, cancellable, callback, user_data);
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CLOSED, "the VM is not running");
        g_object_unref(task);
        return;
    }
    sbx_vm_channel_connect_async(vm, port, timeout_ms, cancellable, callback, user_data);
}

int sbx_vm_connect_port_finish(SbxVm *vm, GAsyncResult *result, GError **error)
{
    (void)vm;
    if (g_task_get_source_tag(G_TASK(result)) != sbx_vm_channel_connect_async) {
        g_task_propagate_pointer(G_TASK(result), error); /* "not running" */
        return -1;
    }
    return sbx_vm_channel_connect_finish(result, error);
}

GPid sbx_vm_qemu_pid(SbxVm *vm)
{
    return vm->qemu ? sbx_child_program_pid(vm->qemu) : 0;
}

GPid sbx_vm_bridge_pid(SbxVm *vm)
{
    return vm->bridge ? sbx_child_program_pid(vm->bridge) : 0;
}

const char *sbx_vm_runtime_dir(SbxVm *vm)
{
    return vm->runtime_dir;
}

gint64 sbx_vm_boot_us(SbxVm *vm)
{
    return vm->boot_us;
}

SbxAccel sbx_vm_accel(SbxVm *vm)
{
    return vm->accel;
}

guint32 sbx_vm_guest_cid(SbxVm *vm)
{
    return vm->cid;
}

void sbx_vm_free(SbxVm *vm)
{
    GTask *task;

    if (!vm)
        return;
    task = g_steal_pointer(&vm->start);
    if (vm->state != VM_DEAD && vm->state != VM_NEW)
        sbx_vm_teardown(vm);
    g_clear_object(&vm->start_cancel);
    g_clear_object(&vm->life_cancel);
    g_clear_pointer(&vm->console, sbx_log_ring_free);
    g_clear_pointer(&vm->qemu_err, sbx_log_ring_free);
    g_clear_pointer(&vm->bridge_err, sbx_log_ring_free);
    g_free(vm->runtime_parent);
    g_free(vm->vhost_user_path);
    g_free(vm->uds_path);
    g_free(vm->serial_path);
    g_free(vm->tail);
    g_free(vm->shutdown_reason);
    g_free(vm->bridge_exit_text);
    g_free(vm);
    /* A start still in progress ends now; its callback must not touch the freed VM. */
    if (task) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CANCELLED,
                                "the VM was freed while starting");
        g_object_unref(task);
    }
}

gboolean sbx_vm_restored(SbxVm *vm)
{
    return vm->snapshot != NULL;
}

void sbx_vm_restore_times(SbxVm *vm, SbxVmRestoreTimes *out)
{
    *out = vm->restore_times;
}

void sbx_vm_set_template(SbxVm *vm)
{
    g_assert(vm->state == VM_NEW && !vm->snapshot);
    vm->template_vm = TRUE;
}

int sbx_vm_ram_fd(SbxVm *vm)
{
    return vm->ram_fd;
}

void sbx_vm_detach_bridge(SbxVm *vm)
{
    vm->bridge_detached = TRUE;
}
