/*
 * Reading execution records (records.h): one whole, its calls and approvals, and pages of them
 * for `sandbox records list`. A tenant's view is a filter on tenant_id in every statement.
 */
#include "records.h"

#include <string.h>

#include "store-private.h"

/* The columns read_row() reads, in order; a list reads the same with the large ones NULL. */
#define RECORD_COLUMNS(code, args, result, error, out, err, kwargs, files, clock, events, tools)   \
    "id, tenant_id, front_end, language, " code ", code_sha256, entry, " args ", profile,"         \
    " snapshot_key, image_id, timeout_ms, output_limit, status, exit_code, " result ", " error     \
    ", " out ", " err ", stdout_truncated, stderr_truncated, created_at, started_at,"              \
    " finished_at, boot_ms, duration_ms, entropy_hex, guest_clock_ms, catalog, "                   \
    "session_id, " kwargs ", " files ", seed_hex, " clock ", replayable, not_replayable, " events  \
    ", log_open, " tools
#define ALL_COLUMNS                                                                                \
    RECORD_COLUMNS("code", "args_json", "result_json", "error_json", "stdout", "stderr",           \
                   "kwargs_json", "files_json", "clock_log_json", "event_log_json", "tools_json")
#define LIST_COLUMNS                                                                               \
    RECORD_COLUMNS("NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", "NULL", \
                   "NULL")

/* Column @i as bytes (NUL-terminated in memory), its length in *@len. */
static char *column_bytes(sqlite3_stmt *stmt, int i, gsize *len)
{
    const void *p = sqlite3_column_blob(stmt, i);
    *len = (gsize)sqlite3_column_bytes(stmt, i);

    if (p == NULL) {
        *len = 0;
        return NULL;
    }
    char *copy = g_malloc(*len + 1);
    memcpy(copy, p, *len);
    copy[*len] = '\0';
    return copy;
}

static SbxRecord *read_row(sqlite3_stmt *stmt)
{
    SbxRecord *r = g_new0(SbxRecord, 1);
    char **texts[] = {&r->id,      &r->tenant_id,    &r->front_end, &r->language,
                      &r->code,    &r->code_sha256,  &r->entry,     &r->args_json,
                      &r->profile, &r->snapshot_key, &r->image_id};

    for (gsize i = 0; i < G_N_ELEMENTS(texts); i++) {
        *texts[i] = sbx_store_column_text(stmt, (int)i);
    }
    r->timeout_ms = sqlite3_column_int64(stmt, 11);
    r->output_limit = sqlite3_column_int64(stmt, 12);
    r->status = sbx_store_column_text(stmt, 13);
    r->has_exit_code = sqlite3_column_type(stmt, 14) != SQLITE_NULL;
    r->exit_code = sqlite3_column_int(stmt, 14);
    r->result_json = sbx_store_column_text(stmt, 15);
    r->error_json = sbx_store_column_text(stmt, 16);
    r->stdout_data = column_bytes(stmt, 17, &r->stdout_len);
    r->stderr_data = column_bytes(stmt, 18, &r->stderr_len);
    r->stdout_truncated = sqlite3_column_int(stmt, 19) != 0;
    r->stderr_truncated = sqlite3_column_int(stmt, 20) != 0;
    gint64 *times[] = {&r->created_at_ms, &r->started_at_ms, &r->finished_at_ms, &r->boot_ms,
                       &r->duration_ms};
    for (gsize i = 0; i < G_N_ELEMENTS(times); i++) {
        *times[i] = sqlite3_column_int64(stmt, 21 + (int)i); /* NULL reads as 0 */
    }
    r->entropy_hex = sbx_store_column_text(stmt, 26);
    r->guest_clock_ms = sqlite3_column_int64(stmt, 27);
    r->catalog = sbx_store_column_text(stmt, 28);
    r->session_id = sbx_store_column_text(stmt, 29);
    r->kwargs_json = sbx_store_column_text(stmt, 30);
    r->files_json = sbx_store_column_text(stmt, 31);
    r->seed_hex = sbx_store_column_text(stmt, 32);
    r->clock_log_json = sbx_store_column_text(stmt, 33);
    r->has_replayable = sqlite3_column_type(stmt, 34) != SQLITE_NULL;
    r->replayable = sqlite3_column_int(stmt, 34) != 0;
    r->not_replayable = sbx_store_column_text(stmt, 35);
    r->event_log_json = sbx_store_column_text(stmt, 36);
    r->has_log_open = sqlite3_column_type(stmt, 37) != SQLITE_NULL;
    r->log_open = sqlite3_column_int(stmt, 37) != 0;
    r->tools_json = sbx_store_column_text(stmt, 38);
    return r;
}

static gboolean not_found(const char *id, GError **error)
{
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND, "no record \"%s\"", id);
    return FALSE;
}

gboolean sbx_records_get(SbxStore *store, const char *tenant_id, const char *id, SbxRecord **ret,
                         GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store,
        "SELECT " ALL_COLUMNS " FROM executions WHERE id = ?1 AND (?2 IS NULL OR tenant_id = ?2)",
        error);

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, id);
    sbx_store_bind_text(stmt, 2, tenant_id);
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) {
        return not_found(id, error);
    }
    if (rc != SQLITE_ROW) {
        return sbx_store_fail(store, "read a record", error);
    }
    *ret = read_row(stmt);
    return TRUE;
}

/* A tool call row (an SbxRecordCall *). */
static gpointer read_call(sqlite3_stmt *stmt)
{
    SbxRecordCall *c = g_new0(SbxRecordCall, 1);

    c->seq = (guint)sqlite3_column_int64(stmt, 0);
    c->call_id = (guint32)sqlite3_column_int64(stmt, 1);
    c->provider = sbx_store_column_text(stmt, 2);
    c->tool = sbx_store_column_text(stmt, 3);
    c->input_json = sbx_store_column_text(stmt, 4);
    c->ok = sqlite3_column_int(stmt, 5) != 0;
    c->result_json = sbx_store_column_text(stmt, 6);
    c->error_json = sbx_store_column_text(stmt, 7);
    c->policy_json = sbx_store_column_text(stmt, 8);
    c->duration_ms = sqlite3_column_int64(stmt, 9);
    return c;
}

/* An approval row (an SbxRecordApproval *). */
static gpointer read_approval(sqlite3_stmt *stmt)
{
    SbxRecordApproval *a = g_new0(SbxRecordApproval, 1);

    a->seq = (guint)sqlite3_column_int64(stmt, 0);
    a->approval_id = sbx_store_column_text(stmt, 1);
    a->provider = sbx_store_column_text(stmt, 2);
    a->tool = sbx_store_column_text(stmt, 3);
    a->decision = sbx_store_column_text(stmt, 4);
    a->answered_by = sbx_store_column_text(stmt, 5);
    a->asked_at_ms = sqlite3_column_int64(stmt, 6);
    a->answered_at_ms = sqlite3_column_int64(stmt, 7);
    return a;
}

/* Every row of @sql (?1: the execution id) through @read into a new array freeing with @free. */
static GPtrArray *read_rows(SbxStore *store, const char *sql, const char *id,
                            gpointer (*read)(sqlite3_stmt *), GDestroyNotify free_func,
                            GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(store, sql, error);
    g_autoptr(GPtrArray) rows = g_ptr_array_new_with_free_func(free_func);
    int rc;

    if (stmt == NULL) {
        return NULL;
    }
    sbx_store_bind_text(stmt, 1, id);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        g_ptr_array_add(rows, read(stmt));
    }
    if (rc != SQLITE_DONE) {
        sbx_store_fail(store, "read a record's calls", error);
        return NULL;
    }
    return g_steal_pointer(&rows);
}

gboolean sbx_records_get_calls(SbxStore *store, const char *tenant_id, const char *id,
                               GPtrArray **ret_calls, GPtrArray **ret_approvals, GError **error)
{
    g_autoptr(SbxRecord) r = NULL;

    /* The record first: a tenant sees calls only of its own. */
    if (!sbx_records_get(store, tenant_id, id, &r, error)) {
        return FALSE;
    }
    g_autoptr(GPtrArray) calls =
        read_rows(store,
                  "SELECT seq, call_id, provider, tool, input_json, ok, result_json, error_json,"
                  " policy_json, duration_ms FROM tool_calls WHERE execution_id = ?1 ORDER BY seq",
                  id, read_call, (GDestroyNotify)sbx_record_call_free, error);
    if (calls == NULL) {
        return FALSE;
    }
    g_autoptr(GPtrArray) approvals = read_rows(
        store,
        "SELECT seq, approval_id, provider, tool, decision, answered_by, asked_at, answered_at"
        " FROM approvals WHERE execution_id = ?1 ORDER BY seq",
        id, read_approval, (GDestroyNotify)sbx_record_approval_free, error);
    if (approvals == NULL) {
        return FALSE;
    }
    *ret_calls = g_steal_pointer(&calls);
    *ret_approvals = g_steal_pointer(&approvals);
    return TRUE;
}

/* A page of records: newest first, or oldest first with the cursor's comparison turned. */
#define LIST_SQL(cmp, order)                                                                       \
    "SELECT " LIST_COLUMNS " FROM executions"                                                      \
    " WHERE (?1 IS NULL OR tenant_id = ?1) AND (?2 IS NULL OR status = ?2)"                        \
    " AND (?3 = 0 OR created_at > ?3) AND (?4 = 0 OR created_at < ?4)"                             \
    " AND (?8 IS NULL OR session_id = ?8)"                                                         \
    " AND (?5 IS NULL OR (created_at, id) " cmp " (?6, ?5))"                                       \
    " ORDER BY created_at " order ", id " order " LIMIT ?7"

gboolean sbx_records_list(SbxStore *store, const SbxRecordFilter *f, GPtrArray **ret,
                          GError **error)
{
    static const SbxRecordFilter all = {0};
    f = f != NULL ? f : &all;
    guint limit = f->limit == 0 ? SBX_RECORDS_LIST_DEFAULT : MIN(f->limit, SBX_RECORDS_LIST_MAX);
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store, f->oldest_first ? LIST_SQL(">", "ASC") : LIST_SQL("<", "DESC"), error);
    g_autoptr(GPtrArray) list = g_ptr_array_new_with_free_func((GDestroyNotify)sbx_record_free);
    int rc;

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, f->tenant_id);
    sbx_store_bind_text(stmt, 2, f->status);
    sqlite3_bind_int64(stmt, 3, f->created_after_ms);
    sqlite3_bind_int64(stmt, 4, f->created_before_ms);
    sbx_store_bind_text(stmt, 5, f->cursor_id);
    sqlite3_bind_int64(stmt, 6, f->cursor_created_ms);
    sqlite3_bind_int64(stmt, 7, limit);
    sbx_store_bind_text(stmt, 8, f->session_id);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        g_ptr_array_add(list, read_row(stmt));
    }
    if (rc != SQLITE_DONE) {
        return sbx_store_fail(store, "list records", error);
    }
    *ret = g_steal_pointer(&list);
    return TRUE;
}

gboolean sbx_records_snapshot_keys(SbxStore *store, GHashTable **ret, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store, "SELECT DISTINCT snapshot_key FROM executions WHERE snapshot_key IS NOT NULL",
        error);
    g_autoptr(GHashTable) keys = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    int rc;

    if (stmt == NULL) {
        return FALSE;
    }
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        g_hash_table_add(keys, sbx_store_column_text(stmt, 0));
    }
    if (rc != SQLITE_DONE) {
        return sbx_store_fail(store, "list the records' snapshots", error);
    }
    *ret = g_steal_pointer(&keys);
    return TRUE;
}
