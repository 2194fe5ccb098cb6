/*
 * Host side of the "hybrid vsock" convention (Firecracker's, spoken by the bridge): connect to
 * the bridge's Unix socket, write "CONNECT <port>\n", read "OK <hostport>\n"; from then on the
 * socket is a stream to the guest's port. If nothing listens on that port in the guest, the
 * bridge closes the socket without an answer. Internal to host-agent/vm.
 */
#pragma once

#include <gio/gio.h>

/*
 * One connection attempt to guest port @port through the bridge socket @uds_path, answered
 * within @timeout_ms. Errors: G_IO_ERROR_CONNECTION_REFUSED when the guest has no listener
 * (yet), G_IO_ERROR_NOT_FOUND when the bridge socket does not exist, G_IO_ERROR_TIMED_OUT,
 * SBX_VM_ERROR_BRIDGE for an answer that is not "OK <n>\n".
 */
void sbx_hvsock_connect_async(const char *uds_path, guint32 port, guint timeout_ms,
                              GCancellable *cancellable, GAsyncReadyCallback callback,
                              gpointer user_data);

/** The connected socket (blocking mode, close-on-exec; caller owns it), or -1 with @error. */
int sbx_hvsock_connect_finish(GAsyncResult *result, GError **error);
