/*
 * The store tests' fixture (store-fixture.h).
 */
#include "store-fixture.h"

#include <glib/gstdio.h>

#include "store/store-private.h"

int store_fixture_setup(void **state)
{
    StoreFixture *f = g_new0(StoreFixture, 1);

    f->dir = g_dir_make_tmp("sbx-store-XXXXXX", NULL);
    g_assert(f->dir != NULL);
    f->path = g_build_filename(f->dir, "state", "sandbox.db", NULL);
    *state = f;
    return 0;
}

/* Remove @path and everything under it (the test's own folder only). */
static void remove_tree(const char *path)
{
    GDir *d = g_dir_open(path, 0, NULL);

    if (d != NULL) {
        const char *name;
        while ((name = g_dir_read_name(d)) != NULL) {
            g_autofree char *child = g_build_filename(path, name, NULL);
            remove_tree(child);
        }
        g_dir_close(d);
        g_rmdir(path);
    } else {
        g_unlink(path);
    }
}

int store_fixture_teardown(void **state)
{
    StoreFixture *f = *state;

    remove_tree(f->dir);
    g_assert(!g_file_test(f->dir, G_FILE_TEST_EXISTS));
    g_free(f->dir);
    g_free(f->path);
    g_free(f);
    return 0;
}

SbxRecord store_fixture_record(const char *id, const char *tenant_id, gint64 created_at_ms)
{
    return (SbxRecord){
        .id = (char *)id,
        .tenant_id = (char *)tenant_id,
        .front_end = "serve",
        .language = "python",
        .code = "print(1)",
        .entry = "main",
        .args_json = "[1,\"two\"]",
        .profile = "q35-serial",
        .snapshot_key = "abc123",
        .image_id = "img-1",
        .timeout_ms = 30000,
        .output_limit = 1024 * 1024,
        .created_at_ms = created_at_ms,
        .started_at_ms = created_at_ms != 0 ? created_at_ms + 1 : 0,
        .boot_ms = 40,
        .entropy_hex = "00112233445566778899aabbccddeeff",
        .guest_clock_ms = 1700000000000,
    };
}

static void read_into(const char *path, GByteArray *out)
{
    GDir *d = g_dir_open(path, 0, NULL);

    if (d == NULL) {
        g_autofree char *data = NULL;
        gsize len = 0;
        if (g_file_get_contents(path, &data, &len, NULL)) {
            g_byte_array_append(out, (const guint8 *)data, (guint)len);
        }
        return;
    }
    const char *name;
    while ((name = g_dir_read_name(d)) != NULL) {
        g_autofree char *child = g_build_filename(path, name, NULL);
        read_into(child, out);
    }
    g_dir_close(d);
}

GByteArray *store_fixture_read_all(const char *dir)
{
    GByteArray *out = g_byte_array_new();
    read_into(dir, out);
    return out;
}

gint64 store_fixture_query_int(SbxStore *store, const char *sql)
{
    sqlite3_stmt *stmt = NULL;

    g_assert_cmpint(sqlite3_prepare_v2(store->db, sql, -1, &stmt, NULL), ==, SQLITE_OK);
    g_assert_cmpint(sqlite3_step(stmt), ==, SQLITE_ROW);
    gint64 v = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
    return v;
}
