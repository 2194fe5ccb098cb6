/*
 * Portable bundles (docs/service.md, "Records"; docs/decisions.md): one file holding an
 * execution's record with everything its replay needs on another machine with the same QEMU:
 * the snapshot it was restored from, the guest image's files, the profile. A tar archive,
 * zstd-compressed (libarchive), of:
 *   record.json             the record, its tool calls and approvals (store/records.h,
 *                           sbx_record_to_portable_json(): every field, nothing lost)
 *   session.jsonl           (an execution of a session after others) those executions, oldest
 *                           first, a portable record a line: its replay runs them first
 *   snapshot/NAME           the snapshot's files (inputs.json, state.bin, ram, digests)
 *   image/NAME              the image's manifest.json, kernel, initramfs.cpio, rootfs.erofs
 *   profile/NAME.json       the profile file
 *   manifest.json (last)    format, record id, created time, QEMU version, snapshot key, image
 *                           id, profile name, and each member's size and sha256
 * A bundle is untrusted input from another machine: the reader takes plain files of the names
 * above only (no directories, links or paths), bounds their number and sizes, and checks every
 * member against the manifest before anything of it is used.
 */
#pragma once

#include <glib.h>

#include "store/records.h"

/* Bumped when the members or the manifest change. */
#define SBX_BUNDLE_FORMAT "sbx-bundle-1"

typedef struct SbxBundle SbxBundle;

/**
 * Write execution @id's record (of tenant @tenant_id; NULL: any, the operator's view) and what
 * its replay needs into a new bundle at @path (written beside it and renamed: never half a
 * file). The snapshot is the record's (sbx_snapshot_find_kept(): the default snapshot cache),
 * the profile the one of its name (the default profile directory), the image the one that
 * profile runs; each must still be the one the record ran on (its image id, the snapshot's
 * recorded inputs), else an error says which is gone.
 */
gboolean sbx_bundle_export(SbxStore *store, const char *tenant_id, const char *id, const char *path,
                           GError **error);

/**
 * Unpack the bundle at @path into a new private directory under @work_dir (the state
 * directory), check it and parse its record. The directory is the bundle's: removed by
 * sbx_bundle_free(), and on failure before this returns. Nothing is checked against this
 * machine's QEMU here: the replay opens the snapshot (sbx_snapshot_open()) with the bundle's
 * profile and image, which does.
 */
gboolean sbx_bundle_open(const char *path, const char *work_dir, SbxBundle **ret, GError **error);

/** The record, its tool calls (SbxRecordCall *) and approvals (SbxRecordApproval *). */
const SbxRecord *sbx_bundle_record(const SbxBundle *bundle);
const GPtrArray *sbx_bundle_calls(const SbxBundle *bundle);
const GPtrArray *sbx_bundle_approvals(const SbxBundle *bundle);

/**
 * Place the bundle's image where a VM's jail (another uid) can read it, kept for later bundles
 * of it: @images_dir/bundle-IMAGE_ID (moved there, or found there from an earlier bundle; an
 * image's files are not secret). The bundle's private directory cannot be: only its owner
 * passes. sbx_bundle_image_dir() says where it is after this. For a machine whose own image is
 * the record's, there is no need: use that one.
 */
gboolean sbx_bundle_place_image(SbxBundle *bundle, const char *images_dir, GError **error);

/**
 * Take the record and its tool calls out of @bundle (for a replay, which owns them): the
 * bundle's record and calls are NULL after this.
 */
void sbx_bundle_take_record(SbxBundle *bundle, SbxRecord **ret_rec, GPtrArray **ret_calls);

/**
 * Take the executions of the record's session before it out of @bundle (an execution of a
 * session replays after them, replay.h): *@ret_records (SbxRecord*, oldest first, empty when
 * the record is of no session or the first of it) and *@ret_calls (for each, its GPtrArray of
 * SbxRecordCall*). NULL after this.
 */
void sbx_bundle_take_session(SbxBundle *bundle, GPtrArray **ret_records, GPtrArray **ret_calls);

/** The unpacked snapshot directory, image directory and profile file. */
const char *sbx_bundle_snapshot_dir(const SbxBundle *bundle);
const char *sbx_bundle_image_dir(const SbxBundle *bundle);
const char *sbx_bundle_profile_path(const SbxBundle *bundle);

/** The QEMU version the bundle was made with (the first line of `qemu --version`). */
const char *sbx_bundle_qemu_version(const SbxBundle *bundle);

/** Remove the unpacked directory and free @bundle (NULL: nothing). */
void sbx_bundle_free(SbxBundle *bundle);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxBundle, sbx_bundle_free)

#define SBX_BUNDLE_ERROR (sbx_bundle_error_quark())
GQuark sbx_bundle_error_quark(void);

typedef enum {
    SBX_BUNDLE_ERROR_GONE,    /* what the record needs is no longer here (snapshot, image) */
    SBX_BUNDLE_ERROR_INVALID, /* the bundle breaks a rule: a name, a size, a digest */
    SBX_BUNDLE_ERROR_IO,      /* reading or writing failed */
} SbxBundleErrorCode;
