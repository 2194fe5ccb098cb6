/*
 * The error domain of the VM layer (profiles, image, QEMU, QMP, lifecycle). I/O errors from GIO
 * (G_IO_ERROR) pass through unchanged, e.g. G_IO_ERROR_TIMED_OUT, G_IO_ERROR_CANCELLED.
 */
#pragma once

#include <glib.h>

#define SBX_VM_ERROR (sbx_vm_error_quark())
GQuark sbx_vm_error_quark(void);

typedef enum {
    SBX_VM_ERROR_PROFILE,       /* a profile file is missing, unreadable or invalid */
    SBX_VM_ERROR_IMAGE_MISSING, /* the guest image is not built (run scripts/build) */
    SBX_VM_ERROR_IMAGE,         /* the guest image is there but inconsistent */
    SBX_VM_ERROR_CONFIG,        /* a bad environment override, no TSC frequency, a long path */
    SBX_VM_ERROR_SPAWN,         /* the bridge or QEMU could not be started */
    SBX_VM_ERROR_BRIDGE,        /* the bridge failed or did not become ready */
    SBX_VM_ERROR_QMP,           /* QEMU's monitor broke the protocol or answered with an error */
    SBX_VM_ERROR_EXITED,        /* QEMU (or the bridge) exited */
    SBX_VM_ERROR_BOOT_TIMEOUT,  /* the guest agent did not accept a connection in time */
    SBX_VM_ERROR_STOPPED,       /* QEMU stopped the guest for good (e.g. a KVM internal error) */
    SBX_VM_ERROR_SNAPSHOT,      /* a snapshot is missing, damaged, or made from other inputs */
    SBX_VM_ERROR_JAIL,          /* the jail cannot be had (no bwrap, no free uid, bad settings) */
} SbxVmError;

/** Set @error (may be NULL) in SBX_VM_ERROR with @code and a printf message; FALSE, to return. */
gboolean sbx_vm_fail(GError **error, SbxVmError code, const char *fmt, ...) G_GNUC_PRINTF(3, 4);
