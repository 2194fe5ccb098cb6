/*
 * The store's database and execution records (host-agent/store/db.c, records*.c): file modes,
 * WAL and the pragmas, migrations, executions interrupted at open, durability across kill -9,
 * output caps, the code's hash, tenant isolation, paging, retention, the JSON form.
 */
/* cmocka needs these first */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <cJSON.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/paths.h"
#include "store-fixture.h"
#include "store/store-private.h"

static SbxStore *open_ok(const char *path)
{
    g_autoptr(GError) error = NULL;
    SbxStore *s = sbx_store_open(path, &error);
    if (s == NULL) {
        fail_msg("open %s: %s", path, error->message);
    }
    return s;
}

static void begin_ok(SbxStore *s, const SbxRecord *r)
{
    g_autoptr(GError) error = NULL;
    if (!sbx_records_begin(s, r, &error)) {
        fail_msg("begin %s: %s", r->id, error->message);
    }
}

static void finish_ok(SbxStore *s, SbxRecord *r, const SbxRecordCall *calls, gsize n_calls,
                      const SbxRecordApproval *approvals, gsize n_approvals)
{
    g_autoptr(GError) error = NULL;
    if (r->status == NULL) {
        r->status = "ok";
    }
    if (!sbx_records_finish(s, r, calls, n_calls, approvals, n_approvals, &error)) {
        fail_msg("finish %s: %s", r->id, error->message);
    }
}

static SbxRecord *get_ok(SbxStore *s, const char *tenant, const char *id)
{
    g_autoptr(GError) error = NULL;
    SbxRecord *r = NULL;
    if (!sbx_records_get(s, tenant, id, &r, &error)) {
        fail_msg("get %s: %s", id, error->message);
    }
    return r;
}

/* The size the store keeps for record @id (its size_bytes). */
static gint64 size_of(SbxStore *s, const char *id)
{
    g_autofree char *sql = g_strdup_printf("SELECT size_bytes FROM executions WHERE id = '%s'", id);
    return store_fixture_query_int(s, sql);
}

/*
 * What the size of @r finished with @calls and @approvals must be, counted here from the
 * structs: the bytes of every text (the code's hash: 64 hex digits), of its output as kept (at
 * most SBX_RECORD_OUTPUT_MAX a stream), of its calls' and approvals' texts.
 */
static gint64 expected_size(const SbxRecord *r, const SbxRecordCall *calls, gsize n_calls,
                            const SbxRecordApproval *approvals, gsize n_approvals)
{
    const char *texts[] = {
        r->id,         r->tenant_id,      r->front_end,      r->language, r->code,
        r->entry,      r->args_json,      r->kwargs_json,    r->profile,  r->snapshot_key,
        r->image_id,   r->catalog,        r->session_id,     r->status,   r->result_json,
        r->error_json, r->entropy_hex,    r->files_json,     r->seed_hex, r->clock_log_json,
        r->tools_json, r->not_replayable, r->event_log_json,
    };
    gint64 n = 64 + (gint64)MIN(r->stdout_len, (gsize)SBX_RECORD_OUTPUT_MAX) +
               (gint64)MIN(r->stderr_len, (gsize)SBX_RECORD_OUTPUT_MAX);

    for (gsize i = 0; i < G_N_ELEMENTS(texts); i++) {
        n += texts[i] != NULL ? (gint64)strlen(texts[i]) : 0;
    }
    for (gsize i = 0; i < n_calls; i++) {
        const char *c[] = {calls[i].provider,    calls[i].tool,       calls[i].input_json,
                           calls[i].result_json, calls[i].error_json, calls[i].policy_json};
        for (gsize j = 0; j < G_N_ELEMENTS(c); j++) {
            n += c[j] != NULL ? (gint64)strlen(c[j]) : 0;
        }
    }
    for (gsize i = 0; i < n_approvals; i++) {
        const char *a[] = {approvals[i].approval_id, approvals[i].provider, approvals[i].tool,
                           approvals[i].decision, approvals[i].answered_by};
        for (gsize j = 0; j < G_N_ELEMENTS(a); j++) {
            n += a[j] != NULL ? (gint64)strlen(a[j]) : 0;
        }
    }
    return n;
}

static void test_open_modes(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    struct stat st;

    assert_int_equal(stat(f->path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    g_autofree char *dir = g_path_get_dirname(f->path);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    /* The pragmas, as the store's connection has them. */
    sqlite3_stmt *stmt = NULL;
    assert_int_equal(sqlite3_prepare_v2(s->db, "PRAGMA journal_mode", -1, &stmt, NULL), 0);
    assert_int_equal(sqlite3_step(stmt), SQLITE_ROW);
    assert_string_equal((const char *)sqlite3_column_text(stmt, 0), "wal");
    sqlite3_finalize(stmt);
    assert_int_equal(store_fixture_query_int(s, "PRAGMA synchronous"), 2); /* FULL */
    assert_int_equal(store_fixture_query_int(s, "PRAGMA foreign_keys"), 1);
    assert_int_equal(store_fixture_query_int(s, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    assert_int_equal(sbx_store_interrupted_at_open(s), 0);
    /* The -wal file takes the database file's mode. */
    SbxRecord r = store_fixture_record("x1", NULL, 0);
    begin_ok(s, &r);
    g_autofree char *wal = g_strconcat(f->path, "-wal", NULL);
    assert_int_equal(stat(wal, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    sbx_store_close(NULL);
}

static void test_reopen_and_newer_schema(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(GError) error = NULL;

    sbx_store_close(open_ok(f->path));
    SbxStore *s = open_ok(f->path); /* a second open migrates nothing */
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM executions"), 0);
    assert_int_equal(sqlite3_exec(s->db, "PRAGMA user_version = 99", NULL, NULL, NULL), 0);
    sbx_store_close(s);
    assert_null(sbx_store_open(f->path, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB));
    assert_non_null(strstr(error->message, "newer"));
}

/* Take the database of @s back to schema 6: what migration 6 -> 7 adds, removed. */
static void downgrade_to_6(SbxStore *s)
{
    assert_int_equal(sqlite3_exec(s->db,
                                  "DROP INDEX executions_size;"
                                  "ALTER TABLE executions DROP COLUMN size_bytes;"
                                  "PRAGMA user_version = 6;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
}

/* Take the database of @s back to schema 5: what migrations 5 -> 6 -> 7 add, removed. */
static void downgrade_to_5(SbxStore *s)
{
    downgrade_to_6(s);
    assert_int_equal(sqlite3_exec(s->db,
                                  "ALTER TABLE executions DROP COLUMN tools_json;"
                                  "ALTER TABLE executions DROP COLUMN event_log_json;"
                                  "ALTER TABLE executions DROP COLUMN log_open;"
                                  "PRAGMA user_version = 5;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
}

/* Take the database of @s back to schema 4: what migrations 4 -> 5 -> 6 add, removed. */
static void downgrade_to_4(SbxStore *s)
{
    downgrade_to_5(s);
    assert_int_equal(sqlite3_exec(s->db,
                                  "ALTER TABLE executions DROP COLUMN seed_hex;"
                                  "ALTER TABLE executions DROP COLUMN clock_log_json;"
                                  "ALTER TABLE executions DROP COLUMN replayable;"
                                  "ALTER TABLE executions DROP COLUMN not_replayable;"
                                  "PRAGMA user_version = 4;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
}

/* Take the database of @s back to schema 3: what migrations 3 -> 4 -> 5 add, removed. */
static void downgrade_to_3(SbxStore *s)
{
    downgrade_to_4(s);
    assert_int_equal(sqlite3_exec(s->db,
                                  "ALTER TABLE executions DROP COLUMN kwargs_json;"
                                  "ALTER TABLE executions DROP COLUMN files_json;"
                                  "PRAGMA user_version = 3;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
}

/* Take the database of @s back to schema 2: what migrations 2 -> 3 -> 4 add, removed. */
static void downgrade_to_2(SbxStore *s)
{
    downgrade_to_3(s);
    assert_int_equal(sqlite3_exec(s->db,
                                  "DROP TABLE sessions;"
                                  "DROP INDEX executions_session;"
                                  "ALTER TABLE executions DROP COLUMN session_id;"
                                  "ALTER TABLE tenants DROP COLUMN max_sessions;"
                                  "ALTER TABLE tenants DROP COLUMN max_session_memory_mib;"
                                  "PRAGMA user_version = 2;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
}

/* A database of schema 1 (before records kept the catalog) is migrated at open, its records
 * kept. */
static void test_migrate_from_1(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    SbxRecord old = store_fixture_record("old-1", NULL, 0);

    begin_ok(s, &old);
    downgrade_to_2(s);
    assert_int_equal(sqlite3_exec(s->db,
                                  "ALTER TABLE executions DROP COLUMN catalog;"
                                  "PRAGMA user_version = 1;",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    sbx_store_close(s);
    s = open_ok(f->path);
    assert_int_equal(store_fixture_query_int(s, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    SbxRecord r = store_fixture_record("new-1", "t1", 0);
    r.catalog = "approvals";
    begin_ok(s, &r);
    g_autoptr(SbxRecord) got = get_ok(s, NULL, "new-1");
    assert_string_equal(got->catalog, "approvals");
    g_autoptr(SbxRecord) kept = get_ok(s, NULL, "old-1");
    assert_null(kept->catalog);
    sbx_store_close(s);
}

/*
 * A database of schema 3 (before kwargs and files were kept) is migrated at open: its records
 * kept with neither; a new record keeps its kwargs from the begin and its files from the finish.
 */
static void test_migrate_from_3(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    SbxRecord old = store_fixture_record("old-3", NULL, 1000);

    begin_ok(s, &old);
    finish_ok(s, &old, NULL, 0, NULL, 0);
    downgrade_to_3(s);
    sbx_store_close(s);

    s = open_ok(f->path);
    assert_int_equal(store_fixture_query_int(s, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    g_autoptr(SbxRecord) kept = get_ok(s, NULL, "old-3");
    assert_null(kept->kwargs_json);
    assert_null(kept->files_json);
    SbxRecord r = store_fixture_record("new-4", NULL, 2000);
    r.entry = "f";
    r.kwargs_json = "{\"scale\":0.5}";
    begin_ok(s, &r);
    r.files_json = "{\"changed\":[{\"path\":\"a\",\"size\":1,\"sha256\":null}],"
                   "\"truncated\":false,\"error\":null}";
    finish_ok(s, &r, NULL, 0, NULL, 0);
    g_autoptr(SbxRecord) got = get_ok(s, NULL, "new-4");
    assert_string_equal(got->kwargs_json, "{\"scale\":0.5}");
    assert_string_equal(got->files_json, r.files_json);
    g_autofree char *json = sbx_record_to_json(got);
    assert_non_null(strstr(json, "\"kwargs\":{\"scale\":0.5}"));
    assert_non_null(strstr(json, "\"files\":{\"changed\":[{\"path\":\"a\""));
    /* JSON or nothing: a files text that is not JSON is refused at the finish */
    SbxRecord bad = store_fixture_record("bad-4", NULL, 3000);
    begin_ok(s, &bad);
    bad.status = "ok";
    bad.files_json = "{";
    g_autoptr(GError) error = NULL;
    assert_false(sbx_records_finish(s, &bad, NULL, 0, NULL, 0, &error));
    assert_non_null(strstr(error->message, "files_json"));
    sbx_store_close(s);
}

/*
 * A database of schema 4 (before the replay members) is migrated at open: its records kept,
 * with no seed, no clock log and replayable unknown (null); a new record keeps all three, and
 * the JSON form shows them (docs/service.md, "Records").
 */
static void test_migrate_from_4(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    SbxRecord old = store_fixture_record("old-4", NULL, 1000);

    begin_ok(s, &old);
    old.status = "ok";
    finish_ok(s, &old, NULL, 0, NULL, 0);
    downgrade_to_4(s);
    sbx_store_close(s);

    s = open_ok(f->path);
    assert_int_equal(store_fixture_query_int(s, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    g_autoptr(SbxRecord) kept = get_ok(s, NULL, "old-4");
    assert_null(kept->seed_hex);
    assert_null(kept->clock_log_json);
    assert_false(kept->has_replayable);
    g_autofree char *old_json = sbx_record_to_json(kept);
    assert_non_null(strstr(old_json, "\"clock_log\":null,\"replayable\":null"));

    SbxRecord r = store_fixture_record("new-5", NULL, 2000);
    begin_ok(s, &r);
    r.status = "ok";
    r.seed_hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    r.clock_log_json = "[1800000000000123,5,9007199254740991]";
    r.has_replayable = TRUE;
    r.replayable = TRUE;
    finish_ok(s, &r, NULL, 0, NULL, 0);
    SbxRecord n = store_fixture_record("new-5-not", NULL, 3000);
    begin_ok(s, &n);
    n.status = "ok";
    n.has_replayable = TRUE;
    n.not_replayable = "a thread was started (threading.Thread.start: Thread-1)";
    finish_ok(s, &n, NULL, 0, NULL, 0);

    g_autoptr(SbxRecord) got = get_ok(s, NULL, "new-5");
    assert_string_equal(got->seed_hex, r.seed_hex);
    assert_string_equal(got->clock_log_json, r.clock_log_json);
    assert_true(got->has_replayable && got->replayable);
    assert_null(got->not_replayable);
    g_autofree char *json = sbx_record_to_json(got);
    assert_non_null(strstr(json, "\"seed\":\"000102"));
    assert_non_null(strstr(json, "\"clock_log\":[1800000000000123,5,9007199254740991],"
                                 "\"replayable\":true,\"not_replayable\":null"));
    g_autoptr(SbxRecord) not = get_ok(s, NULL, "new-5-not");
    assert_true(not ->has_replayable);
    assert_false(not ->replayable);
    assert_string_equal(not ->not_replayable, n.not_replayable);
    /* JSON or nothing: a clock log that is not JSON is refused at the finish */
    SbxRecord bad = store_fixture_record("bad-5", NULL, 4000);
    begin_ok(s, &bad);
    bad.status = "ok";
    bad.clock_log_json = "[1,";
    g_autoptr(GError) error = NULL;
    assert_false(sbx_records_finish(s, &bad, NULL, 0, NULL, 0, &error));
    assert_non_null(strstr(error->message, "clock_log_json"));
    sbx_store_close(s);
}

/*
 * A database of schema 5 (before the event log and the tools given) is migrated at open: its
 * records kept with no event log, log_open unknown (null) and no tools; a new record keeps them,
 * and the JSON form shows them (docs/service.md, "Records").
 */
static void test_migrate_from_5(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    SbxRecord old = store_fixture_record("old-5", NULL, 1000);

    begin_ok(s, &old);
    old.status = "ok";
    finish_ok(s, &old, NULL, 0, NULL, 0);
    downgrade_to_5(s);
    sbx_store_close(s);

    s = open_ok(f->path);
    assert_int_equal(store_fixture_query_int(s, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    g_autoptr(SbxRecord) kept = get_ok(s, NULL, "old-5");
    assert_null(kept->event_log_json);
    assert_false(kept->has_log_open);
    assert_null(kept->tools_json);
    g_autofree char *old_json = sbx_record_to_json(kept);
    assert_non_null(strstr(old_json, "\"event_log\":null,\"log_open\":null"));

    SbxRecord r = store_fixture_record("new-6", NULL, 2000);
    begin_ok(s, &r);
    r.status = "timeout";
    r.clock_log_json = "[1800000000000123]";
    r.event_log_json = "[3,2,5]";
    r.has_replayable = TRUE;
    r.replayable = TRUE;
    r.has_log_open = TRUE;
    r.log_open = TRUE;
    r.tools_json = "[{\"provider\":\"calc\",\"tools\":[{\"name\":\"add\"}]}]";
    finish_ok(s, &r, NULL, 0, NULL, 0);
    g_autoptr(SbxRecord) got = get_ok(s, NULL, "new-6");
    assert_string_equal(got->tools_json, r.tools_json);
    assert_string_equal(got->event_log_json, "[3,2,5]");
    assert_true(got->has_log_open && got->log_open);
    g_autofree char *json = sbx_record_to_json(got);
    assert_non_null(strstr(json, "\"event_log\":[3,2,5],\"log_open\":true"));
    assert_non_null(strstr(json, ",\"tools\":[{\"provider\":\"calc\""));
    /* JSON or nothing: an event log or tools that are not JSON are refused at the finish */
    const char *fields[] = {"event_log_json", "tools_json"};
    for (gsize i = 0; i < G_N_ELEMENTS(fields); i++) {
        g_autofree char *id = g_strdup_printf("bad-6-%zu", i);
        SbxRecord bad = store_fixture_record(id, NULL, 3000 + (gint64)i);
        begin_ok(s, &bad);
        bad.status = "ok";
        *(i == 0 ? &bad.event_log_json : &bad.tools_json) = "[1,";
        g_autoptr(GError) error = NULL;
        assert_false(sbx_records_finish(s, &bad, NULL, 0, NULL, 0, &error));
        assert_non_null(strstr(error->message, fields[i]));
    }
    sbx_store_close(s);
}

/*
 * A database of schema 6 (before records had a size) is migrated at open: each record's size is
 * computed, the one the finish computes (its texts, output, calls and approvals, in bytes), a
 * running one's too (the server's open interrupts it), and the index pruning by size reads is
 * made; the bound on bytes then prunes the migrated records.
 */
static void test_migrate_from_6(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    SbxRecord old = store_fixture_record("old-6", NULL, 1000);
    SbxRecord running = store_fixture_record("old-6-running", NULL, 500);
    SbxRecordCall call = {.provider = "p",
                          .tool = "t",
                          .input_json = "{\"q\":\"\u00e9\"}",
                          .ok = TRUE,
                          .result_json = "[1,2]"};
    SbxRecordApproval ap = {.approval_id = "a1",
                            .provider = "p",
                            .tool = "t",
                            .decision = "approved",
                            .answered_by = "ops",
                            .asked_at_ms = 1};

    old.code = "print('\u00e9t\u00e9')"; /* 2-byte characters: bytes, not characters, count */
    begin_ok(s, &old);
    old.stdout_data = "out\0put";
    old.stdout_len = 7;
    old.result_json = "{\"v\":\"\u00e9\"}";
    finish_ok(s, &old, &call, 1, &ap, 1);
    begin_ok(s, &running);
    gint64 size = size_of(s, "old-6");
    assert_int_equal(size, expected_size(&old, &call, 1, &ap, 1));
    downgrade_to_6(s);
    sbx_store_close(s);

    s = open_ok(f->path); /* a server's: the running one is interrupted */
    assert_int_equal(store_fixture_query_int(s, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    assert_int_equal(size_of(s, "old-6"), size);
    running.status = "interrupted";
    assert_int_equal(size_of(s, "old-6-running"), expected_size(&running, NULL, 0, NULL, 0));
    assert_int_equal(
        store_fixture_query_int(s, "SELECT count(*) FROM sqlite_master WHERE type = 'index'"
                                   " AND name = 'executions_size'"),
        1);
    guint deleted = 0;
    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){.max_bytes = (guint64)size}, &deleted, NULL,
                                  NULL, NULL));
    assert_int_equal(deleted, 1); /* the interrupted one, older */
    assert_int_equal(
        store_fixture_query_int(s, "SELECT count(*) FROM executions WHERE id = 'old-6'"), 1);
    sbx_store_close(s);
}

/*
 * A database of schema 2 (before sessions) is migrated at open: its records and tenants kept
 * (the tenants with the session quotas' defaults), executions of no session, sessions usable;
 * and a server's open of it interrupts what was running, as before.
 */
static void test_migrate_from_2(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    SbxRecord old = store_fixture_record("old-2", "t_00000000000000aa", 1000);
    SbxRecord running = store_fixture_record("old-running", NULL, 2000);

    old.catalog = "web";
    begin_ok(s, &old);
    old.status = "ok";
    finish_ok(s, &old, NULL, 0, NULL, 0);
    begin_ok(s, &running);
    assert_int_equal(
        sqlite3_exec(s->db,
                     "INSERT INTO tenants (id, name, created_at, key_hash, key_prefix,"
                     " max_concurrent, max_per_minute, max_timeout_ms, max_output_bytes)"
                     " VALUES ('t_00000000000000aa', 'alice', 1, 'hash', 'sbx_abcdef', 3, 30,"
                     " 60000, 4096)",
                     NULL, NULL, NULL),
        SQLITE_OK);
    downgrade_to_2(s);
    sbx_store_close(s);

    s = open_ok(f->path);
    assert_int_equal(store_fixture_query_int(s, "PRAGMA user_version"), SBX_STORE_SCHEMA_VERSION);
    assert_int_equal(sbx_store_interrupted_at_open(s), 1);
    assert_int_equal(sbx_store_sessions_interrupted_at_open(s), 0);
    g_autoptr(SbxRecord) kept = get_ok(s, NULL, "old-2");
    assert_string_equal(kept->status, "ok");
    assert_string_equal(kept->catalog, "web");
    assert_string_equal(kept->tenant_id, "t_00000000000000aa");
    assert_null(kept->session_id);
    g_autoptr(SbxRecord) interrupted = get_ok(s, NULL, "old-running");
    assert_string_equal(interrupted->status, "interrupted");
    /* The tenant, its quotas, and the session quotas' defaults of schema 3 (literals in the
     * migration: the constants' values when it was written). */
    assert_int_equal(store_fixture_query_int(s, "SELECT max_concurrent FROM tenants"), 3);
    assert_int_equal(store_fixture_query_int(s, "SELECT max_output_bytes FROM tenants"), 4096);
    assert_int_equal(store_fixture_query_int(s, "SELECT max_sessions FROM tenants"), 2);
    assert_int_equal(store_fixture_query_int(s, "SELECT max_session_memory_mib FROM tenants"),
                     1024);
    /* The new parts work on the migrated file. */
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM sessions"), 0);
    SbxRecord in_session = store_fixture_record("new-3", "t_00000000000000aa", 3000);
    in_session.session_id = "s-1";
    begin_ok(s, &in_session);
    g_autoptr(SbxRecord) got = get_ok(s, NULL, "new-3");
    assert_string_equal(got->session_id, "s-1");
    sbx_store_close(s);
}

static void test_not_a_database(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(GError) error = NULL;
    g_autofree char *dir = g_path_get_dirname(f->path);

    assert_int_equal(g_mkdir_with_parents(dir, 0700), 0);
    assert_true(g_file_set_contents(f->path,
                                    "this is no database, just some text; padding "
                                    "padding padding padding padding padding padding",
                                    -1, NULL));
    assert_null(sbx_store_open(f->path, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB));
}

static void test_default_path(void **state)
{
    (void)state;
    g_autofree char *old = g_strdup(g_getenv("SANDBOX_STATE_DIR"));

    g_setenv("SANDBOX_STATE_DIR", "/some/where", TRUE);
    g_autofree char *p = sbx_store_default_path();
    assert_string_equal(p, "/some/where/sandbox.db");
    g_unsetenv("SANDBOX_STATE_DIR");
    g_autofree char *q = sbx_store_default_path();
    g_autofree char *dir = sbx_paths_state_dir(); /* the build tree's here (base/paths.h) */
    g_autofree char *expect = g_build_filename(dir, "sandbox.db", NULL);
    assert_string_equal(q, expect);
    if (old != NULL) {
        g_setenv("SANDBOX_STATE_DIR", old, TRUE);
    }
}

static void test_interrupted_at_open(void **state)
{
    StoreFixture *f = *state;
    SbxStore *s = open_ok(f->path);
    SbxRecord running = store_fixture_record("run-1", NULL, 0);
    SbxRecord queued = store_fixture_record("queued-1", NULL, 0);
    SbxRecord done = store_fixture_record("done-1", NULL, 0);

    queued.status = "queued";
    begin_ok(s, &running);
    begin_ok(s, &queued);
    begin_ok(s, &done);
    finish_ok(s, &done, NULL, 0, NULL, 0);
    sbx_store_close(s); /* without finishing two: as a server that was killed */

    /* A client (`sandbox records`, `sandbox run` beside a server) leaves them alone. */
    g_autoptr(GError) error = NULL;
    s = sbx_store_open_client(f->path, &error);
    assert_non_null(s);
    assert_int_equal(sbx_store_interrupted_at_open(s), 0);
    g_autoptr(SbxRecord) still = get_ok(s, NULL, "run-1");
    assert_string_equal(still->status, "running");
    sbx_store_close(s);

    s = open_ok(f->path);
    assert_int_equal(sbx_store_interrupted_at_open(s), 2);
    const char *ids[] = {"run-1", "queued-1"};
    for (gsize i = 0; i < G_N_ELEMENTS(ids); i++) {
        g_autoptr(SbxRecord) r = get_ok(s, NULL, ids[i]);
        assert_string_equal(r->status, "interrupted");
        assert_true(r->finished_at_ms > 0);
    }
    g_autoptr(SbxRecord) d = get_ok(s, NULL, "done-1");
    assert_string_equal(d->status, "ok");
    sbx_store_close(s);
    s = open_ok(f->path);
    assert_int_equal(sbx_store_interrupted_at_open(s), 0);
    sbx_store_close(s);
}

/* One server per database: a second server's open fails and says why; clients still open it;
 * the lock goes with the first server's close. */
static void test_one_server(void **state)
{
    StoreFixture *f = *state;
    SbxStore *first = open_ok(f->path);
    g_autoptr(GError) error = NULL;

    assert_null(sbx_store_open(f->path, &error));
    assert_non_null(error);
    assert_non_null(strstr(error->message, "another `sandbox serve` uses this database"));
    SbxStore *client = sbx_store_open_client(f->path, NULL);
    assert_non_null(client);
    sbx_store_close(client);
    sbx_store_close(first);
    sbx_store_close(open_ok(f->path));
}

/*
 * A child opens the store, records an execution (begun and, if @finish, finished) and is
 * SIGKILLed before it closes anything: the parent must find the record as the child left it.
 */
static void killed_writer(const char *path, gboolean finish)
{
    pid_t pid = fork();

    assert_true(pid >= 0);
    if (pid == 0) {
        g_autoptr(GError) error = NULL;
        SbxStore *s = sbx_store_open(path, &error);
        SbxRecord r = store_fixture_record("durable-1", NULL, 0);
        SbxRecordCall call = {.call_id = 7,
                              .provider = "p",
                              .tool = "t",
                              .input_json = "{}",
                              .ok = TRUE,
                              .result_json = "1"};
        r.stdout_data = "hello\n";
        r.stdout_len = 6;
        gboolean ok = s != NULL && sbx_records_begin(s, &r, &error);
        r.status = "ok";
        ok = ok && (!finish || sbx_records_finish(s, &r, &call, 1, NULL, 0, &error));
        if (!ok) {
            fprintf(stderr, "child: %s\n", error->message);
            _exit(3);
        }
        raise(SIGKILL);
        _exit(4);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        fail_msg("the writer was not killed: status 0x%x", status);
    }
}

static void test_durable_across_kill(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(GPtrArray) calls = NULL, approvals = NULL;
    g_autoptr(GError) error = NULL;

    killed_writer(f->path, TRUE);
    g_autoptr(SbxStore) s = open_ok(f->path);
    assert_int_equal(sbx_store_interrupted_at_open(s), 0);
    g_autoptr(SbxRecord) r = get_ok(s, NULL, "durable-1");
    assert_string_equal(r->status, "ok");
    assert_int_equal(r->stdout_len, 6);
    assert_memory_equal(r->stdout_data, "hello\n", 6);
    assert_true(sbx_records_get_calls(s, NULL, "durable-1", &calls, &approvals, &error));
    assert_int_equal(calls->len, 1);
    assert_int_equal(((SbxRecordCall *)calls->pdata[0])->call_id, 7);
}

static void test_killed_while_running(void **state)
{
    StoreFixture *f = *state;

    killed_writer(f->path, FALSE);
    g_autoptr(SbxStore) s = open_ok(f->path);
    assert_int_equal(sbx_store_interrupted_at_open(s), 1);
    g_autoptr(SbxRecord) r = get_ok(s, NULL, "durable-1");
    assert_string_equal(r->status, "interrupted");
}

static void test_code_hash(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    SbxRecord a = store_fixture_record("h1", NULL, 0);
    SbxRecord b = store_fixture_record("h2", NULL, 0);

    a.code = "abc";
    a.code_sha256 = "not what the store computes";
    b.code = "console.log('é')\n";
    begin_ok(s, &a);
    begin_ok(s, &b);
    g_autoptr(SbxRecord) ra = get_ok(s, NULL, "h1");
    assert_string_equal(ra->code_sha256,
                        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    g_autoptr(SbxRecord) rb = get_ok(s, NULL, "h2");
    g_autofree char *want = g_compute_checksum_for_string(G_CHECKSUM_SHA256, b.code, -1);
    assert_string_equal(rb->code_sha256, want);
    assert_string_equal(rb->code, b.code);
}

static void test_output_cap(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    SbxRecord r = store_fixture_record("cap-1", NULL, 0);
    gsize big = SBX_RECORD_OUTPUT_MAX + 10;
    g_autofree char *out = g_malloc(big);

    memset(out, 'x', big);
    begin_ok(s, &r);
    r.stdout_data = out;
    r.stdout_len = big;
    r.stderr_data = "a\0b\xff";
    r.stderr_len = 4;
    finish_ok(s, &r, NULL, 0, NULL, 0);
    g_autoptr(SbxRecord) got = get_ok(s, NULL, "cap-1");
    assert_int_equal(got->stdout_len, SBX_RECORD_OUTPUT_MAX);
    assert_true(got->stdout_truncated);
    assert_int_equal(got->stderr_len, 4);
    assert_memory_equal(got->stderr_data, "a\0b\xff", 4);
    assert_false(got->stderr_truncated);
    /* A stream the front end cut (output limit) stays flagged though it fits. */
    r.stdout_len = 10;
    r.stdout_truncated = TRUE;
    finish_ok(s, &r, NULL, 0, NULL, 0);
    g_autoptr(SbxRecord) again = get_ok(s, NULL, "cap-1");
    assert_int_equal(again->stdout_len, 10);
    assert_true(again->stdout_truncated);
}

static void test_invalid_records(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    SbxRecord r = store_fixture_record("v-1", NULL, 0);
    g_autoptr(GError) error = NULL;
    struct {
        const char *id, *code, *args, *status;
    } bad[] = {
        {"", "1", NULL, NULL},       {"a b", "1", NULL, NULL},    {"v-2", NULL, NULL, NULL},
        {"v-3", "\xff", NULL, NULL}, {"v-4", "1", "{nope", NULL}, {"v-5", "1", NULL, "ok"},
    };
    for (gsize i = 0; i < G_N_ELEMENTS(bad); i++) {
        SbxRecord b = store_fixture_record(bad[i].id, NULL, 0);
        b.code = (char *)bad[i].code;
        b.args_json = (char *)bad[i].args;
        b.status = (char *)bad[i].status;
        assert_false(sbx_records_begin(s, &b, &error));
        assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
        g_clear_error(&error);
    }
    begin_ok(s, &r);
    assert_false(sbx_records_begin(s, &r, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS));
    g_clear_error(&error);
    r.status = "running";
    assert_false(sbx_records_finish(s, &r, NULL, 0, NULL, 0, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
    g_clear_error(&error);
    r.status = "ok";
    r.result_json = "[1,";
    assert_false(sbx_records_finish(s, &r, NULL, 0, NULL, 0, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
    g_clear_error(&error);
    SbxRecordCall no_input = {.provider = "p", .tool = "t"};
    r.result_json = NULL;
    assert_false(sbx_records_finish(s, &r, &no_input, 1, NULL, 0, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID));
    g_clear_error(&error);
    SbxRecord ghost = store_fixture_record("ghost", NULL, 0);
    ghost.status = "ok";
    assert_false(sbx_records_finish(s, &ghost, NULL, 0, NULL, 0, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
    g_autoptr(SbxRecord) still = get_ok(s, NULL, "v-1");
    assert_string_equal(still->status, "running"); /* no failed finish changed it */
}

static void test_other_tenant_not_found(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    SbxRecord r = store_fixture_record("mine", "t_00000000000000aa", 0);
    g_autoptr(GError) error = NULL;
    g_autoptr(GPtrArray) calls = NULL, approvals = NULL, list = NULL;
    SbxRecord *got = NULL;

    begin_ok(s, &r);
    assert_false(sbx_records_get(s, "t_00000000000000bb", "mine", &got, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
    assert_null(got);
    g_clear_error(&error);
    assert_false(
        sbx_records_get_calls(s, "t_00000000000000bb", "mine", &calls, &approvals, &error));
    assert_true(g_error_matches(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND));
    assert_null(calls);
    SbxRecordFilter other = {.tenant_id = "t_00000000000000bb"};
    assert_true(sbx_records_list(s, &other, &list, NULL));
    assert_int_equal(list->len, 0);
    g_autoptr(SbxRecord) own = get_ok(s, "t_00000000000000aa", "mine");
    g_autoptr(SbxRecord) any = get_ok(s, NULL, "mine"); /* the operator's view: any tenant's */
    assert_string_equal(own->tenant_id, "t_00000000000000aa");
    assert_string_equal(any->tenant_id, "t_00000000000000aa");
}

/* Every page of @f (limit 7) through the cursor: the ids in order. */
static GPtrArray *all_pages(SbxStore *s, SbxRecordFilter f)
{
    GPtrArray *ids = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *cursor = NULL;

    f.limit = 7;
    for (;;) {
        g_autoptr(GPtrArray) page = NULL;
        f.cursor_id = cursor;
        assert_true(sbx_records_list(s, &f, &page, NULL));
        for (guint i = 0; i < page->len; i++) {
            const SbxRecord *r = page->pdata[i];
            assert_null(r->code); /* lists leave the large fields out */
            g_ptr_array_add(ids, g_strdup(r->id));
        }
        if (page->len < f.limit) {
            return ids;
        }
        const SbxRecord *last = page->pdata[page->len - 1];
        g_free(cursor);
        cursor = g_strdup(last->id);
        f.cursor_created_ms = last->created_at_ms;
    }
}

static void test_list_paging(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);

    /* 25 records, three to a millisecond (the id breaks ties); odd ones tenant a's, every
     * fifth finished "error". */
    for (int i = 0; i < 25; i++) {
        g_autofree char *id = g_strdup_printf("r%02d", i);
        SbxRecord r = store_fixture_record(id, i % 2 ? "t_00000000000000aa" : NULL, 1000 + i / 3);
        begin_ok(s, &r);
        r.status = i % 5 == 0 ? "error" : "ok";
        finish_ok(s, &r, NULL, 0, NULL, 0);
    }
    g_autoptr(GPtrArray) all = all_pages(s, (SbxRecordFilter){0});
    assert_int_equal(all->len, 25);
    for (guint i = 0; i < 25; i++) { /* newest first */
        g_autofree char *want = g_strdup_printf("r%02u", 24 - i);
        assert_string_equal(all->pdata[i], want);
    }
    g_autoptr(GPtrArray) mine = all_pages(s, (SbxRecordFilter){.tenant_id = "t_00000000000000aa"});
    assert_int_equal(mine->len, 12);
    g_autoptr(GPtrArray) errors = all_pages(s, (SbxRecordFilter){.status = "error"});
    assert_int_equal(errors->len, 5);
    g_autoptr(GPtrArray) window =
        all_pages(s, (SbxRecordFilter){.created_after_ms = 1002, .created_before_ms = 1005});
    assert_int_equal(window->len, 6); /* ms 1003 and 1004: r09..r14 */
    assert_string_equal(window->pdata[0], "r14");
    assert_string_equal(window->pdata[5], "r09");
    g_autoptr(GPtrArray) big = NULL;
    SbxRecordFilter huge = {.limit = 1u << 30};
    assert_true(sbx_records_list(s, &huge, &big, NULL));
    assert_int_equal(big->len, 25);
}

static void add_finished(SbxStore *s, const char *id, gint64 created, const char *status)
{
    SbxRecord r = store_fixture_record(id, NULL, created);
    SbxRecordCall call = {.provider = "p", .tool = "t", .input_json = "{}", .ok = TRUE};
    SbxRecordApproval ap = {.approval_id = "a1",
                            .provider = "p",
                            .tool = "t",
                            .decision = "approved",
                            .answered_by = "ops",
                            .asked_at_ms = created};

    begin_ok(s, &r);
    if (status != NULL) {
        r.status = (char *)status;
        finish_ok(s, &r, &call, 1, &ap, 1);
    }
}

static void test_prune(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    gint64 now = sbx_store_now_ms(), day = 24 * 3600 * 1000ll;
    guint deleted = 0;

    add_finished(s, "old-1", now - 10 * day, "ok");
    add_finished(s, "old-2", now - 9 * day, "error");
    add_finished(s, "old-running", now - 10 * day, NULL);
    for (int i = 0; i < 5; i++) {
        g_autofree char *id = g_strdup_printf("new-%d", i);
        add_finished(s, id, now - 1000 + i, "ok");
    }
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM tool_calls"), 7);
    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){.max_age_s = 24 * 3600}, &deleted, NULL,
                                  NULL, NULL));
    assert_int_equal(deleted, 2);
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM executions"), 6);
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM tool_calls"),
                     5); /* cascade */
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM approvals"), 5);
    assert_int_equal(store_fixture_query_int(
                         s, "SELECT count(*) FROM tool_calls WHERE execution_id LIKE 'old%'"),
                     0);
    /* By count: the newest 2 finished stay; a running one is never pruned. */
    assert_true(
        sbx_records_prune(s, &(SbxRecordsPrune){.max_count = 2}, &deleted, NULL, NULL, NULL));
    assert_int_equal(deleted, 3);
    g_autoptr(GPtrArray) left = NULL;
    assert_true(sbx_records_list(s, NULL, &left, NULL));
    assert_int_equal(left->len, 3);
    assert_string_equal(((SbxRecord *)left->pdata[0])->id, "new-4");
    assert_string_equal(((SbxRecord *)left->pdata[1])->id, "new-3");
    assert_string_equal(((SbxRecord *)left->pdata[2])->id, "old-running");
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM approvals"), 2);
    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){0}, NULL, NULL, NULL,
                                  NULL)); /* no bound: nothing */
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM executions"), 3);
}

/* The hook of sbx_records_set_on_finished() in the tests: how many calls, their sizes' sum. */
typedef struct {
    guint calls;
    guint64 bytes;
} Finished;

static void on_finished(guint64 size_bytes, gpointer data)
{
    Finished *f = data;
    f->calls++;
    f->bytes += size_bytes;
}

/*
 * A record's size: 0 while it runs; at its finish, the bytes of all it keeps (texts in bytes,
 * output as kept, calls and approvals), told to the hook; a second finish replaces it; a
 * failed finish tells nothing.
 */
static void test_record_size(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    SbxRecord r = store_fixture_record("size-1", "t_00000000000000aa", 1000);
    SbxRecordCall calls[2] = {
        {.provider = "web",
         .tool = "get",
         .input_json = "{\"u\":\"\u00fc\"}",
         .ok = TRUE,
         .result_json = "\"\u4e16\u754c\"",
         .policy_json = "{\"action\":\"ask\"}"},
        {.provider = "web", .tool = "put", .input_json = "{}", .error_json = "{\"code\":1}"},
    };
    SbxRecordApproval ap = {.approval_id = "a-1",
                            .provider = "web",
                            .tool = "get",
                            .decision = "approved",
                            .answered_by = "ops",
                            .asked_at_ms = 1};
    Finished seen = {0};
    g_autofree char *big = g_malloc0(SBX_RECORD_OUTPUT_MAX + 100);

    r.code = "print('\u00e9\u4e16')";
    r.kwargs_json = "{\"k\":\"\u00e9\"}";
    r.catalog = "web";
    begin_ok(s, &r);
    assert_int_equal(size_of(s, "size-1"), 0); /* running: counts for nothing */
    sbx_records_set_on_finished(s, on_finished, &seen);
    r.status = "ok";
    r.result_json = "{\"r\":\"\u00e9\"}";
    r.stdout_data = big; /* cut at its cap: the size counts what is kept */
    r.stdout_len = SBX_RECORD_OUTPUT_MAX + 100;
    r.stderr_data = "e\0rr";
    r.stderr_len = 4;
    r.seed_hex = "0011";
    r.clock_log_json = "[1,2]";
    r.event_log_json = "[3]";
    r.tools_json = "[{\"provider\":\"web\",\"tools\":[]}]";
    r.files_json = "{\"changed\":[]}";
    r.not_replayable = "why";
    finish_ok(s, &r, calls, 2, &ap, 1);
    gint64 want = expected_size(&r, calls, 2, &ap, 1);
    assert_true(want > SBX_RECORD_OUTPUT_MAX);
    assert_int_equal(size_of(s, "size-1"), want);
    assert_int_equal(seen.calls, 1);
    assert_int_equal(seen.bytes, (guint64)want);

    /* Finished again, with less: the size is the second's, not a sum. */
    r.stdout_data = "x";
    r.stdout_len = 1;
    finish_ok(s, &r, calls, 1, NULL, 0);
    assert_int_equal(size_of(s, "size-1"), expected_size(&r, calls, 1, NULL, 0));
    assert_int_equal(seen.calls, 2);

    /* A finish refused, or of no record: no call. */
    SbxRecord ghost = store_fixture_record("ghost", NULL, 0);
    ghost.status = "ok";
    assert_false(sbx_records_finish(s, &ghost, NULL, 0, NULL, 0, NULL));
    assert_int_equal(seen.calls, 2);
    sbx_records_set_on_finished(s, NULL, NULL);
    finish_ok(s, &r, NULL, 0, NULL, 0);
    assert_int_equal(seen.calls, 2);
}

/* Record @id finished "ok" at @created with @out_len bytes of output: its size (size_of()). */
static gint64 add_sized(SbxStore *s, const char *id, gint64 created, gsize out_len)
{
    SbxRecord r = store_fixture_record(id, NULL, created);
    g_autofree char *out = g_malloc0(out_len + 1);
    SbxRecordCall call = {.provider = "p", .tool = "t", .input_json = "{}", .ok = TRUE};

    begin_ok(s, &r);
    r.stdout_data = out;
    r.stdout_len = out_len;
    finish_ok(s, &r, &call, 1, NULL, 0);
    return size_of(s, id);
}

/* The ids of the records left, oldest first, joined by spaces. */
static char *ids_left(SbxStore *s)
{
    g_autoptr(GPtrArray) all = NULL;
    SbxRecordFilter f = {.limit = SBX_RECORDS_LIST_MAX, .oldest_first = TRUE};
    g_autoptr(GString) out = g_string_new(NULL);

    assert_true(sbx_records_list(s, &f, &all, NULL));
    for (guint i = 0; i < all->len; i++) {
        g_string_append_printf(out, "%s%s", i > 0 ? " " : "", ((SbxRecord *)all->pdata[i])->id);
    }
    g_ptr_array_set_free_func(all, (GDestroyNotify)sbx_record_free);
    return g_string_free(g_steal_pointer(&out), FALSE);
}

/*
 * Retention by bytes: the oldest finished records go until the finished ones' sizes sum to at
 * most the bound, only as many as that needs (by age, not by size); a running one is never
 * deleted and counts for nothing; calls go with theirs; with age and count in the same prune.
 */
static void test_prune_bytes(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    gint64 now = sbx_store_now_ms();
    guint deleted = 0;
    gint64 one = 0;

    SbxRecord running = store_fixture_record("b-running", NULL, now - 100000);
    running.code = "x = 1  # a long program, still running";
    begin_ok(s, &running); /* the oldest */
    for (int i = 0; i < 5; i++) {
        g_autofree char *id = g_strdup_printf("b-%d", i);
        gint64 size = add_sized(s, id, now - 50000 + i, 1000);
        assert_true(one == 0 || size == one); /* same ids' lengths: same sizes */
        one = size;
    }
    assert_true(one > 1000);
    g_autofree char *all = ids_left(s);
    assert_string_equal(all, "b-running b-0 b-1 b-2 b-3 b-4");

    /* At the bound: nothing. */
    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){.max_bytes = (guint64)(5 * one)}, &deleted,
                                  NULL, NULL, NULL));
    assert_int_equal(deleted, 0);
    /* Three and a half fit: the two oldest finished go, and no more; with a batch of 1, one a
     * call, *ret_more saying whether to go on (a full batch: maybe). */
    SbxRecordsPrune fit = {.max_bytes = (guint64)(3 * one + one / 2), .max_deleted = 1};
    gboolean more = FALSE;
    assert_true(sbx_records_prune(s, &fit, &deleted, NULL, &more, NULL));
    assert_int_equal(deleted, 1);
    assert_true(more);
    g_autofree char *first_gone = ids_left(s);
    assert_string_equal(first_gone, "b-running b-1 b-2 b-3 b-4");
    assert_true(sbx_records_prune(s, &fit, &deleted, NULL, &more, NULL));
    assert_int_equal(deleted, 1);
    assert_true(more);
    assert_true(sbx_records_prune(s, &fit, &deleted, NULL, &more, NULL));
    assert_int_equal(deleted, 0);
    assert_false(more);
    g_autofree char *left = ids_left(s);
    assert_string_equal(left, "b-running b-2 b-3 b-4");
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM tool_calls"), 3);

    /* By age, not size: a large new record keeps its place; the older small ones go first. */
    gint64 large = add_sized(s, "b-large", now - 1000, 20000);
    assert_true(large > 10 * one);
    assert_true(sbx_records_prune(s, &(SbxRecordsPrune){.max_bytes = (guint64)(large + one)},
                                  &deleted, NULL, NULL, NULL));
    assert_int_equal(deleted, 2); /* b-2, b-3 */
    g_autofree char *after_large = ids_left(s);
    assert_string_equal(after_large, "b-running b-4 b-large");

    /* With age and count in one prune: each bound deletes what it must. */
    add_sized(s, "b-new", now - 500, 1000);
    assert_true(sbx_records_prune(
        s, &(SbxRecordsPrune){.max_count = 2, .max_bytes = (guint64)(large + one)}, &deleted, NULL,
        NULL, NULL));
    assert_int_equal(deleted, 2); /* b-4 by count, then b-large by bytes */
    g_autofree char *both = ids_left(s);
    assert_string_equal(both, "b-running b-new");

    /* A bound below the newest one's size: every finished one goes, the running one stays. */
    assert_true(
        sbx_records_prune(s, &(SbxRecordsPrune){.max_bytes = 1}, &deleted, NULL, NULL, NULL));
    assert_int_equal(deleted, 1);
    g_autofree char *last = ids_left(s);
    assert_string_equal(last, "b-running");
    assert_int_equal(store_fixture_query_int(s, "SELECT count(*) FROM tool_calls"), 0);
}

static void test_json(void **state)
{
    StoreFixture *f = *state;
    g_autoptr(SbxStore) s = open_ok(f->path);
    SbxRecord r = store_fixture_record("j-1", NULL, 0);
    SbxRecordCall call = {.call_id = 3,
                          .provider = "my-tools",
                          .tool = "do.it",
                          .input_json = "{\"a\":1.50}",
                          .ok = FALSE,
                          .error_json = "{\"code\":\"policy_denied\"}",
                          .policy_json = "{\"action\":\"deny\"}",
                          .duration_ms = 4};
    SbxRecordApproval ap = {.approval_id = "a-9",
                            .provider = "my-tools",
                            .tool = "do.it",
                            .decision = "timed_out",
                            .asked_at_ms = 5};
    g_autoptr(GPtrArray) calls = NULL, approvals = NULL;

    begin_ok(s, &r);
    r.result_json = "{\"n\":1e400}";
    r.has_exit_code = TRUE;
    r.exit_code = 1;
    r.stdout_data = "out\0\x1b[31m\xfe";
    r.stdout_len = 10;
    finish_ok(s, &r, &call, 1, &ap, 1);
    g_autoptr(SbxRecord) got = get_ok(s, NULL, "j-1");
    assert_true(sbx_records_get_calls(s, NULL, "j-1", &calls, &approvals, NULL));
    g_autofree char *text = sbx_record_to_json_full(got, calls, approvals);
    assert_non_null(strstr(text, "\"n\":1e400")); /* the literal as stored */
    assert_non_null(strstr(text, "\"input\":{\"a\":1.50}"));
    cJSON *v = cJSON_Parse(text);
    if (v == NULL) {
        fail_msg("not JSON: %s", text);
    }
    assert_string_equal(cJSON_GetObjectItem(v, "code")->valuestring, "print(1)");
    assert_int_equal(cJSON_GetObjectItem(v, "exit_code")->valueint, 1);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(v, "tool_calls")), 1);
    cJSON *a0 = cJSON_GetArrayItem(cJSON_GetObjectItem(v, "approvals"), 0);
    assert_string_equal(cJSON_GetObjectItem(a0, "decision")->valuestring, "timed_out");
    assert_true(cJSON_IsNull(cJSON_GetObjectItem(a0, "answered_by")));
    /* NUL and the invalid byte as U+FFFD: our JSON never holds U+0000 (base/json-builder.h). */
    assert_string_equal(cJSON_GetObjectItem(v, "stdout")->valuestring,
                        "out\xef\xbf\xbd\x1b[31m\xef\xbf\xbd");
    cJSON_Delete(v);
    g_autofree char *brief = sbx_record_to_json(got);
    cJSON *w = cJSON_Parse(brief);
    assert_non_null(w);
    assert_null(cJSON_GetObjectItem(w, "tool_calls"));
    cJSON_Delete(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, store_fixture_setup, store_fixture_teardown)
        T(test_open_modes),
        T(test_reopen_and_newer_schema),
        T(test_migrate_from_1),
        T(test_migrate_from_3),
        T(test_migrate_from_2),
        T(test_migrate_from_4),
        T(test_migrate_from_5),
        T(test_migrate_from_6),
        T(test_not_a_database),
        T(test_default_path),
        T(test_interrupted_at_open),
        T(test_one_server),
        T(test_durable_across_kill),
        T(test_killed_while_running),
        T(test_code_hash),
        T(test_output_cap),
        T(test_invalid_records),
        T(test_other_tenant_not_found),
        T(test_list_paging),
        T(test_prune),
        T(test_record_size),
        T(test_prune_bytes),
        T(test_json),
#undef T
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
