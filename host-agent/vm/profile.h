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

/*
 * How the host reaches the guest agent (the profile's "channel"; docs/snapshot.md compares them).
 * All three carry the same protocol as one byte stream per connection.
 *   VSOCK_BRIDGE: virtio-vsock through our vhost-user backend (bridge/); not in a snapshot:
 *                 hot-plugged after a restore, each clone with its own RAM copy.
 *   VIRTIO_SERIAL: a virtserialport named SBX_SERIAL_PORT_NAME on a QEMU socket chardev; in the
 *                 snapshot, copy-on-write RAM; one stream, no vsock semantics.
 *   VSOCK_KERNEL: the kernel's vhost-vsock (/dev/vhost-vsock); in the snapshot, copy-on-write
 *                 RAM, a guest CID per VM.
 */
typedef enum {
    SBX_CHANNEL_VSOCK_BRIDGE,
    SBX_CHANNEL_VIRTIO_SERIAL,
    SBX_CHANNEL_VSOCK_KERNEL,
} SbxChannelKind;

/** Load and validate a profile file: the checks of sbx_profile_parse(), named by the file. */
SbxProfile *sbx_profile_load(const char *path, GError **error);

/**
 * Parse and validate a profile from @len bytes of @text (need not be NUL-terminated; at most
 * 64 KiB, like a file), as sbx_profile_load() does with a file's: strict JSON, every field
 * known and valid. @name is the name the profile is stored under (a file's name less ".json"):
 * its "name" must equal it, and errors start with "@name.json: ". NULL accepts any valid name
 * (a profile not stored yet) and errors start with "profile: ". The result has no path.
 */
SbxProfile *sbx_profile_parse(const char *name, const char *text, gsize len, GError **error);

/** Find a profile by name ("q35", "microvm") in @dir (NULL = the installed qemu-profiles/). */
SbxProfile *sbx_profile_load_named(const char *dir, const char *name, GError **error);

/**
 * Names of the profiles (*.json) in @dir (NULL = the installed qemu-profiles/), sorted.
 * Only lists; each is validated when loaded. Caller frees with g_strfreev.
 */
char **sbx_profile_list(const char *dir, GError **error);

const char *sbx_profile_name(const SbxProfile *profile);

/** The file the profile was loaded from; NULL for one from sbx_profile_parse(). */
const char *sbx_profile_path(const SbxProfile *profile);

SbxMachine sbx_profile_machine(const SbxProfile *profile);

/** Guest RAM in MiB. */
guint sbx_profile_memory_mib(const SbxProfile *profile);

/** The accelerator as written in the profile (AUTO is resolved when a VM starts). */
SbxAccel sbx_profile_accel(const SbxProfile *profile);

/** The profile's image: a recipe's name (its "image"), NULL for the default image. */
const char *sbx_profile_image(const SbxProfile *profile);

/** How the guest agent is reached (the profile's "channel"). */
SbxChannelKind sbx_profile_channel(const SbxProfile *profile);

/** Wire names: "q35"/"microvm", "auto"/"tcg"/"kvm", "vsock-bridge"/"virtio-serial"/... */
const char *sbx_machine_name(SbxMachine machine);
const char *sbx_accel_name(SbxAccel accel);
const char *sbx_channel_name(SbxChannelKind channel);

void sbx_profile_free(SbxProfile *profile);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxProfile, sbx_profile_free)
