/*
 * The validated contents of a profile, for the QEMU command-line builder (qemu.c) and tests.
 * Internal to host-agent/vm; everyone else sees the opaque SbxProfile.
 */
#pragma once

#include "profile.h"

struct SbxProfile {
    char *path;        /* the file it came from */
    char *name;        /* equals the file name without ".json" */
    char *description; /* optional, may be NULL */
    SbxMachine machine;
    SbxAccel accel; /* as written: AUTO is resolved at start (sbx_qemu_resolve_accel) */
    char *cpu;      /* QEMU CPU model, NULL = QEMU's default */
    guint cpus;
    guint memory_mib;
    char *cmdline_extra; /* appended to the kernel command line, may be "" */
    SbxChannelKind channel;
    char *image; /* the image's recipe name, NULL = the default image */
};
