/*
 * What the snapshot files share inside host-agent/vm (snapshot.c, snapshot-pin.c): the cache
 * lock and removing a snapshot directory.
 */
#pragma once

#include <glib.h>

/**
 * The cache lock (flock @how, LOCK_EX or LOCK_SH, on <cache>/.lock), waited for a bounded time;
 * an fd to close, or -1 with @error.
 */
int sbx_snapshot_lock_cache(const char *cache, int how, GError **error);

/** Remove @dir and the files in it (a snapshot has no subdirectories). */
void sbx_snapshot_rm_rf(const char *dir);

/**
 * Whether a retained record of some store still refers to snapshot @key of @cache (a pin whose
 * store file exists); pins of stores that are gone are removed on the way. The caller holds
 * the cache lock exclusively.
 */
gboolean sbx_snapshot_pinned(const char *cache, const char *key);

/** Remove the pins of snapshot @key (it is being removed). */
void sbx_snapshot_pins_remove(const char *cache, const char *key);

/* A kept snapshot (superseded, kept for its pins) carries this empty file, so that the last
 * unpin can remove it without knowing what is current. */
#define SBX_SNAPSHOT_KEPT_MARK "kept"

/* A kept snapshot's RAM file compressed at rest (snapshot-zstd.c). */
#define SBX_SNAPSHOT_RAM_ZST "ram.zst"

/**
 * Compress the RAM file of the snapshot in @dir into ram.zst and remove it (nobody may have
 * the snapshot open: the caller holds the cache lock exclusively and the snapshot's lock).
 */
gboolean sbx_snapshot_ram_compress(const char *dir, GError **error);

/** Decompress ram.zst of the snapshot in @dir back into a sparse RAM file and remove it. */
gboolean sbx_snapshot_ram_decompress(const char *dir, GError **error);
