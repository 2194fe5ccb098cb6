/*
 * Snapshots: a guest booted once, warmed up and saved, from which every sandbox is restored
 * (docs/snapshot.md). A snapshot is a directory: inputs.json (what it was made from), state.bin
 * (device state, x-ignore-shared), ram (the guest RAM file, sparse). It is named by a hash of
 * everything it depends on and cached under build/snapshots/<key>/.
 */
#pragma once

#include <glib.h>

#include "image.h"
#include "profile.h"
#include "vm-error.h"

typedef struct SbxSnapshot SbxSnapshot;

/** What a snapshot depends on. All strings owned; free with sbx_snapshot_inputs_clear(). */
typedef struct {
    char *format;         /* SBX_SNAPSHOT_FORMAT of the code that made it */
    char *image_id;       /* manifest.json's image_id */
    char *profile_sha256; /* of the profile file's bytes */
    char *qemu_version;   /* first line of `qemu --version` */
    char *recipe_sha256;  /* of the QEMU command line recipe (qemu.c, snapshot layout) */
    char *key;            /* sha256 of all of the above: the directory name */
    /* The profile's name, for the collection only: not in the key (the profile's bytes hold
     * it) and optional in inputs.json (older snapshots lack it). */
    char *profile_name;
    /* The image's directory, for the collection only, likewise: a snapshot of another image_id
     * from the same directory was superseded by a rebuild; one from another directory is of
     * an image that lives beside this one (guest-image/recipes/README.md). */
    char *image_dir;
} SbxSnapshotInputs;

/* Bumped when the files of a snapshot or the way one is made change. */
#define SBX_SNAPSHOT_FORMAT "sbx-snapshot-2"

typedef struct {
    const char *cache_dir; /* NULL = $SANDBOX_SNAPSHOT_DIR or <build>/snapshots */
    /* Called once, before a missing snapshot is made (e.g. to tell the user it takes a while). */
    void (*on_make)(const char *dir, gpointer user_data);
    gpointer user_data;
    gboolean console_to_stderr; /* the template VM's console, for --debug */
} SbxSnapshotOptions;

/**
 * The snapshot of @profile + @image: opened from the cache if there, else made (boot, warm up
 * both runtimes, save; ~10-20 s under TCG) and cached atomically. Runs the default main
 * context while it works; call from the main thread, not from a main-loop callback that
 * must not re-enter. Every wait is bounded.
 */
SbxSnapshot *sbx_snapshot_ensure(const SbxProfile *profile, const SbxImage *image,
                                 const SbxSnapshotOptions *opts, GError **error);

/**
 * Open the snapshot in @dir and check that it was made from the same inputs as @profile +
 * @image + this QEMU would give: a mismatch is SBX_VM_ERROR_SNAPSHOT naming what differs,
 * before any QEMU is started.
 */
SbxSnapshot *sbx_snapshot_open(const char *dir, const SbxProfile *profile, const SbxImage *image,
                               GError **error);

/** The snapshot's directory, its device state file and its RAM file. */
const char *sbx_snapshot_dir(const SbxSnapshot *snap);
const char *sbx_snapshot_state_path(const SbxSnapshot *snap);
const char *sbx_snapshot_ram_path(const SbxSnapshot *snap);

/** The inputs recorded in the snapshot. */
const SbxSnapshotInputs *sbx_snapshot_inputs(const SbxSnapshot *snap);

/**
 * The snapshot's RAM as a sealed memfd (a new fd, the caller's), once a restore filled it and
 * gave it with sbx_snapshot_keep_shared_ram(); -1 before. Restores map it copy-on-write.
 */
int sbx_snapshot_shared_ram(const SbxSnapshot *snap);

/** Keep a copy of @fd (sealed, holding the snapshot's RAM) for later restores, if none yet. */
void sbx_snapshot_keep_shared_ram(const SbxSnapshot *snap, int fd);

/** Whether sbx_snapshot_ensure() made it (TRUE) or found it cached. */
gboolean sbx_snapshot_was_made(const SbxSnapshot *snap);

void sbx_snapshot_free(SbxSnapshot *snap);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxSnapshot, sbx_snapshot_free)

/*
 * Pure pieces, for tests.
 */

/**
 * Fill @out from the raw inputs: @recipe is the command-line recipe text, @profile_text the
 * profile file's bytes, @profile_name its name. Computes the hashes and the key.
 */
void sbx_snapshot_inputs_compute(SbxSnapshotInputs *out, const char *image_id,
                                 const char *profile_name, const char *profile_text,
                                 gsize profile_len, const char *qemu_version, const char *recipe);

/**
 * Compare @recorded (from a snapshot at @dir) with @current. FALSE with SBX_VM_ERROR_SNAPSHOT
 * naming the first input that differs and both values.
 */
gboolean sbx_snapshot_inputs_check(const SbxSnapshotInputs *recorded,
                                   const SbxSnapshotInputs *current, const char *dir,
                                   GError **error);

/** The recipe for @profile: the snapshot-layout argv with placeholders, one per line. */
char *sbx_snapshot_recipe(const SbxProfile *profile, SbxAccel accel, guint tsc_khz);

/**
 * The inputs a snapshot of @profile + @image made on this machine (this QEMU, accelerator and
 * TSC) has; clear *@out with sbx_snapshot_inputs_clear(). For tests and for checking a snapshot
 * from elsewhere (a bundle, replay/) before anything starts.
 */
gboolean sbx_snapshot_current_inputs(const SbxProfile *profile, const SbxImage *image,
                                     SbxSnapshotInputs *out, GError **error);

/** inputs.json text and back (FALSE + SBX_VM_ERROR_SNAPSHOT on a bad file). */
char *sbx_snapshot_inputs_to_json(const SbxSnapshotInputs *in);
gboolean sbx_snapshot_inputs_from_json(const char *text, gsize len, SbxSnapshotInputs *out,
                                       GError **error);

void sbx_snapshot_inputs_clear(SbxSnapshotInputs *in);

/**
 * Remove from @cache the snapshots a rebuild superseded (another image, QEMU or format than
 * @current, or the same profile name with other profile bytes: an edited profile) that nobody
 * has open; the caller holds the cache lock exclusively (it runs after each make). Other
 * profiles of the same image stay. Returns how many were removed.
 */
guint sbx_snapshot_collect(const char *cache, const SbxSnapshotInputs *current);
