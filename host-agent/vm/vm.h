/*
 * A VM: one QEMU process plus, when the profile's channel is vsock-bridge, its vsock bridge
 * process, a private runtime directory for their sockets, and the channel to the guest agent
 * (vsock through the bridge or the kernel, or a virtio-serial port: docs/snapshot.md "Channel
 * attachments"). Owned by the GLib main thread.
 *
 * Lifecycle: sbx_vm_new() -> sbx_vm_start_async() (spawns the bridge, waits for it to be ready,
 * spawns QEMU, connects QMP, waits until the guest agent accepts a vsock connection) ->
 * sbx_vm_take_channel() -> ... -> sbx_vm_free() (kills and reaps both processes, removes the
 * runtime directory). Nothing outlives the SbxVm: not a process, not a socket, not a file.
 * The children also get PR_SET_PDEATHSIG, so they die if the host agent itself dies.
 */
#pragma once

#include <gio/gio.h>
#include <glib.h>

#include "image.h"
#include "profile.h"
#include "snapshot.h"
#include "vm-error.h"

typedef struct SbxVm SbxVm;

typedef struct {
    /* Where the per-VM runtime dir is made; NULL = $XDG_RUNTIME_DIR or /tmp. */
    const char *runtime_parent;
    guint32 guest_cid;          /* 0 = pick one (>= 3) */
    guint boot_timeout_ms;      /* QEMU start to agent accepting; 0 = default (60 s under TCG) */
    gboolean console_to_stderr; /* copy the guest console (bounded) to our stderr: --debug */
    /*
     * Restore from this snapshot (made for the same profile and image; must outlive the
     * start) instead of booting: docs/snapshot.md. NULL = cold boot.
     */
    const SbxSnapshot *snapshot;
} SbxVmOptions;

/** Where the time of a restore went, in microseconds from QEMU's spawn (0 = not reached). */
typedef struct {
    gint64 total;      /* sbx_vm_start_async() to the agent ready: restore-to-ready */
    gint64 spawn;      /* sbx_vm_start_async() to QEMU's spawn (RAM copy, bridge READY) */
    gint64 qmp_ready;  /* QMP handshake done: QEMU started */
    gint64 state_done; /* device state loaded (migration completed) */
    gint64 plugged;    /* vsock chardev + device added */
    gint64 resumed;    /* `cont` answered: the guest runs */
    gint64 ready;      /* the agent accepted the channel */
} SbxVmRestoreTimes;

/** Create a VM description; nothing is started. @profile and @image must outlive the VM. */
SbxVm *sbx_vm_new(const SbxProfile *profile, const SbxImage *image, const SbxVmOptions *opts);

/**
 * Start the VM. Completes (on the main loop) once the guest agent accepted a connection on
 * SBX_AGENT_PORT (virtio-serial: once the host is connected to the port the agent opened), or
 * with an error (and then everything started is already torn down).
 * Errors carry the tail of QEMU's stderr, the bridge's stderr and the guest console.
 * If the VM is freed while starting, the callback gets G_IO_ERROR_CANCELLED and must not use
 * @vm (it is gone). Call from the thread that owns the main context (PR_SET_PDEATHSIG is
 * per thread).
 */
void sbx_vm_start_async(SbxVm *vm, GCancellable *cancellable, GAsyncReadyCallback callback,
                        gpointer user_data);
gboolean sbx_vm_start_finish(SbxVm *vm, GAsyncResult *result, GError **error);

/**
 * The connected stream to the guest agent (a socket fd; ownership passes to the caller): the
 * same kind of fd whatever the profile's channel (vsock through the bridge or the kernel, or
 * QEMU's virtio-serial socket).
 * Valid once after a successful start; -1 otherwise. The fd is in blocking mode and
 * close-on-exec. The agent closes it unless `hello` arrives within 5 s of the start completing.
 */
int sbx_vm_take_channel(SbxVm *vm);

/**
 * Called at most once if QEMU exits while the VM is running (guest poweroff, crash, killed).
 * Not called for exits caused by sbx_vm_free().
 */
typedef void (*SbxVmExitFunc)(SbxVm *vm, const char *reason, gpointer user_data);
void sbx_vm_set_exit_handler(SbxVm *vm, SbxVmExitFunc func, gpointer user_data);

/** The last bytes of the guest console (bounded ring), for error reports. Never NULL. */
const char *sbx_vm_console_tail(SbxVm *vm);

/** Kill QEMU and the bridge now (SIGKILL), reap them, remove the runtime dir. Idempotent. */
void sbx_vm_kill(SbxVm *vm);

/*
 * Additions beyond the lead's API (used by tests, the CLI's --debug and the snapshot code).
 */

/**
 * Run a QMP command on the running VM (see qmp.h): @args_json is a JSON object text or NULL,
 * @timeout_ms 0 = 5 s. A command that times out kills the VM (the exit handler runs): a
 * monitor that stops answering means QEMU is stuck (shared/FINDINGS.md).
 */
void sbx_vm_qmp_execute_async(SbxVm *vm, const char *command, const char *args_json,
                              guint timeout_ms, GCancellable *cancellable,
                              GAsyncReadyCallback callback, gpointer user_data);
/** The command's "return" value as compact JSON text (caller frees), or NULL with @error. */
char *sbx_vm_qmp_execute_finish(SbxVm *vm, GAsyncResult *result, GError **error);

/**
 * Open another stream to guest vsock port @port (one attempt, answered within @timeout_ms).
 * G_IO_ERROR_CONNECTION_REFUSED if nothing listens there. On a virtio-serial VM there is one
 * stream and @port is ignored: it waits (within @timeout_ms; G_IO_ERROR_TIMED_OUT) until the
 * agent has reopened its port since the last connection (it saw that connection end).
 */
void sbx_vm_connect_port_async(SbxVm *vm, guint32 port, guint timeout_ms, GCancellable *cancellable,
                               GAsyncReadyCallback callback, gpointer user_data);
/** The connected socket fd (blocking, close-on-exec, caller owns it) or -1 with @error. */
int sbx_vm_connect_port_finish(SbxVm *vm, GAsyncResult *result, GError **error);

/**
 * PIDs of QEMU and of the bridge while they run, as the host sees them (in the jail each is
 * pid 1 of its own namespaces, under bubblewrap); 0 when not running.
 */
GPid sbx_vm_qemu_pid(SbxVm *vm);
GPid sbx_vm_bridge_pid(SbxVm *vm);

/** The private runtime directory (sockets) while the VM exists; NULL before start/after kill. */
const char *sbx_vm_runtime_dir(SbxVm *vm);

/** Microseconds from QEMU's spawn to the agent accepting the channel; 0 if not started. */
gint64 sbx_vm_boot_us(SbxVm *vm);

/**
 * Pre-started restore (vm-prestart.c): call before sbx_vm_start_async() on a VM made with a
 * snapshot. The start then holds before the state load (QEMU spawned with -incoming defer, QMP
 * connected, the RAM copied) until sbx_vm_prestart_resume(); the start's callback comes once the
 * restore is complete (or failed, also while held: QEMU exited...).
 */
void sbx_vm_set_prestart(SbxVm *vm);

/** Go on with a pre-started restore (held or still on its way to the hold). */
void sbx_vm_prestart_resume(SbxVm *vm);

/** A pre-started VM waiting at the hold. */
gboolean sbx_vm_prestart_is_held(SbxVm *vm);

/**
 * An execution begins on the running VM (vm-cpu.c, docs/vm.md "CPU policy"): its cgroup gets the
 * default CPU weight back, lowered again if this execution is still running after the burst
 * ($SANDBOX_CPU_BURST_MS, default 1 s). No-op without a cgroup cpu controller or with a burst
 * of 0. Call it when the run request is sent, on every VM (pooled or not).
 */
void sbx_vm_execution_begin(SbxVm *vm);

/** Whether the VM's execution is past its burst (its CPU weight lowered). For tests. */
gboolean sbx_vm_cpu_demoted(SbxVm *vm);

/** Whether the VM was restored from a snapshot (TRUE) or cold-booted. */
gboolean sbx_vm_restored(SbxVm *vm);

/** The phases of a restore (all 0 for a cold boot or before the start completed). */
void sbx_vm_restore_times(SbxVm *vm, SbxVmRestoreTimes *out);

/** The resolved accelerator and guest CID (valid once the start began). */
SbxAccel sbx_vm_accel(SbxVm *vm);
guint32 sbx_vm_guest_cid(SbxVm *vm);

/** sbx_vm_kill() then free. Accepts NULL. */
void sbx_vm_free(SbxVm *vm);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxVm, sbx_vm_free)
