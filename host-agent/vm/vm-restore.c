/*
 * The restore half of a VM start (docs/snapshot.md), after QEMU (started with -incoming defer,
 * without a vsock device) answered the QMP handshake:
 *   x-ignore-shared on -> migrate-incoming exec:cat state.bin -> poll query-migrate until
 *   completed -> chardev-add (client of the bridge, which is already READY) -> device_add
 *   vhost-user-vsock-pci on the free root port -> cont -> probe the agent (vm-start.c).
 * The vsock device is plugged while the guest is paused; the guest sees it when it resumes.
 * Every QMP command has a timeout and the boot deadline covers the whole chain.
 */
#include "vm-private.h"

#include <cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "base/jsonfile.h"
#include "channel.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "qemu.h"
#include "ramfile.h"

/* Between query-migrate polls: the state (~0.3 MB with x-ignore-shared) loads in ~5-10 ms. */
#define MIGRATE_POLL_MS 2

typedef void (*StepFunc)(SbxVm *vm, const char *ret_json);

typedef struct {
    SbxVm *vm;
    StepFunc next;
    const char *what;
} Step;

static gint64 since_spawn(SbxVm *vm)
{
    return g_get_monotonic_time() - vm->qemu_start_us;
}

static void on_step_done(GObject *src, GAsyncResult *res, gpointer data)
{
    Step *step = data;
    GError *error = NULL;
    g_autofree char *ret = sbx_qmp_execute_finish(NULL, res, &error);
    SbxVm *vm = step->vm;
    StepFunc next = step->next;
    const char *what = step->what;

    (void)src;
    g_free(step);
    if (!ret) {
        /* Cancelled: the start ended and @vm may be gone. */
        if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
            g_error_free(error);
            return;
        }
        g_prefix_error(&error, "restoring the snapshot: %s: ", what);
        sbx_vm_fail_start(vm, error);
        return;
    }
    next(vm, ret);
}

static void run(SbxVm *vm, const char *command, const char *args_json, StepFunc next)
{
    Step *step = g_new0(Step, 1);

    step->vm = vm;
    step->next = next;
    step->what = command;
    sbx_qmp_execute_async(vm->qmp, command, args_json, 0, vm->start_cancel, on_step_done, step);
}

static void on_running(SbxVm *vm, const char *ret)
{
    (void)ret;
    vm->restore_times.resumed = since_spawn(vm);
    sbx_vm_probe(vm);
}

static void on_device_added(SbxVm *vm, const char *ret)
{
    (void)ret;
    vm->restore_times.plugged = since_spawn(vm);
    run(vm, "cont", NULL, on_running);
}

static void on_chardev_added(SbxVm *vm, const char *ret)
{
    g_autoptr(cJSON) args = cJSON_CreateObject();
    g_auto(GStrv) opts = g_strsplit(sbx_qemu_vsock_driver(), ",", -1);

    (void)ret;
    /* "driver,key=value,..." from qemu.c, so the plugged device equals the template's. */
    cJSON_AddStringToObject(args, "driver", opts[0]);
    for (guint i = 1; opts[i]; i++) {
        char *eq = strchr(opts[i], '=');
        g_assert(eq);
        *eq = '\0';
        cJSON_AddStringToObject(args, opts[i], eq + 1);
    }
    cJSON_AddStringToObject(args, "id", SBX_QEMU_VSOCK_ID);
    cJSON_AddStringToObject(args, "chardev", "vsock");
    g_autofree char *text = sbx_json_print(args);
    run(vm, "device_add", text, on_device_added);
}

/* The migration finished: give the guest its vsock device, still paused. */
static void plug_vsock(SbxVm *vm)
{
    g_autoptr(cJSON) args = cJSON_CreateObject();
    cJSON *backend = cJSON_AddObjectToObject(args, "backend");
    cJSON *data, *addr, *addr_data;

    vm->restore_times.state_done = since_spawn(vm);
    cJSON_AddStringToObject(args, "id", "vsock");
    cJSON_AddStringToObject(backend, "type", "socket");
    data = cJSON_AddObjectToObject(backend, "data");
    addr = cJSON_AddObjectToObject(data, "addr");
    cJSON_AddStringToObject(addr, "type", "unix");
    addr_data = cJSON_AddObjectToObject(addr, "data");
    cJSON_AddStringToObject(addr_data, "path", vm->vhost_user_path);
    cJSON_AddBoolToObject(data, "server", FALSE);
    g_autofree char *text = sbx_json_print(args);
    run(vm, "chardev-add", text, on_chardev_added);
}

static void poll_migration(SbxVm *vm);

static gboolean on_poll_timer(gpointer data)
{
    SbxVm *vm = data;

    vm->poll_timer = 0;
    poll_migration(vm);
    return G_SOURCE_REMOVE;
}

static void on_migrate_status(SbxVm *vm, const char *ret)
{
    g_autoptr(cJSON) obj = sbx_json_parse(ret, strlen(ret), SBX_JSON_DEPTH_MAX, NULL);
    const cJSON *status = cJSON_GetObjectItemCaseSensitive(obj, "status");
    const char *s = cJSON_IsString(status) ? status->valuestring : "";

    if (g_str_equal(s, "completed")) {
        if (sbx_vm_channel_is_bridge(vm)) {
            plug_vsock(vm);
            return;
        }
        /* The channel's device came with the state: continue at once. */
        vm->restore_times.state_done = vm->restore_times.plugged = since_spawn(vm);
        sbx_vm_channel_restored(vm);
        run(vm, "cont", NULL, on_running);
    } else if (g_str_equal(s, "failed") || g_str_equal(s, "cancelled")) {
        const cJSON *why = cJSON_GetObjectItemCaseSensitive(obj, "error-desc");
        sbx_vm_fail_start(vm, g_error_new(SBX_VM_ERROR, SBX_VM_ERROR_SNAPSHOT,
                                          "restoring the snapshot %s: loading the state %s%s%s",
                                          sbx_snapshot_dir(vm->snapshot), s,
                                          cJSON_IsString(why) ? ": " : "",
                                          cJSON_IsString(why) ? why->valuestring : ""));
    } else {
        /* setup / active / none yet: the boot deadline bounds the wait. */
        vm->poll_timer = g_timeout_add(MIGRATE_POLL_MS, on_poll_timer, vm);
    }
}

static void poll_migration(SbxVm *vm)
{
    run(vm, "query-migrate", NULL, on_migrate_status);
}

static void on_incoming(SbxVm *vm, const char *ret)
{
    (void)ret;
    poll_migration(vm);
}

static void load_state(SbxVm *vm)
{
    if (sbx_vm_prestart_hold(vm))
        return; /* a pre-started VM waits here (vm-prestart.c) */
    sbx_vm_restore_load_state(vm);
}

void sbx_vm_restore_load_state(SbxVm *vm)
{
    /* QEMU's fd 6 is state.bin, opened read-only by us (vm-start.c): no exec: under the
     * -sandbox's spawn=deny, and the jail does not see the snapshot directory. */
    run(vm, "migrate-incoming", "{\"uri\":\"fd:" G_STRINGIFY(SBX_QEMU_STATE_FD) "\"}", on_incoming);
}

static void on_caps(SbxVm *vm, const char *ret)
{
    (void)ret;
    if (vm->ram_copied)
        load_state(vm);
    else
        vm->ram_wanted = TRUE; /* on_ram_copied() goes on */
}

/* The worker: its own fds, so a teardown (which closes vm->ram_fd) cannot pull one away. */
typedef struct {
    int fd;
    char *src;
} CopyJob;

static void copy_job_free(gpointer data)
{
    CopyJob *job = data;

    close(job->fd);
    g_free(job->src);
    g_free(job);
}

static void copy_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancellable)
{
    CopyJob *job = data;
    GError *error = NULL;

    (void)source;
    (void)cancellable;
    if (sbx_ramfile_fill(job->fd, job->src, &error))
        g_task_return_boolean(task, TRUE);
    else
        g_task_return_error(task, error);
}

static void on_ram_copied(GObject *src, GAsyncResult *res, gpointer data)
{
    GTask *task = G_TASK(res);
    GError *error = NULL;
    SbxVm *vm = data;

    (void)src;
    /* The start's cancellable: cancelled by every teardown, before @vm can be freed. */
    if (g_cancellable_is_cancelled(g_task_get_cancellable(task)))
        return;
    if (!g_task_propagate_boolean(task, &error)) {
        sbx_vm_fail_start(vm, error);
        return;
    }
    /* Sealed before the guest runs a single instruction (the state loads after this). */
    if (vm->ram_seal && !sbx_ramfile_seal(vm->ram_fd, &error)) {
        sbx_vm_fail_start(vm, error);
        return;
    }
    if (vm->ram_seal)
        sbx_snapshot_keep_shared_ram(vm->snapshot, vm->ram_fd);
    vm->ram_copied = TRUE;
    if (vm->ram_wanted)
        load_state(vm);
}

void sbx_vm_restore_copy_ram(SbxVm *vm)
{
    CopyJob *job = g_new0(CopyJob, 1);
    GTask *task = g_task_new(NULL, vm->start_cancel, on_ram_copied, vm);

    job->fd = fcntl(vm->ram_fd, F_DUPFD_CLOEXEC, 3);
    job->src = g_strdup(sbx_snapshot_ram_path(vm->snapshot));
    g_task_set_task_data(task, job, copy_job_free);
    /* Not cancelled midway: the copy is short, and its result is ignored once cancelled. */
    g_task_set_return_on_cancel(task, FALSE);
    g_task_run_in_thread(task, copy_thread);
    g_object_unref(task);
}

void sbx_vm_restore_begin(SbxVm *vm)
{
    /* The RAM is the file QEMU mapped (share=on): the stream must neither carry nor expect it. */
    run(vm, "migrate-set-capabilities",
        "{\"capabilities\":[{\"capability\":\"x-ignore-shared\",\"state\":true}]}", on_caps);
}
