/*
 * A snapshot's files as they were made (docs/snapshot.md, "Integrity"): an owner-only cache,
 * a digest of each file recorded when it is made (`digests`) and checked before it is used. A
 * check that found the files right leaves a stamp (`verified`: each file's device, inode, size,
 * mtime and ctime), so later checks cost a few stat() calls while nothing wrote to them (any
 * write changes a file's ctime, which only the kernel sets); otherwise the files are hashed
 * again (~0.3 s for a 256 MiB guest). Internal to host-agent/vm.
 */
#pragma once

#include <glib.h>

/** The files of a snapshot that are digested, in its directory. */
#define SBX_SNAPSHOT_DIGESTED                                                                      \
    {                                                                                              \
        "state.bin", "ram"                                                                         \
    }

/**
 * The cache directory @cache: created owner-only (0700) if missing; refused unless it is a
 * directory that this user owns and nobody else can read, write or enter.
 */
gboolean sbx_snapshot_cache_check(const char *cache, GError **error);

/** Digest the files of the snapshot being made in @dir; write `digests` and `verified`. */
gboolean sbx_snapshot_digests_write(const char *dir, GError **error);

/**
 * Check the files of the snapshot in @dir against `digests` (through the stamp when it still
 * matches). A mismatch is SBX_VM_ERROR_SNAPSHOT naming the file.
 */
gboolean sbx_snapshot_digests_check(const char *dir, GError **error);

/**
 * The digest of the file at @path (hex sha256 over its non-zero 4 KiB pages, each after its
 * offset, then its size: the same for a sparse and a filled copy), or NULL with @error.
 */
char *sbx_snapshot_file_digest(const char *path, GError **error);
