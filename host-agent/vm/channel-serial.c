/*
 * virtio-serial: the agent's port (SBX_SERIAL_PORT_NAME) on a socket QEMU listens on, in the
 * VM's private runtime dir. One stream, no connections of its own, so the host follows the
 * guest's side through QMP: VSERPORT_CHANGE {open} says the guest opened or closed the port.
 *
 * The agent opens the port when it is ready, and after every host connection closes and
 * reopens it (guest-image/agent/serial.c). So "the port was opened again since our last
 * connection" means: the agent saw the end of the previous connection and waits for a new
 * one. A connect waits for that (bounded), then connects to QEMU's socket; a connection made
 * earlier would be read as the rest of the old one. QEMU throttles VSERPORT_CHANGE to one per
 * second per port, keeping the latest: a reopen can be seen up to ~1 s late, never lost.
 */
#include "channel.h"

#include <cJSON.h>

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/jsonfile.h"
#include "protocol/json.h"
#include "protocol/limits.h"
#include "qemu.h"

/* How often a connect looks at the port's state while it waits: host-side only, cheap. */
#define SERIAL_WAIT_POLL_MS 2

typedef struct {
    SbxVm *vm;
    GCancellable *life; /* the VM's: cancelled by its teardown, so @vm is not used after */
    gint64 deadline;
    guint timer;
} Wait;

gboolean sbx_vm_serial_prepare(SbxVm *vm, GError **error)
{
    (void)error;
    /* Fits: make_runtime_dir() checked the longer vhost-user.sock name against sun_path. */
    vm->serial_path = g_build_filename(vm->runtime_dir, "agent.sock", NULL);
    return TRUE;
}

void sbx_vm_serial_on_event(SbxVm *vm, const char *data_json)
{
    g_autoptr(cJSON) obj = sbx_json_parse(data_json, strlen(data_json), SBX_JSON_DEPTH_MAX, NULL);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(obj, "id");
    const cJSON *open = cJSON_GetObjectItemCaseSensitive(obj, "open");

    if (!cJSON_IsString(id) || !g_str_equal(id->valuestring, SBX_QEMU_SERIAL_PORT_ID) ||
        !cJSON_IsBool(open))
        return;
    /*
     * After loading the state QEMU reports each port's saved state once, at the first tick of
     * the resumed guest (virtio-serial-bus.c, virtio_serial_post_load_timer_cb ->
     * set_guest_connected): an "open" that is no reopen. Counted, it would let the next
     * connection in before the agent saw the end of the current one. It is the first event
     * after the restore (no connection can have ended before it); anything else first means
     * it does not come.
     */
    if (vm->serial_restore_echo) {
        vm->serial_restore_echo = FALSE;
        if (cJSON_IsTrue(open) && vm->serial_open)
            return;
    }
    vm->serial_open = cJSON_IsTrue(open);
    if (vm->serial_open)
        vm->serial_opens++;
}

static int connect_unix(const char *path, GError **error)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_strlcpy(addr.sun_path, path, sizeof addr.sun_path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        g_set_error(error, G_IO_ERROR,
                    e == ENOENT || e == ECONNREFUSED ? G_IO_ERROR_CONNECTION_REFUSED
                                                     : g_io_error_from_errno(e),
                    "connecting to QEMU's virtio-serial socket %s: %s", path, g_strerror(e));
        return -1;
    }
    return fd;
}

static void fd_box_free(gpointer data)
{
    close(GPOINTER_TO_INT(data) - 1);
}

static void wait_free(Wait *w)
{
    g_clear_handle_id(&w->timer, g_source_remove);
    g_object_unref(w->life);
    g_free(w);
}

/* TRUE when the task is over (returned). */
static gboolean wait_step(GTask *task, Wait *w)
{
    GError *error = NULL;
    SbxVm *vm = w->vm;
    int fd;

    if (g_cancellable_is_cancelled(w->life)) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_CLOSED, "the VM is gone");
        return TRUE;
    }
    if (g_task_return_error_if_cancelled(task))
        return TRUE;
    if (vm->serial_open && vm->serial_opens > vm->serial_used) {
        fd = connect_unix(vm->serial_path, &error);
        if (fd < 0) {
            g_task_return_error(task, error);
            return TRUE;
        }
        vm->serial_used = vm->serial_opens;
        g_task_return_pointer(task, GINT_TO_POINTER(fd + 1), fd_box_free);
        return TRUE;
    }
    if (g_get_monotonic_time() >= w->deadline) {
        g_task_return_new_error(task, G_IO_ERROR, G_IO_ERROR_TIMED_OUT,
                                "the guest agent has not opened its virtio-serial port %s%s",
                                SBX_SERIAL_PORT_NAME,
                                vm->serial_used ? " again since the last connection" : "");
        return TRUE;
    }
    return FALSE;
}

static gboolean on_wait_timer(gpointer data)
{
    GTask *task = data;
    Wait *w = g_task_get_task_data(task);

    if (!wait_step(task, w))
        return G_SOURCE_CONTINUE;
    w->timer = 0;
    g_object_unref(task);
    return G_SOURCE_REMOVE;
}

void sbx_vm_serial_connect(SbxVm *vm, GTask *task, guint timeout_ms)
{
    Wait *w = g_new0(Wait, 1);

    w->vm = vm;
    w->life = g_object_ref(vm->life_cancel);
    w->deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    g_task_set_task_data(task, w, (GDestroyNotify)wait_free);
    if (wait_step(task, w)) {
        g_object_unref(task);
        return;
    }
    w->timer = g_timeout_add(SERIAL_WAIT_POLL_MS, on_wait_timer, task);
}
