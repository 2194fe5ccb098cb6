/*
 * A server's retention (host-agent/server/retention.c) on a real store, the test running its
 * main loop: the prune at start by bytes; the prune the bytes written since the last one ask
 * for (a tenth of the bound) run from the loop when idle, not inside the finish, and not
 * before that share; the pins of the snapshots only the deleted records named removed
 * (docs/snapshot.md, "Kept snapshots"); no hook without a bound on bytes.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "server/retention.h"
#include "store-fixture.h"
#include "store/store-private.h"
#include "vm/snapshot-pin.h"

/* Snapshot keys (a sha256 in hex each): of the old records, of the new ones. */
#define KEY_OLD "1111111111111111111111111111111111111111111111111111111111111111"
#define KEY_NEW "2222222222222222222222222222222222222222222222222222222222222222"

/* Iterations of the main loop that run what is due without blocking: more than it needs. */
#define LOOP_TURNS 100

static gint64 count_records(SbxStore *s)
{
    return store_fixture_query_int(s, "SELECT count(*) FROM executions");
}

/* Run what the main loop has due (the idle prune), without blocking. */
static void run_loop(void)
{
    for (int i = 0; i < LOOP_TURNS && g_main_context_iteration(NULL, FALSE); i++) {
    }
}

/* Record @id finished "ok" at @created, snapshot @key, 1000 bytes of output: its size. */
static gint64 add(SbxStore *s, const char *id, gint64 created, const char *key)
{
    SbxRecord r = store_fixture_record(id, NULL, created);
    char out[1000] = {0};

    r.snapshot_key = (char *)key;
    if (!sbx_records_begin(s, &r, NULL)) {
        fail_msg("begin %s", id);
    }
    r.status = "ok";
    r.stdout_data = out;
    r.stdout_len = sizeof(out);
    if (!sbx_records_finish(s, &r, NULL, 0, NULL, 0, NULL)) {
        fail_msg("finish %s", id);
    }
    g_autofree char *sql = g_strdup_printf("SELECT size_bytes FROM executions WHERE id = '%s'", id);
    return store_fixture_query_int(s, sql);
}

/* The pin of snapshot @key by the store at @db in @cache (snapshot-pin.h): its path. */
static char *pin_path(const char *cache, const char *key, const char *db)
{
    g_autofree char *abs = g_canonicalize_filename(db, NULL);
    g_autofree char *tag = g_compute_checksum_for_string(G_CHECKSUM_SHA256, abs, -1);

    return g_build_filename(cache, ".pins", key, tag, NULL);
}

static void test_bytes_written(void **state)
{
    StoreFixture *f = *state;
    g_autofree char *cache = g_build_filename(f->dir, "snapshots", NULL);
    g_autoptr(GError) error = NULL;
    gint64 now = sbx_store_now_ms(), size = 0;

    /* The snapshot cache the pins go to: the test's, with both snapshots in it. */
    g_setenv("SANDBOX_SNAPSHOT_DIR", cache, TRUE);
    const char *keys[] = {KEY_OLD, KEY_NEW};
    for (gsize i = 0; i < G_N_ELEMENTS(keys); i++) {
        g_autofree char *dir = g_build_filename(cache, keys[i], NULL);
        assert_int_equal(g_mkdir_with_parents(dir, 0700), 0);
    }
    g_autoptr(SbxStore) s = sbx_store_open(f->path, &error);
    assert_non_null(s);
    for (int i = 0; i < 30; i++) {
        g_autofree char *id = g_strdup_printf("r-%02d", i);
        gint64 n = add(s, id, now - 100000 + i, i < 12 ? KEY_OLD : KEY_NEW);
        assert_true(size == 0 || n == size); /* ids of one length: one size */
        size = n;
    }
    assert_true(sbx_snapshot_pin(NULL, KEY_OLD, f->path, NULL));
    assert_true(sbx_snapshot_pin(NULL, KEY_NEW, f->path, NULL));
    g_autofree char *pin_old = pin_path(cache, KEY_OLD, f->path);
    g_autofree char *pin_new = pin_path(cache, KEY_NEW, f->path);
    assert_true(g_file_test(pin_old, G_FILE_TEST_IS_REGULAR));

    /* At start: the bound (20 records) holds the newest 20 only. */
    guint64 bound = (guint64)(20 * size);
    SbxRetention *r = sbx_retention_start(s, 0, 0, bound);
    assert_non_null(r);
    assert_int_equal(count_records(s), 20);
    assert_true(g_file_test(pin_old, G_FILE_TEST_IS_REGULAR)); /* r-10 and r-11 name it */

    /* Less than a tenth of the bound written: no prune, even past the bound. */
    add(s, "s-00", now - 1000, KEY_NEW);
    run_loop();
    assert_int_equal(count_records(s), 21);
    /* A tenth written (two records): the prune is asked for, and runs from the loop. */
    add(s, "s-01", now - 999, KEY_NEW);
    assert_int_equal(count_records(s), 22); /* not inside the finish */
    run_loop();
    assert_int_equal(count_records(s), 20);
    assert_int_equal(store_fixture_query_int(
                         s, "SELECT count(*) FROM executions WHERE snapshot_key = '" KEY_OLD "'"),
                     0);
    /* The records that named KEY_OLD are gone: its pin too; KEY_NEW's stays. */
    assert_false(g_file_test(pin_old, G_FILE_TEST_EXISTS));
    assert_true(g_file_test(pin_new, G_FILE_TEST_IS_REGULAR));
    assert_int_equal(store_fixture_query_int(s, "SELECT sum(size_bytes) FROM executions"),
                     (gint64)bound);

    /* The count starts again from the prune: one record written, no prune. */
    add(s, "s-02", now - 998, KEY_NEW);
    run_loop();
    assert_int_equal(count_records(s), 21);
    sbx_retention_free(r);
    assert_null(s->on_finished);
    add(s, "s-03", now - 997, KEY_NEW);
    add(s, "s-04", now - 996, KEY_NEW);
    run_loop();
    assert_int_equal(count_records(s), 23); /* stopped: nothing pruned */
    g_unsetenv("SANDBOX_SNAPSHOT_DIR");
}

/*
 * Past the bound by more than a batch (SBX_RETENTION_BYTES_BATCH): the prune at the start
 * deletes one batch, the rest go in later transactions from the loop, until the bound holds.
 */
static void test_bytes_in_batches(void **state)
{
    StoreFixture *f = *state;
    g_autofree char *cache = g_build_filename(f->dir, "snapshots", NULL);
    g_autoptr(GError) error = NULL;
    const int over = 2 * SBX_RETENTION_BYTES_BATCH + 3, kept = 5;
    gint64 now = sbx_store_now_ms(), size = 0;

    g_setenv("SANDBOX_SNAPSHOT_DIR", cache, TRUE);
    g_autoptr(SbxStore) s = sbx_store_open(f->path, &error);
    assert_non_null(s);
    for (int i = 0; i < over + kept; i++) {
        g_autofree char *id = g_strdup_printf("r-%03d", i);
        size = add(s, id, now - 100000 + i, KEY_NEW);
    }
    SbxRetention *r = sbx_retention_start(s, 0, 0, (guint64)(kept * size));
    assert_int_equal(count_records(s), over + kept - SBX_RETENTION_BYTES_BATCH);
    run_loop();
    assert_int_equal(count_records(s), kept);
    g_autofree char *newest = g_strdup_printf(
        "SELECT count(*) FROM executions WHERE id >= 'r-%03d'", over); /* the newest: kept */
    assert_int_equal(store_fixture_query_int(s, newest), kept);
    sbx_retention_free(r);
    g_unsetenv("SANDBOX_SNAPSHOT_DIR");
}

/* Without a bound on bytes the store has no hook; without any bound, no retention at all. */
static void test_no_bytes_bound(void **state)
{
    StoreFixture *f = *state;
    g_autofree char *cache = g_build_filename(f->dir, "snapshots", NULL);
    g_autoptr(GError) error = NULL;

    g_setenv("SANDBOX_SNAPSHOT_DIR", cache, TRUE);
    g_autoptr(SbxStore) s = sbx_store_open(f->path, &error);
    assert_non_null(s);
    assert_null(sbx_retention_start(s, 0, 0, 0));
    SbxRetention *r = sbx_retention_start(s, 86400, 1000, 0);
    assert_non_null(r);
    assert_null(s->on_finished);
    sbx_retention_free(r);
    sbx_retention_free(NULL);
    g_unsetenv("SANDBOX_SNAPSHOT_DIR");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_bytes_written, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_bytes_in_batches, store_fixture_setup,
                                        store_fixture_teardown),
        cmocka_unit_test_setup_teardown(test_no_bytes_bound, store_fixture_setup,
                                        store_fixture_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
