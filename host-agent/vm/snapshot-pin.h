/*
 * Snapshots kept for their records (docs/snapshot.md, "Kept snapshots"). A record names the
 * snapshot its execution was restored from; a replay needs it again. The store and this layer
 * do not know each other, and several state directories (stores) may share one snapshot cache,
 * so each store pins the snapshots its records name with a file in the cache:
 * <cache>/.pins/<key>/<tag>, tag = sha256 of the store's database path, holding that path.
 * The collection after a make (sbx_snapshot_collect()) keeps a superseded snapshot that has a
 * pin whose database still exists (a pin of a deleted state directory is stale and goes), and
 * marks it kept; when a store's pruning leaves none of its records naming a key, it unpins it
 * (sbx_snapshot_pins_sync()) and a kept snapshot nobody pins any longer is removed then.
 */
#pragma once

#include <glib.h>

#include "snapshot.h"

/**
 * Pin snapshot @key of @cache (NULL: sbx_paths_snapshot_dir()) for the store whose database is
 * at @holder (made absolute here). Nothing to do when the snapshot is not in the cache (a key
 * of another machine, a test's made-up key) or the pin exists (one stat per execution).
 */
gboolean sbx_snapshot_pin(const char *cache, const char *key, const char *holder, GError **error);

/**
 * After @holder's store pruned records: remove @holder's pins of keys not in @keys (a set of
 * strings: sbx_records_snapshot_keys()), then the kept snapshots that no pin holds any longer
 * and nobody has open. *@ret_removed (may be NULL): how many snapshots were removed.
 */
gboolean sbx_snapshot_pins_sync(const char *cache, const char *holder, GHashTable *keys,
                                guint *ret_removed, GError **error);

/**
 * The snapshot a record was restored from, for its replay, before anything starts: @key (the
 * record's snapshot_key) in @cache (NULL: the default), opened and checked against @profile +
 * @image + this machine's QEMU as sbx_snapshot_open() does. A record without a key, or a key
 * whose snapshot is not in the cache, is SBX_VM_ERROR_SNAPSHOT "snapshot KEY of record ID is
 * gone (collected or never made here)"; other inputs than the record's (a rebuilt image, an
 * edited profile, another QEMU) are SBX_VM_ERROR_SNAPSHOT naming what differs.
 */
SbxSnapshot *sbx_snapshot_find_kept(const char *cache, const char *record_id, const char *key,
                                    const SbxProfile *profile, const SbxImage *image,
                                    GError **error);
