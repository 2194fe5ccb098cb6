/*
 * The channel to the guest agent: dispatch per attachment (channel.h). Every attachment ends
 * in the same thing, a connected stream fd, which the session uses without knowing how it
 * was made.
 */
#include "channel.h"

#include <unistd.h>

#include "hvsock.h"
#include "profile-private.h"

gboolean sbx_vm_channel_is_bridge(const SbxVm *vm)
{
    return vm->profile->channel == SBX_CHANNEL_VSOCK_BRIDGE;
}

gboolean sbx_vm_channel_prepare(SbxVm *vm, GError **error)
{
    switch (vm->profile->channel) {
    case SBX_CHANNEL_VIRTIO_SERIAL:
        return sbx_vm_serial_prepare(vm, error);
    case SBX_CHANNEL_VSOCK_KERNEL:
        return sbx_vm_kernel_prepare(vm, error);
    default:
        return TRUE; /* the bridge's paths are made with the runtime dir (vm-start.c) */
    }
}

static void fd_box_free(gpointer data)
{
    close(GPOINTER_TO_INT(data) - 1);
}

static void on_hvsock(GObject *src, GAsyncResult *res, gpointer data)
{
    GTask *task = data;
    GError *error = NULL;
    int fd = sbx_hvsock_connect_finish(res, &error);

    (void)src;
    if (fd < 0)
        g_task_return_error(task, error);
    else
        g_task_return_pointer(task, GINT_TO_POINTER(fd + 1), fd_box_free);
    g_object_unref(task);
}

void sbx_vm_channel_connect_async(SbxVm *vm, guint32 port, guint timeout_ms,
                                  GCancellable *cancellable, GAsyncReadyCallback callback,
                                  gpointer user_data)
{
    GTask *task = g_task_new(NULL, cancellable, callback, user_data);

    g_task_set_source_tag(task, sbx_vm_channel_connect_async);
    switch (vm->profile->channel) {
    case SBX_CHANNEL_VIRTIO_SERIAL:
        sbx_vm_serial_connect(vm, task, timeout_ms);
        break;
    case SBX_CHANNEL_VSOCK_KERNEL:
        sbx_vm_kernel_connect(vm, task, port, timeout_ms);
        break;
    default:
        sbx_hvsock_connect_async(vm->uds_path, port, timeout_ms, cancellable, on_hvsock, task);
        break;
    }
}

int sbx_vm_channel_connect_finish(GAsyncResult *result, GError **error)
{
    gpointer box = g_task_propagate_pointer(G_TASK(result), error);
    int fd;

    if (!box)
        return -1;
    /* Take the fd out of the box: the box's free function must not close it now. */
    fd = GPOINTER_TO_INT(box) - 1;
    return fd;
}

void sbx_vm_channel_on_event(SbxVm *vm, const char *event, const char *data_json)
{
    if (vm->profile->channel == SBX_CHANNEL_VIRTIO_SERIAL && g_str_equal(event, "VSERPORT_CHANGE"))
        sbx_vm_serial_on_event(vm, data_json);
}

void sbx_vm_channel_restored(SbxVm *vm)
{
    /* The template closed its connection and waited for the agent to reopen the port before
     * the save (sbx_vm_channel_quiesced): in every clone the port is open and unused. */
    if (vm->profile->channel == SBX_CHANNEL_VIRTIO_SERIAL) {
        vm->serial_open = TRUE;
        vm->serial_opens = vm->serial_used + 1;
        vm->serial_restore_echo = TRUE;
    }
}

gboolean sbx_vm_channel_quiesced(SbxVm *vm)
{
    if (vm->profile->channel != SBX_CHANNEL_VIRTIO_SERIAL)
        return TRUE;
    return vm->serial_open && vm->serial_opens > vm->serial_used;
}
