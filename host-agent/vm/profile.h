/*
 * Machine profiles: declarative JSON files in qemu-profiles/ (machine type, memory, CPUs,
 * accelerator, how devices attach) turned into a QEMU command line. Profiles are data from
 * the user: every field is validated with an error naming the file and the field.
 * The format is described in qemu-profiles/README.md.
 */
#pragma once

#include <glib.h>

#include "vm-error.h"

typedef struct SbxProfile SbxProfile;

typedef enum { SBX_MACHINE_Q35, SBX_MACHINE_MICROVM } SbxMachine;

typedef enum { SBX_ACCEL_AUTO, SBX_ACCEL_TCG, SBX_ACCEL_KVM } SbxAccel;

/** Load and validate a profile file. */
SbxProfile *sbx_profile_load(const char *path, GError **error);

/** Find a profile by name ("q35", "microvm") in @dir (NULL = the installed qemu-profiles/). */
SbxProfile *sbx_profile_load_named(const char *dir, const char *name, GError **error);

/**
 * Names of the profiles (*.json) in @dir (NULL = the installed qemu-profiles/), sorted.
 * Only lists; each is validated when loaded. Caller frees with g_strfreev.
 */
char **sbx_profile_list(const char *dir, GError **error);

const char *sbx_profile_name(const SbxProfile *profile);

/** The file the profile was loaded from. */
const char *sbx_profile_path(const SbxProfile *profile);

SbxMachine sbx_profile_machine(const SbxProfile *profile);

/** Guest RAM in MiB. */
guint sbx_profile_memory_mib(const SbxProfile *profile);

/** The accelerator as written in the profile (AUTO is resolved when a VM starts). */
SbxAccel sbx_profile_accel(const SbxProfile *profile);

/** Wire names: "q35"/"microvm", "auto"/"tcg"/"kvm". */
const char *sbx_machine_name(SbxMachine machine);
const char *sbx_accel_name(SbxAccel accel);

void sbx_profile_free(SbxProfile *profile);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxProfile, sbx_profile_free)
