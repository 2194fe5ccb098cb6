/*
 * What the bundle's writer (bundle-write.c) and reader (bundle-read.c) share: member names and
 * the error helper.
 */
#pragma once

#include "replay/bundle.h"

#define SBX_BUNDLE_MANIFEST "manifest.json"
#define SBX_BUNDLE_RECORD "record.json"
/* The executions of the record's session before it: a portable record a line, oldest first. */
#define SBX_BUNDLE_SESSION "session.jsonl"

/* Executions before the record in its session: as many as a replay's chain holds
 * (replay.c: a page of records, SBX_RECORDS_LIST_MAX, less the record). */
#define SBX_BUNDLE_SESSION_RECORDS_MAX (SBX_RECORDS_LIST_MAX - 1)

/* Their bytes together: 256 MiB is four records at the portable form's largest, and far more
 * than a session's usual hundreds of KiB. */
#define SBX_BUNDLE_SESSION_MAX (256 * 1024 * 1024)

/* The snapshot's files a bundle carries (not `verified`: a stamp of this machine's inodes). */
#define SBX_BUNDLE_SNAPSHOT_FILES                                                                  \
    {                                                                                              \
        "inputs.json", "state.bin", "ram", "digests"                                               \
    }

/** Set @error (SBX_BUNDLE_ERROR, @code) from a printf format; FALSE. */
gboolean sbx_bundle_fail(GError **error, SbxBundleErrorCode code, const char *fmt, ...)
    G_GNUC_PRINTF(3, 4);
