/*
 * Snapshots kept for their records (host-agent/vm/snapshot-pin.c, docs/snapshot.md "Kept
 * snapshots"): pure, on fake snapshot directories. A superseded snapshot pinned by a store
 * whose database exists survives the collection and is marked kept; a pin of a deleted state
 * directory does not keep it; a kept snapshot's RAM file is compressed; two stores sharing the
 * cache each hold it until both unpinned (pruned); a record's snapshot that is gone says so.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <glib.h>
#include <glib/gstdio.h>

#include "snapshot-pin.h"

#define OLD "1111111111111111111111111111111111111111111111111111111111111111"
#define OLD2 "2222222222222222222222222222222222222222222222222222222222222222"

static void fake_snapshot(const char *cache, const char *key, const char *image_id)
{
    SbxSnapshotInputs in = {0};
    g_autofree char *dir = g_build_filename(cache, key, NULL);
    g_autofree char *path = g_build_filename(dir, "inputs.json", NULL);

    sbx_snapshot_inputs_compute(&in, image_id, "one", "p1", 2, "QEMU 7.2", "recipe");
    g_autofree char *json = sbx_snapshot_inputs_to_json(&in);
    assert_int_equal(g_mkdir_with_parents(dir, 0700), 0);
    assert_true(g_file_set_contents(path, json, -1, NULL));
    g_autofree char *ram = g_build_filename(dir, "ram", NULL);
    assert_true(g_file_set_contents(ram, "guest memory", -1, NULL));
    sbx_snapshot_inputs_clear(&in);
}

static gboolean exists(const char *cache, const char *key)
{
    g_autofree char *dir = g_build_filename(cache, key, NULL);
    return g_file_test(dir, G_FILE_TEST_EXISTS);
}

static char *fake_db(const char *top, const char *name)
{
    g_autofree char *dir = g_build_filename(top, name, NULL);
    char *db = g_build_filename(dir, "sandbox.db", NULL);

    assert_int_equal(g_mkdir_with_parents(dir, 0700), 0);
    assert_true(g_file_set_contents(db, "", 0, NULL));
    return db;
}

static GHashTable *keys_of(const char *key)
{
    GHashTable *keys = g_hash_table_new(g_str_hash, g_str_equal);

    if (key != NULL)
        g_hash_table_add(keys, (gpointer)key);
    return keys;
}

static void rm_tree(const char *path)
{
    g_autofree char *cmd = g_strdup_printf("rm -rf '%s'", path);
    assert_int_equal(system(cmd), 0);
}

static void test_kept_while_pinned(void **state)
{
    (void)state;
    g_autofree char *top = g_dir_make_tmp("sbx-pin-XXXXXX", NULL);
    g_autofree char *cache = g_build_filename(top, "cache", NULL);
    g_autofree char *db_a = fake_db(top, "state-a"), *db_b = fake_db(top, "state-b");
    g_autofree char *db_gone = fake_db(top, "state-gone");
    SbxSnapshotInputs cur = {0};
    guint removed = 99;

    sbx_snapshot_inputs_compute(&cur, "image-new", "one", "p1", 2, "QEMU 7.2", "recipe");
    fake_snapshot(cache, cur.key, "image-new");
    fake_snapshot(cache, OLD, "image-old");
    fake_snapshot(cache, OLD2, "image-old");

    /* Two stores share the cache and pin OLD; only a deleted one pins OLD2. */
    assert_true(sbx_snapshot_pin(cache, OLD, db_a, NULL));
    assert_true(sbx_snapshot_pin(cache, OLD, db_a, NULL)); /* twice: one pin */
    assert_true(sbx_snapshot_pin(cache, OLD, db_b, NULL));
    assert_true(sbx_snapshot_pin(cache, OLD2, db_gone, NULL));
    /* A key not in the cache, or not a key: nothing to pin, no error. */
    assert_true(sbx_snapshot_pin(cache, "ffff", db_a, NULL));
    assert_true(sbx_snapshot_pin(cache, NULL, db_a, NULL));
    g_autofree char *gone_dir = g_path_get_dirname(db_gone);
    rm_tree(gone_dir);

    assert_int_equal(sbx_snapshot_collect(cache, &cur), 1);
    assert_true(exists(cache, OLD));
    assert_false(exists(cache, OLD2));
    g_autofree char *mark = g_build_filename(cache, OLD, "kept", NULL);
    assert_true(g_file_test(mark, G_FILE_TEST_EXISTS));
    /* Kept: its RAM file compressed at rest. */
    g_autofree char *ram = g_build_filename(cache, OLD, "ram", NULL);
    g_autofree char *zst = g_build_filename(cache, OLD, "ram.zst", NULL);
    assert_false(g_file_test(ram, G_FILE_TEST_EXISTS));
    assert_true(g_file_test(zst, G_FILE_TEST_IS_REGULAR));

    /* Store a pruned its records of OLD: b still holds it. */
    g_autoptr(GHashTable) none = keys_of(NULL);
    assert_true(sbx_snapshot_pins_sync(cache, db_a, none, &removed, NULL));
    assert_int_equal(removed, 0);
    assert_true(exists(cache, OLD));
    /* Store b keeps its record of OLD: nothing changes. */
    g_autoptr(GHashTable) old = keys_of(OLD);
    assert_true(sbx_snapshot_pins_sync(cache, db_b, old, &removed, NULL));
    assert_int_equal(removed, 0);
    assert_true(exists(cache, OLD));
    /* Then b pruned it too: the kept snapshot goes; the current one stays. */
    assert_true(sbx_snapshot_pins_sync(cache, db_b, none, &removed, NULL));
    assert_int_equal(removed, 1);
    assert_false(exists(cache, OLD));
    assert_true(exists(cache, cur.key));

    sbx_snapshot_inputs_clear(&cur);
    rm_tree(top);
}

static void test_find_gone(void **state)
{
    (void)state;
    g_autofree char *cache = g_dir_make_tmp("sbx-pin-find-XXXXXX", NULL);
    g_autoptr(GError) error = NULL;

    /* The profile and image are not looked at before the snapshot is found. */
    assert_null(sbx_snapshot_find_kept(cache, "exec-1", OLD, NULL, NULL, &error));
    assert_non_null(error);
    assert_string_equal(error->message, "snapshot " OLD " of record exec-1 is gone (collected or "
                                        "never made here)");
    g_clear_error(&error);
    assert_null(sbx_snapshot_find_kept(cache, "exec-1", "../../etc", NULL, NULL, &error));
    assert_non_null(strstr(error->message, "no valid snapshot key"));
    g_clear_error(&error);
    assert_null(sbx_snapshot_find_kept(cache, "exec-1", NULL, NULL, NULL, &error));
    assert_string_equal(error->message, "record exec-1 names no snapshot");
    rm_tree(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kept_while_pinned),
        cmocka_unit_test(test_find_gone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
