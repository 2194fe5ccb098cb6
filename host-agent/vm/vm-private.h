/*
 * The state of a VM, shared by vm.c (public API, teardown, exits) and vm-start.c (the start
 * sequence). Internal to host-agent/vm.
 */
#pragma once

#include "base/child.h"
#include "base/logring.h"
#include "cgroup.h"
#include "jail.h"
#include "qmp.h"
#include "rundir.h"
#include "vm.h"

/* QEMU's fd for a restore's state.bin (read-only): migrate-incoming fd:6 (vm-restore.c). */
#define SBX_QEMU_STATE_FD 6

typedef enum {
    VM_NEW,      /* described, nothing started */
    VM_STARTING, /* sbx_vm_start_async() in progress */
    VM_RUNNING,  /* the channel to the agent exists */
    VM_DEAD,     /* killed or exited; everything torn down */
} VmState;

struct SbxVm {
    const SbxProfile *profile;
    const SbxImage *image;
    char *runtime_parent;
    guint32 cid;
    guint boot_timeout_ms;
    gboolean console_to_stderr;
    SbxAccel accel;

    VmState state;
    SbxRundir *rundir;       /* the runtime dir and its lock (rundir.h) */
    const char *runtime_dir; /* sbx_rundir_path(rundir) while it exists; NULL after */
    char *vhost_user_path;   /* the bridge's vhost-user socket (QEMU connects) */
    char *uds_path;          /* the bridge's hybrid-vsock socket (we connect) */
    SbxJail *jail;           /* QEMU's and the bridge's (jail.h); freed after both are gone */
    SbxCgroup *cgroup;       /* theirs too (cgroup.h): memory, pids, CPU weight; NULL if none */
    SbxChild *bridge;
    SbxChild *qemu;
    SbxLogRing *console;
    SbxLogRing *qemu_err;
    SbxLogRing *bridge_err;
    SbxQmp *qmp;
    int channel_fd;
    char *tail;            /* the last sbx_vm_console_tail() */
    char *shutdown_reason; /* from QEMU's SHUTDOWN event, e.g. "guest-shutdown" */
    /* One query-status in flight for STOP events at a time, one more if a STOP came while it
     * was: a QEMU flooding STOPs must not queue a command each (vm.c). */
    gboolean status_asked;
    gboolean stop_again;
    gint64 qemu_start_us;
    gint64 boot_us;
    GCancellable *life_cancel; /* our own QMP queries; cancelled at teardown */

    /* Snapshots (vm-restore.c, snapshot.c). */
    const SbxSnapshot *snapshot; /* restore from it */
    gboolean template_vm;        /* snapshot layout with vsock, RAM in ram_fd: to be saved */
    int ram_fd;                  /* nameless RAM file in /dev/shm; -1 = memfd RAM */
    int state_fd;                /* the snapshot's state.bin, read-only, QEMU's fd 6 (restore) */
    gboolean bridge_detached;    /* vsock removed for a save: the bridge's exit is expected */
    guint poll_timer;            /* query-migrate polling */
    SbxVmRestoreTimes restore_times;
    gint64 start_call_us; /* when sbx_vm_start_async() was called */
    /* The restore's RAM copy runs in a worker thread while the bridge and QEMU start; the
     * state load waits for it (virtio's state load reads the rings in guest RAM). */
    gboolean ram_copied;
    gboolean ram_wanted; /* the restore chain waits for the copy */
    gboolean ram_seal;   /* the copy is the snapshot's shared RAM: seal and keep it when done */
    /* Pre-started (vm-prestart.c): hold before the state load until resumed. */
    gboolean prestart_hold; /* hold when the state load is due */
    gboolean prestart_held; /* holding now */

    /* The CPU policy (vm-cpu.c): the burst from SANDBOX_CPU_BURST_MS (0 = off), the timer that
     * ends the current execution's, and whether the weight is lowered now. */
    guint cpu_burst_ms;
    guint cpu_timer;
    gboolean cpu_demoted;

    /* The channel to the agent beyond the bridge (channel*.c). virtio-serial: QEMU's socket,
     * whether the guest has the port open, how many times it opened it (VSERPORT_CHANGE), and
     * that count when we last connected. */
    char *serial_path;
    gboolean serial_open;
    guint serial_opens;
    guint serial_used;
    gboolean serial_restore_echo; /* a restore's own open event is still to come (skip it) */

    /* The start sequence (vm-start.c). */
    GTask *start;
    GCancellable *start_cancel; /* cancels our own async steps when the start ends */
    GSource *user_cancel;       /* watches the caller's cancellable */
    int ready_fd;               /* read end of the bridge's --ready-fd pipe */
    guint ready_watch;
    char ready_buf[16];
    gsize ready_got;
    guint step_timer; /* bridge READY timeout, then the boot deadline */
    guint retry_timer;

    guint bridge_grace; /* the bridge exited: wait briefly for QEMU's exit to report */
    char *bridge_exit_text;
    guint qemu_exit_wait; /* QEMU exited: wait briefly for the rest of its QMP output */
    gboolean qemu_exited;
    int qemu_status;

    SbxVmExitFunc exit_func;
    gpointer exit_data;
};

/** Kill and reap both children, close everything, remove the runtime dir; state -> DEAD. */
void sbx_vm_teardown(SbxVm *vm);

/** An error during start: tear down, then complete the start task with @error + diagnostics. */
void sbx_vm_fail_start(SbxVm *vm, GError *error);

/** QEMU or the bridge died, or QMP broke, while running: tear down, call the exit handler. */
void sbx_vm_die(SbxVm *vm, const char *reason);

/** Text for error reports: tails of QEMU's stderr, the bridge's stderr, the guest console. */
char *sbx_vm_diagnostics(SbxVm *vm);

/** Probe the guest agent until it accepts (vm-start.c); the last step of every start. */
void sbx_vm_probe(SbxVm *vm);

/** After the QMP handshake of a restore: load the state, plug vsock, continue, then probe. */
void sbx_vm_restore_begin(SbxVm *vm);

/** Load the snapshot's state and go on with the restore (vm-restore.c). */
void sbx_vm_restore_load_state(SbxVm *vm);

/** A pre-started VM reached the state load: TRUE = hold there (vm-prestart.c). */
gboolean sbx_vm_prestart_hold(SbxVm *vm);

/** (Re)arm the start's boot deadline (vm-start.c). */
void sbx_vm_arm_boot_deadline(SbxVm *vm);

/** Start copying the snapshot's RAM into vm->ram_fd in a worker thread (vm-restore.c). */
void sbx_vm_restore_copy_ram(SbxVm *vm);

/** Make @vm (not started) a snapshot template (snapshot.c). */
void sbx_vm_set_template(SbxVm *vm);

/** The template's RAM file (owned by the VM) or -1. */
int sbx_vm_ram_fd(SbxVm *vm);

/** Expect the bridge to exit (vsock removed before a save): its exit no longer ends the VM. */
void sbx_vm_detach_bridge(SbxVm *vm);

/** Exit watchers and QMP handlers (vm.c), installed by the start sequence. */
void sbx_vm_on_qemu_exit(SbxChild *child, int status, gpointer data);
void sbx_vm_on_bridge_exit(SbxChild *child, int status, gpointer data);
void sbx_vm_on_qmp_event(SbxQmp *qmp, const char *event, const char *data_json, gpointer data);
void sbx_vm_on_qmp_broken(SbxQmp *qmp, const GError *error, gpointer data);

/* vm-cpu.c: read SANDBOX_CPU_BURST_MS into @vm (SBX_VM_ERROR_CONFIG if it is not a number). */
gboolean sbx_vm_cpu_prepare(SbxVm *vm, GError **error);
