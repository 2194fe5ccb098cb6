/*
 * What the bundle's writer (bundle-write.c) and reader (bundle-read.c) share: member names and
 * the error helper.
 */
#pragma once

#include "replay/bundle.h"

#define SBX_BUNDLE_MANIFEST "manifest.json"
#define SBX_BUNDLE_RECORD "record.json"

/* The snapshot's files a bundle carries (not `verified`: a stamp of this machine's inodes). */
#define SBX_BUNDLE_SNAPSHOT_FILES                                                                  \
    {                                                                                              \
        "inputs.json", "state.bin", "ram", "digests"                                               \
    }

/** Set @error (SBX_BUNDLE_ERROR, @code) from a printf format; FALSE. */
gboolean sbx_bundle_fail(GError **error, SbxBundleErrorCode code, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
