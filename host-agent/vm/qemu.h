/*
 * The QEMU command line of a VM, from its profile, its image and the runtime pieces the
 * lifecycle prepared (sockets, file descriptors). Pure apart from sbx_qemu_resolve_accel().
 * Internal to host-agent/vm.
 */
#pragma once

#include <glib.h>

#include "image.h"
#include "profile.h"

typedef struct {
    const char *qemu;            /* binary, e.g. "qemu-system-x86_64" */
    SbxAccel accel;              /* resolved: SBX_ACCEL_TCG or SBX_ACCEL_KVM */
    guint tsc_khz;               /* host TSC frequency for tsc_early_khz= */
    int qmp_fd;                  /* fd number in QEMU: a connected socket for the monitor */
    int console_fd;              /* fd number in QEMU: a connected socket for the serial port */
    const char *vhost_user_path; /* the bridge's vhost-user socket (channel vsock-bridge) */
    const char *serial_path;     /* QEMU's socket for the agent's port (virtio-serial) */
    guint32 guest_cid;           /* the guest's CID (vsock-kernel) */
    /*
     * Snapshots (docs/snapshot.md). ram_path: guest RAM as this file (share=on) instead of a
     * memfd, e.g. "/proc/self/fd/5". snapshot_layout: the machine a snapshot is made of and
     * restored into: a free PCIe root port for the vsock device (hot-plugged after a restore),
     * the vsock device on it with id SBX_QEMU_VSOCK_ID; on microvm also pcie=on and
     * pcie_ports=native. no_vsock: leave the vsock chardev and device out (a restore adds them
     * over QMP). incoming: wait for the state (-incoming defer).
     */
    const char *ram_path;
    gboolean ram_private; /* map ram_path copy-on-write (share=off): a restore's clone */
    gboolean snapshot_layout;
    gboolean no_vsock;
    gboolean incoming;
    gboolean sandbox; /* QEMU's own seccomp filter (-sandbox), part of the jail */
} SbxQemuRuntime;

/* QEMU ids of the hot-pluggable vsock pieces (snapshot layout). */
#define SBX_QEMU_VSOCK_ID "vsock"
#define SBX_QEMU_VSOCK_PORT "vsock-port"

/*
 * virtio-serial: the port's name (the guest finds it in /sys/class/virtio-ports/ * /name, or
 * as /dev/virtio-ports/sbx.agent with udev) and the QEMU id of the port device, which names
 * it in QMP's VSERPORT_CHANGE events (the guest opened or closed the port).
 */
#define SBX_SERIAL_PORT_NAME "sbx.agent"
#define SBX_QEMU_SERIAL_PORT_ID "agent-port"

/** The vsock device's -device / device_add value in the snapshot layout (no id, no chardev). */
const char *sbx_qemu_vsock_driver(void);

/**
 * The accelerator to use: $SANDBOX_ACCEL ("tcg" or "kvm") if set, else the profile's; "auto"
 * means kvm if /dev/kvm opens read-write, else tcg. Asking for kvm without a usable /dev/kvm,
 * or a bad $SANDBOX_ACCEL, is an error.
 */
gboolean sbx_qemu_resolve_accel(const SbxProfile *profile, SbxAccel *ret_accel, GError **error);

/** The guest kernel command line: console, quiet, panic=-1, tsc_early_khz, then the extras. */
char *sbx_qemu_kernel_cmdline(const SbxProfile *profile, guint tsc_khz);

/** The same with the additions of the snapshot layout when @snapshot_layout. */
char *sbx_qemu_kernel_cmdline_full(const SbxProfile *profile, guint tsc_khz,
                                   gboolean snapshot_layout);

/** The full argv (argv[0] = rt->qemu), NULL-terminated; free with g_strfreev. */
char **sbx_qemu_argv(const SbxProfile *profile, const SbxImage *image, const SbxQemuRuntime *rt);

/** @s with every ',' doubled, as QEMU's option syntax wants inside a value (paths). */
char *sbx_qemu_escape_opt(const char *s);

/*
 * The first line of `$SANDBOX_QEMU --version` (qemu-version.c). Kept in @cache_dir (may be
 * NULL: not kept) for as long as the binary is the same file.
 */
char *sbx_qemu_version(const char *cache_dir, GError **error);
