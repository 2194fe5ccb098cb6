/*
 * The channel to the guest agent, per attachment (the profile's "channel"): how a VM opens one
 * stream to the agent, what it needs before QEMU starts, and what a snapshot must do with it.
 * Dispatch in channel.c; virtio-serial in channel-serial.c; the kernel's vhost-vsock in
 * channel-kernel.c; the bridge's vsock is hvsock.c (+ vm-start.c spawning the bridge).
 * Internal to host-agent/vm.
 */
#pragma once

#include <gio/gio.h>

#include "vm-private.h"

/** Whether @vm's channel is vsock through the bridge (which then runs beside QEMU). */
gboolean sbx_vm_channel_is_bridge(const SbxVm *vm);

/** Before QEMU starts: socket paths, a guest CID, the host device the channel needs. */
gboolean sbx_vm_channel_prepare(SbxVm *vm, GError **error);

/**
 * One attempt to open a stream to the agent (guest port @port where the channel has ports),
 * within @timeout_ms. G_IO_ERROR_CONNECTION_REFUSED or G_IO_ERROR_TIMED_OUT while the agent
 * does not listen yet. Completes on the main loop; the VM may be freed meanwhile (then the
 * callback gets an error and must not use it).
 */
void sbx_vm_channel_connect_async(SbxVm *vm, guint32 port, guint timeout_ms,
                                  GCancellable *cancellable, GAsyncReadyCallback callback,
                                  gpointer user_data);
/** The connected fd (blocking, close-on-exec, caller owns it) or -1 with @error. */
int sbx_vm_channel_connect_finish(GAsyncResult *result, GError **error);

/** A QMP event (virtio-serial follows the guest opening and closing its port). */
void sbx_vm_channel_on_event(SbxVm *vm, const char *event, const char *data_json);

/** A restore loaded the state: the channel is as it was saved (the agent's port open). */
void sbx_vm_channel_restored(SbxVm *vm);

/*
 * Before a save (snapshot.c), once the host closed its channel: TRUE when the agent has seen
 * the close, so that no byte of the old connection is in flight and the agent waits for a new
 * one in every clone. Always TRUE for the vsock channels (vsock connections are reset anyway).
 */
gboolean sbx_vm_channel_quiesced(SbxVm *vm);

/* virtio-serial (channel-serial.c) */
gboolean sbx_vm_serial_prepare(SbxVm *vm, GError **error);
void sbx_vm_serial_connect(SbxVm *vm, GTask *task, guint timeout_ms);
void sbx_vm_serial_on_event(SbxVm *vm, const char *data_json);

/* vhost-vsock (channel-kernel.c) */
gboolean sbx_vm_kernel_prepare(SbxVm *vm, GError **error);
void sbx_vm_kernel_connect(SbxVm *vm, GTask *task, guint32 port, guint timeout_ms);
/** A CID for a new VM: random, as CIDs of the kernel's vsock are unique host-wide. */
guint32 sbx_vm_kernel_pick_cid(void);
