/*
 * Tenants (host-agent/store/tenants.c): add, authenticate, rotate, remove; the key is never
 * stored in the clear; bearers that are wrong, empty, overlong or almost right; names, quotas
 * (the session quotas too: defaults, bounds) and catalogs.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <string.h>

#include "store-fixture.h"
#include "store/tenants.h"

static SbxStore *open_ok(const char *path)
{
    g_autoptr(GError) error = NULL;
    SbxStore *s = sbx_store_open(path, &error);
    if (s == NULL) {
        fail_msg("open %s: %s", path, error->message);
    }
    return s;
}

static char *add_ok(SbxStore *s, const char *name, const SbxTenantQuotas *q, char **catalogs)
{
    g_autoptr(GError) error = NULL;
    char *key = NULL;
    if (!sbx_tenant_add(s, name, q, catalogs, &key, &error)) {
        fail_msg("add %s: %s", name, error->message);
    }
    return key;
}

/* Whether @bearer authenticates; if so, as tenant @name. A refusal must be AUTH. */
static gboolean auth(SbxStore *s, const char *bearer, const char *name)
{
    g_autoptr(GError) error = NULL;
    g_autoptr(SbxTenant) t = NULL;

    if (!sbx_tenant_authenticate(s, bearer, &t, &error)) {
        assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_AUTH));
        assert_null(t);
        return FALSE;
    }
    assert_string_equal(t->name, name);
    return TRUE;
}

static void test_key_form(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autofree char *a = add_ok(s, "alice", NULL, NULL);
    g_autofree char *b = add_ok(s, "bob", NULL, NULL);

    assert_int_equal(strlen(a), SBX_TENANT_KEY_LEN);
    assert_true(g_str_has_prefix(a, "sbx_"));
    for (const char *p = a + 4; *p != '\0'; p++) {
        assert_true(g_ascii_isalnum(*p) || *p == '-' || *p == '_');
    }
    assert_string_not_equal(a, b);
}

static void test_lifecycle(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autoptr(GError) error = NULL;
    g_autofree char *key = add_ok(s, "alice", NULL, NULL);
    g_autofree char *other = add_ok(s, "bob", NULL, NULL);
    g_autofree char *new_key = NULL;
    g_autoptr(SbxTenant) t = NULL;

    assert_true(auth(s, key, "alice"));
    assert_true(auth(s, other, "bob"));
    assert_true(sbx_tenant_get(s, "alice", &t, NULL));
    assert_true(g_str_has_prefix(key, t->key_prefix));
    assert_int_equal(t->quotas.max_concurrent, SBX_TENANT_CONCURRENT_DEFAULT);
    assert_int_equal(t->quotas.max_per_minute, SBX_TENANT_PER_MINUTE_DEFAULT);
    assert_int_equal(t->quotas.max_timeout_ms, SBX_TENANT_TIMEOUT_DEFAULT_MS);
    assert_int_equal(t->quotas.max_output_bytes, SBX_TENANT_OUTPUT_DEFAULT);
    assert_int_equal(t->quotas.max_sessions, SBX_TENANT_SESSIONS_DEFAULT);
    assert_int_equal(t->quotas.max_session_memory_mib, SBX_TENANT_SESSION_MEMORY_DEFAULT_MIB);
    assert_int_equal(g_strv_length(t->catalogs), 0);

    assert_true(sbx_tenant_rotate_key(s, t->id, &new_key, NULL)); /* by id */
    assert_string_not_equal(new_key, key);
    assert_false(auth(s, key, "alice"));
    assert_true(auth(s, new_key, "alice"));
    assert_true(auth(s, other, "bob"));

    assert_true(sbx_tenant_remove(s, "alice", NULL));
    assert_false(auth(s, new_key, "alice"));
    assert_false(sbx_tenant_remove(s, "alice", &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
    g_clear_error(&error);
    assert_false(sbx_tenant_rotate_key(s, "nobody", &new_key, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
    g_autoptr(GPtrArray) list = NULL;
    assert_true(sbx_tenant_list(s, &list, NULL));
    assert_int_equal(list->len, 1);
    assert_string_equal(((SbxTenant *)list->pdata[0])->name, "bob");
}

/* Neither the key nor its random part is anywhere in the files, before or after a checkpoint. */
static void test_key_not_stored(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    g_autofree char *key = add_ok(s, "alice", NULL, NULL);
    g_autofree char *rotated = NULL;
    g_autofree char *hash = g_compute_checksum_for_string(G_CHECKSUM_SHA256, key, -1);

    assert_true(sbx_tenant_rotate_key(s, "alice", &rotated, NULL));
    for (int round = 0; round < 2; round++) {
        g_autoptr(GByteArray) bytes = store_fixture_read_all(f->dir);
        const char *keys[] = {key, rotated, key + SBX_TENANT_KEY_SHOWN,
                              rotated + SBX_TENANT_KEY_SHOWN};
        for (gsize i = 0; i < G_N_ELEMENTS(keys); i++) {
            assert_null(memmem(bytes->data, bytes->len, keys[i], strlen(keys[i])));
        }
        if (round == 0) {
            /* The hash is, at least in the WAL: what was written is searchable. */
            assert_non_null(memmem(bytes->data, bytes->len, hash, strlen(hash)));
            sbx_store_close(s); /* checkpoints the WAL into the file */
        }
    }
}

static void test_bad_bearers(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autofree char *key = add_ok(s, "alice", NULL, NULL);
    g_autofree char *longer = g_strconcat(key, "x", NULL);
    g_autofree char *shorter = g_strndup(key, SBX_TENANT_KEY_LEN - 1);
    g_autofree char *bearer = g_strconcat("Bearer ", key, NULL);
    g_autofree char *flipped = g_strdup(key);
    g_autofree char *huge = g_strnfill(1 << 20, 'a');
    g_autofree char *upper = g_ascii_strup(key, -1);

    flipped[SBX_TENANT_KEY_LEN - 1] = flipped[SBX_TENANT_KEY_LEN - 1] == 'A' ? 'B' : 'A';
    const char *bad[] = {
        NULL,
        "",
        "sbx_",
        "Bearer",
        longer,
        shorter,
        bearer,
        flipped,
        huge,
        upper,
        "sbx_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "sbx_!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!",
    };
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        assert_false(auth(s, bad[i], "alice"));
    }
    assert_true(auth(s, key, "alice"));
}

static void test_names(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autoptr(GError) error = NULL;
    g_autofree char *max = g_strnfill(SBX_TENANT_NAME_MAX, 'n');
    g_autofree char *over = g_strnfill(SBX_TENANT_NAME_MAX + 1, 'n');
    char *key = NULL;
    const char *bad[] = {
        "",           over,    "a b", "a/b", "caf\xc3\xa9", "x\n", "../etc", "t_0123456789abcdef",
        "semi;colon", "'quote"};

    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        assert_false(sbx_tenant_add(s, bad[i], NULL, NULL, &key, &error));
        assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
        assert_null(key);
        g_clear_error(&error);
    }
    assert_false(sbx_tenant_add(s, NULL, NULL, NULL, &key, &error));
    g_clear_error(&error);
    g_autofree char *k1 = add_ok(s, max, NULL, NULL);
    g_autofree char *k2 = add_ok(s, "ok.Name-1_2", NULL, NULL);
    assert_true(g_str_has_prefix(k1, "sbx_") && g_str_has_prefix(k2, "sbx_"));
    assert_false(sbx_tenant_add(s, "ok.Name-1_2", NULL, NULL, &key, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS));
    g_clear_error(&error);
    char *bad_catalogs[] = {"web", "no/slash", NULL};
    assert_false(sbx_tenant_add(s, "carol", NULL, bad_catalogs, &key, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
    g_autoptr(SbxTenant) t = NULL;
    g_clear_error(&error);
    assert_false(sbx_tenant_get(s, "carol", &t, &error)); /* nothing half-added */
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
}

static void test_quotas_and_catalogs(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    g_autoptr(GError) error = NULL;
    SbxTenantQuotas q = {.max_concurrent = 4,
                         .max_per_minute = 10,
                         .max_timeout_ms = 60000,
                         .max_output_bytes = 4096,
                         .max_sessions = 5,
                         .max_session_memory_mib = 2048};
    char *catalogs[] = {"web", "db", "web", NULL};
    g_autofree char *key = add_ok(s, "alice", &q, catalogs);
    char *key2 = NULL;
    g_autoptr(SbxTenant) t = NULL;

    assert_true(sbx_tenant_get(s, "alice", &t, NULL));
    assert_int_equal(t->quotas.max_concurrent, 4);
    assert_int_equal(t->quotas.max_output_bytes, 4096);
    assert_int_equal(t->quotas.max_sessions, 5);
    assert_int_equal(t->quotas.max_session_memory_mib, 2048);
    assert_int_equal(g_strv_length(t->catalogs), 2); /* sorted, once each */
    assert_string_equal(t->catalogs[0], "db");
    assert_string_equal(t->catalogs[1], "web");
    g_autofree char *json = sbx_tenant_to_json(t);
    assert_non_null(strstr(json, "\"catalogs\":[\"db\",\"web\"]"));
    assert_non_null(strstr(json, "\"max_sessions\":5,\"max_session_memory_mib\":2048}"));
    assert_null(strstr(json, key + SBX_TENANT_KEY_SHOWN));

    SbxTenantQuotas over[] = {
        {.max_concurrent = SBX_TENANT_CONCURRENT_MAX + 1},
        {.max_per_minute = SBX_TENANT_PER_MINUTE_MAX + 1},
        {.max_timeout_ms = SBX_TENANT_TIMEOUT_MAX_MS + 1},
        {.max_output_bytes = SBX_TENANT_OUTPUT_MAX + 1},
        {.max_sessions = SBX_TENANT_SESSIONS_MAX + 1},
        {.max_session_memory_mib = SBX_TENANT_SESSION_MEMORY_MAX_MIB + 1},
        {.max_sessions = G_MAXUINT},
        {.max_session_memory_mib = G_MAXUINT64},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(over); i++) {
        assert_false(sbx_tenant_add(s, "bob", &over[i], NULL, &key2, &error));
        assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
        g_clear_error(&error);
        assert_false(sbx_tenant_set_quotas(s, "alice", &over[i], &error));
        assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
        g_clear_error(&error);
    }
    /* The largest of each is allowed; resolve says so without a store. */
    SbxTenantQuotas most = {.max_sessions = SBX_TENANT_SESSIONS_MAX,
                            .max_session_memory_mib = SBX_TENANT_SESSION_MEMORY_MAX_MIB};
    SbxTenantQuotas resolved;
    assert_true(sbx_tenant_quotas_resolve(&most, &resolved, NULL));
    assert_int_equal(resolved.max_sessions, SBX_TENANT_SESSIONS_MAX);
    assert_int_equal(resolved.max_concurrent, SBX_TENANT_CONCURRENT_DEFAULT);
    assert_true(sbx_tenant_quotas_resolve(NULL, &resolved, NULL));
    assert_int_equal(resolved.max_sessions, SBX_TENANT_SESSIONS_DEFAULT);
    assert_int_equal(resolved.max_session_memory_mib, SBX_TENANT_SESSION_MEMORY_DEFAULT_MIB);
    assert_true(sbx_tenant_set_quotas(s, "alice", &most, NULL));
    g_autoptr(SbxTenant) t1 = NULL;
    assert_true(sbx_tenant_get(s, "alice", &t1, NULL));
    assert_int_equal(t1->quotas.max_sessions, SBX_TENANT_SESSIONS_MAX);
    assert_int_equal(t1->quotas.max_session_memory_mib, SBX_TENANT_SESSION_MEMORY_MAX_MIB);
    assert_true(auth(s, key, "alice")); /* the key's column read past the new ones */
    SbxTenantQuotas defaults = {0};
    assert_true(sbx_tenant_set_quotas(s, "alice", &defaults, NULL));
    char *one[] = {"only", NULL};
    assert_true(sbx_tenant_set_catalogs(s, "alice", one, NULL));
    g_autoptr(SbxTenant) t2 = NULL;
    assert_true(sbx_tenant_get(s, "alice", &t2, NULL));
    assert_int_equal(t2->quotas.max_concurrent, SBX_TENANT_CONCURRENT_DEFAULT);
    assert_int_equal(t2->quotas.max_sessions, SBX_TENANT_SESSIONS_DEFAULT);
    assert_int_equal(t2->quotas.max_session_memory_mib, SBX_TENANT_SESSION_MEMORY_DEFAULT_MIB);
    assert_int_equal(g_strv_length(t2->catalogs), 1);
    assert_string_equal(t2->catalogs[0], "only");
    assert_true(sbx_tenant_set_catalogs(s, "alice", NULL, NULL));
    assert_true(sbx_tenant_remove(s, "alice", NULL)); /* its catalogs go with it */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, store_fixture_setup, store_fixture_teardown)
        T(test_key_form),    T(test_lifecycle), T(test_key_not_stored),
        T(test_bad_bearers), T(test_names),     T(test_quotas_and_catalogs),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
