/*
 * The kernel's vhost-vsock (/dev/vhost-vsock): QEMU hands the virtqueues to the host kernel,
 * and the host connects an AF_VSOCK socket to the guest's CID and the agent's port. CIDs are
 * unique across the host (the kernel refuses a second VM with the same one), so each VM gets
 * a random one. After a restore QEMU's vhost-vsock sends the guest a transport reset event,
 * and the guest reads its CID again (docs/snapshot.md): a clone answers on its own CID.
 */
#include "channel.h"

#include <errno.h>
#include <glib-unix.h>
#include <sys/socket.h>
#include <unistd.h>
/* After sys/socket.h, which it needs. */
#include <linux/vm_sockets.h>

#define VHOST_VSOCK_DEV "/dev/vhost-vsock"

/* CIDs 0-2 are reserved; VMADDR_CID_ANY (-1U) and the top bit are avoided for clarity. */
#define CID_MIN 3u
#define CID_MAX 0x7fffffffu

typedef struct {
    int fd;
    guint io;
    guint timer;
} Attempt;

guint32 sbx_vm_kernel_pick_cid(void)
{
    return (guint32)g_random_int_range((gint32)CID_MIN, (gint32)CID_MAX);
}

gboolean sbx_vm_kernel_prepare(SbxVm *vm, GError **error)
{
    if (access(VHOST_VSOCK_DEV, R_OK | W_OK) < 0) {
        int e = errno;
        g_set_error(error, SBX_VM_ERROR, SBX_VM_ERROR_CONFIG,
                    "profile %s uses the channel vsock-kernel, but %s cannot be opened: %s "
                    "(load vhost_vsock, or use a profile with \"channel\": \"virtio-serial\")",
                    sbx_profile_name(vm->profile), VHOST_VSOCK_DEV, g_strerror(e));
        return FALSE;
    }
    return TRUE;
}

static void attempt_free(gpointer data)
{
    Attempt *a = data;

    g_clear_handle_id(&a->io, g_source_remove);
    g_clear_handle_id(&a->timer, g_source_remove);
    if (a->fd >= 0)
        close(a->fd);
    g_free(a);
}

static void fd_box_free(gpointer data)
{
    close(GPOINTER_TO_INT(data) - 1);
}

/* Finish with the connected socket or an error; drops the task's reference. */
static void finish(GTask *task, int err)
{
    Attempt *a = g_task_get_task_data(task);
    int fd = a->fd;

    a->io = a->timer = 0; /* both sources end with this call */
    if (err) {
        g_task_return_new_error(task, G_IO_ERROR,
                                err == ECONNREFUSED || err == ECONNRESET
                                    ? G_IO_ERROR_CONNECTION_REFUSED
                                    : g_io_error_from_errno(err),
                                "vsock connect: %s", g_strerror(err));
    } else {
        a->fd = -1;
        g_unix_set_fd_nonblocking(fd, FALSE, NULL);
        g_task_return_pointer(task, GINT_TO_POINTER(fd + 1), fd_box_free);
    }
    g_object_unref(task);
}

static gboolean on_writable(int fd, GIOCondition cond, gpointer data)
{
    GTask *task = data;
    Attempt *a = g_task_get_task_data(task);
    int err = 0;
    socklen_t len = sizeof err;

    (void)cond;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        err = errno;
    g_clear_handle_id(&a->timer, g_source_remove);
    a->io = 0;
    finish(task, err);
    return G_SOURCE_REMOVE;
}

static gboolean on_timeout(gpointer data)
{
    GTask *task = data;
    Attempt *a = g_task_get_task_data(task);

    g_clear_handle_id(&a->io, g_source_remove);
    a->timer = 0;
    finish(task, ETIMEDOUT);
    return G_SOURCE_REMOVE;
}

void sbx_vm_kernel_connect(SbxVm *vm, GTask *task, guint32 port, guint timeout_ms)
{
    struct sockaddr_vm addr = {.svm_family = AF_VSOCK, .svm_cid = vm->cid, .svm_port = port};
    Attempt *a = g_new0(Attempt, 1);

    g_task_set_task_data(task, a, attempt_free);
    a->fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (a->fd < 0) {
        finish(task, errno);
        return;
    }
    if (connect(a->fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
        finish(task, 0);
        return;
    }
    if (errno != EINPROGRESS) {
        finish(task, errno);
        return;
    }
    a->io = g_unix_fd_add(a->fd, G_IO_OUT | G_IO_ERR | G_IO_HUP, on_writable, task);
    a->timer = g_timeout_add(timeout_ms, on_timeout, task);
}
