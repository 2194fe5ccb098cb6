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
    const char *vhost_user_path; /* the bridge's vhost-user socket */
} SbxQemuRuntime;

/**
 * The accelerator to use: $SANDBOX_ACCEL ("tcg" or "kvm") if set, else the profile's; "auto"
 * means kvm if /dev/kvm opens read-write, else tcg. Asking for kvm without a usable /dev/kvm,
 * or a bad $SANDBOX_ACCEL, is an error.
 */
gboolean sbx_qemu_resolve_accel(const SbxProfile *profile, SbxAccel *ret_accel, GError **error);

/** The guest kernel command line: console, quiet, panic=-1, tsc_early_khz, then the extras. */
char *sbx_qemu_kernel_cmdline(const SbxProfile *profile, guint tsc_khz);

/** The full argv (argv[0] = rt->qemu), NULL-terminated; free with g_strfreev. */
char **sbx_qemu_argv(const SbxProfile *profile, const SbxImage *image, const SbxQemuRuntime *rt);

/** @s with every ',' doubled, as QEMU's option syntax wants inside a value (paths). */
char *sbx_qemu_escape_opt(const char *s);
