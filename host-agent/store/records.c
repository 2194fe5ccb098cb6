/*
 * Writing execution records (records.h): the checks on what a front end hands in, the record's
 * start and end, retention. Reading is records-read.c, the JSON form records-json.c.
 */
#include "records.h"

#include <cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/json.h"
#include "protocol/limits.h"
#include "store-private.h"

/* Statuses of executions not finished yet: never pruned, interrupted at the next open. */
#define UNFINISHED "('running', 'queued')"

/* Sessions retention may delete: ended, and none of their execution records left. */
#define SESSION_PRUNABLE                                                                           \
    "status != 'open' AND NOT EXISTS (SELECT 1 FROM executions e WHERE e.session_id = "            \
    "sessions.id)"

void sbx_record_free(SbxRecord *r)
{
    if (r == NULL) {
        return;
    }
    char **strings[] = {&r->id,          &r->tenant_id,     &r->front_end,      &r->language,
                        &r->code,        &r->code_sha256,   &r->entry,          &r->args_json,
                        &r->profile,     &r->snapshot_key,  &r->image_id,       &r->status,
                        &r->result_json, &r->error_json,    &r->stdout_data,    &r->stderr_data,
                        &r->entropy_hex, &r->catalog,       &r->session_id,     &r->kwargs_json,
                        &r->files_json,  &r->seed_hex,      &r->clock_log_json, &r->not_replayable,
                        &r->tools_json,  &r->event_log_json};
    for (gsize i = 0; i < G_N_ELEMENTS(strings); i++) {
        g_free(*strings[i]);
    }
    g_free(r);
}

void sbx_record_call_free(SbxRecordCall *c)
{
    if (c == NULL) {
        return;
    }
    g_free(c->provider);
    g_free(c->tool);
    g_free(c->input_json);
    g_free(c->result_json);
    g_free(c->error_json);
    g_free(c->policy_json);
    g_free(c);
}

void sbx_record_approval_free(SbxRecordApproval *a)
{
    if (a == NULL) {
        return;
    }
    g_free(a->approval_id);
    g_free(a->provider);
    g_free(a->tool);
    g_free(a->decision);
    g_free(a->answered_by);
    g_free(a);
}

static gboolean bad(GError **error, const char *field, const char *why)
{
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID, "record: %s: %s", field, why);
    return FALSE;
}

/* An id or short name: 1..SBX_RECORD_ID_MAX of [A-Za-z0-9._-] (NULL allowed if @optional). */
static gboolean check_id(const char *field, const char *s, gboolean optional, GError **error)
{
    gsize len = s != NULL ? strlen(s) : 0;

    if (s == NULL && optional) {
        return TRUE;
    }
    if (len == 0 || len > SBX_RECORD_ID_MAX) {
        return bad(error, field, "expected 1 to 64 characters");
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (!g_ascii_isalnum(*p) && *p != '.' && *p != '_' && *p != '-') {
            return bad(error, field, "expected A-Z a-z 0-9 . _ -");
        }
    }
    return TRUE;
}

/* UTF-8 text of at most SBX_RECORD_TEXT_MAX bytes (NULL allowed if @optional). */
static gboolean check_text(const char *field, const char *s, gboolean optional, GError **error)
{
    if (s == NULL) {
        return optional || bad(error, field, "missing");
    }
    gsize len = strnlen(s, SBX_RECORD_TEXT_MAX + 1);
    if (len > SBX_RECORD_TEXT_MAX) {
        return bad(error, field, "longer than 4 MiB");
    }
    return g_utf8_validate(s, len, NULL) || bad(error, field, "not UTF-8");
}

/*
 * A JSON text (NULL allowed: no value): stored as given and copied into the JSON of `records
 * show`, so it must be JSON.
 */
static gboolean check_json(const char *field, const char *s, GError **error)
{
    if (s == NULL) {
        return TRUE;
    }
    if (!check_text(field, s, FALSE, error)) {
        return FALSE;
    }
    char *why = NULL;
    cJSON *v = sbx_json_parse(s, strlen(s), SBX_JSON_DEPTH_MAX, &why);
    cJSON_Delete(v);
    free(why);
    return v != NULL || bad(error, field, "not JSON");
}

static gboolean check_begin(const SbxRecord *r, GError **error)
{
    if (r->status != NULL && g_strcmp0(r->status, "queued") != 0 &&
        g_strcmp0(r->status, "running") != 0) {
        return bad(error, "status", "a record begins running or queued");
    }
    return check_id("id", r->id, FALSE, error) &&
           check_id("tenant_id", r->tenant_id, TRUE, error) &&
           check_id("front_end", r->front_end, FALSE, error) &&
           check_id("language", r->language, FALSE, error) &&
           check_text("code", r->code, FALSE, error) &&
           check_text("entry", r->entry, TRUE, error) &&
           check_json("args_json", r->args_json, error) &&
           check_json("kwargs_json", r->kwargs_json, error) &&
           check_text("profile", r->profile, TRUE, error) &&
           check_text("snapshot_key", r->snapshot_key, TRUE, error) &&
           check_text("image_id", r->image_id, TRUE, error) &&
           check_id("catalog", r->catalog, TRUE, error) &&
           check_id("session_id", r->session_id, TRUE, error) &&
           check_text("entropy_hex", r->entropy_hex, TRUE, error) &&
           (r->timeout_ms >= 0 && r->output_limit >= 0 ? TRUE : bad(error, "limits", "negative"));
}

/* Bind @v to parameter @i, SQL NULL if 0 (a time or duration not known). */
static void bind_ms(sqlite3_stmt *stmt, int i, gint64 v)
{
    if (v != 0) {
        sqlite3_bind_int64(stmt, i, v);
    } else {
        sqlite3_bind_null(stmt, i);
    }
}

gboolean sbx_records_begin(SbxStore *store, const SbxRecord *r, GError **error)
{
    if (!check_begin(r, error)) {
        return FALSE;
    }
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store,
        "INSERT INTO executions (id, tenant_id, front_end, language, code, code_sha256, entry,"
        " args_json, profile, snapshot_key, image_id, timeout_ms, output_limit, status,"
        " created_at, started_at, boot_ms, entropy_hex, guest_clock_ms, catalog, session_id,"
        " kwargs_json)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,"
        " ?19, ?20, ?21, ?22)",
        error);
    if (stmt == NULL) {
        return FALSE;
    }
    g_autofree char *sha = g_compute_checksum_for_string(G_CHECKSUM_SHA256, r->code, -1);
    const char *texts[] = {r->id,    r->tenant_id, r->front_end, r->language,     r->code,    sha,
                           r->entry, r->args_json, r->profile,   r->snapshot_key, r->image_id};
    for (gsize i = 0; i < G_N_ELEMENTS(texts); i++) {
        sbx_store_bind_text(stmt, (int)i + 1, texts[i]);
    }
    sqlite3_bind_int64(stmt, 12, r->timeout_ms);
    sqlite3_bind_int64(stmt, 13, r->output_limit);
    sbx_store_bind_text(stmt, 14, r->status != NULL ? r->status : "running");
    sqlite3_bind_int64(stmt, 15, r->created_at_ms != 0 ? r->created_at_ms : sbx_store_now_ms());
    bind_ms(stmt, 16, r->started_at_ms);
    bind_ms(stmt, 17, r->boot_ms);
    sbx_store_bind_text(stmt, 18, r->entropy_hex);
    bind_ms(stmt, 19, r->guest_clock_ms);
    sbx_store_bind_text(stmt, 20, r->catalog);
    sbx_store_bind_text(stmt, 21, r->session_id);
    sbx_store_bind_text(stmt, 22, r->kwargs_json);
    return sbx_store_step_done(store, stmt, error);
}

static gboolean check_finish(const SbxRecord *r, gsize n_calls, gsize n_approvals, GError **error)
{
    if (g_strcmp0(r->status, "queued") == 0 || g_strcmp0(r->status, "running") == 0) {
        return bad(error, "status", "a finished record is neither running nor queued");
    }
    if (n_calls > SBX_RECORD_CALLS_MAX || n_approvals > SBX_RECORD_CALLS_MAX) {
        return bad(error, "tool calls", "more than 1024");
    }
    return check_id("id", r->id, FALSE, error) && check_id("status", r->status, FALSE, error) &&
           check_json("result_json", r->result_json, error) &&
           check_json("error_json", r->error_json, error) &&
           check_json("files_json", r->files_json, error) &&
           check_text("entropy_hex", r->entropy_hex, TRUE, error) &&
           check_text("seed_hex", r->seed_hex, TRUE, error) &&
           check_json("clock_log_json", r->clock_log_json, error) &&
           check_json("event_log_json", r->event_log_json, error) &&
           check_text("not_replayable", r->not_replayable, TRUE, error) &&
           check_json("tools_json", r->tools_json, error);
}

static gboolean check_call(const SbxRecordCall *c, GError **error)
{
    return check_text("tool call provider", c->provider, FALSE, error) &&
           check_text("tool call tool", c->tool, FALSE, error) &&
           check_json("tool call input", c->input_json, error) &&
           (c->input_json != NULL || bad(error, "tool call input", "missing")) &&
           check_json("tool call result", c->result_json, error) &&
           check_json("tool call error", c->error_json, error) &&
           check_json("tool call policy", c->policy_json, error);
}

static gboolean check_approval(const SbxRecordApproval *a, GError **error)
{
    return check_id("approval id", a->approval_id, FALSE, error) &&
           check_text("approval provider", a->provider, FALSE, error) &&
           check_text("approval tool", a->tool, FALSE, error) &&
           check_id("approval decision", a->decision, FALSE, error) &&
           check_text("approval answered_by", a->answered_by, TRUE, error);
}

/* Bind stream bytes, cut at SBX_RECORD_OUTPUT_MAX, to @i; its flag to @i + 1. */
static void bind_output(sqlite3_stmt *stmt, int i, const char *data, gsize len, gboolean cut)
{
    gsize kept = MIN(len, (gsize)SBX_RECORD_OUTPUT_MAX);

    if (data != NULL) {
        sqlite3_bind_blob64(stmt, i, data, kept, SQLITE_TRANSIENT);
    } else {
        sqlite3_bind_null(stmt, i);
    }
    sqlite3_bind_int(stmt, i + 1, cut || kept < len);
}

/* The outcome columns of @r's row; NOT_FOUND if there is no such record. */
static gboolean update_outcome(SbxStore *store, const SbxRecord *r, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store,
        "UPDATE executions SET status = ?2, exit_code = ?3, result_json = ?4, error_json = ?5,"
        " stdout = ?6, stdout_truncated = ?7, stderr = ?8, stderr_truncated = ?9,"
        " started_at = COALESCE(?10, started_at), finished_at = ?11,"
        " boot_ms = COALESCE(?12, boot_ms), duration_ms = ?13,"
        " entropy_hex = COALESCE(?14, entropy_hex), guest_clock_ms = COALESCE(?15, guest_clock_ms),"
        " files_json = ?16, seed_hex = ?17, clock_log_json = ?18, replayable = ?19,"
        " not_replayable = ?20, event_log_json = ?21, log_open = ?22, tools_json = ?23"
        " WHERE id = ?1",
        error);
    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, r->id);
    sbx_store_bind_text(stmt, 2, r->status);
    if (r->has_exit_code) {
        sqlite3_bind_int(stmt, 3, r->exit_code);
    }
    sbx_store_bind_text(stmt, 4, r->result_json);
    sbx_store_bind_text(stmt, 5, r->error_json);
    bind_output(stmt, 6, r->stdout_data, r->stdout_len, r->stdout_truncated);
    bind_output(stmt, 8, r->stderr_data, r->stderr_len, r->stderr_truncated);
    bind_ms(stmt, 10, r->started_at_ms);
    sqlite3_bind_int64(stmt, 11, r->finished_at_ms != 0 ? r->finished_at_ms : sbx_store_now_ms());
    bind_ms(stmt, 12, r->boot_ms);
    sqlite3_bind_int64(stmt, 13, r->duration_ms);
    sbx_store_bind_text(stmt, 14, r->entropy_hex);
    bind_ms(stmt, 15, r->guest_clock_ms);
    sbx_store_bind_text(stmt, 16, r->files_json);
    sbx_store_bind_text(stmt, 17, r->seed_hex);
    sbx_store_bind_text(stmt, 18, r->clock_log_json);
    if (r->has_replayable) {
        sqlite3_bind_int(stmt, 19, r->replayable);
    }
    sbx_store_bind_text(stmt, 20, r->not_replayable);
    sbx_store_bind_text(stmt, 21, r->event_log_json);
    if (r->has_log_open) {
        sqlite3_bind_int(stmt, 22, r->log_open);
    }
    sbx_store_bind_text(stmt, 23, r->tools_json);
    if (!sbx_store_step_done(store, stmt, error)) {
        return FALSE;
    }
    if (sqlite3_changes(store->db) == 0) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND, "no record \"%s\"", r->id);
        return FALSE;
    }
    return TRUE;
}

static gboolean insert_calls(SbxStore *store, const char *id, const SbxRecordCall *calls, gsize n,
                             GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store,
        "INSERT INTO tool_calls (execution_id, seq, call_id, provider, tool, input_json, ok,"
        " result_json, error_json, policy_json, duration_ms)"
        " VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        error);

    for (gsize i = 0; stmt != NULL && i < n; i++) {
        const SbxRecordCall *c = &calls[i];
        sqlite3_reset(stmt);
        sbx_store_bind_text(stmt, 1, id);
        sqlite3_bind_int64(stmt, 2, (gint64)i);
        sqlite3_bind_int64(stmt, 3, c->call_id);
        sbx_store_bind_text(stmt, 4, c->provider);
        sbx_store_bind_text(stmt, 5, c->tool);
        sbx_store_bind_text(stmt, 6, c->input_json);
        sqlite3_bind_int(stmt, 7, c->ok ? 1 : 0);
        sbx_store_bind_text(stmt, 8, c->result_json);
        sbx_store_bind_text(stmt, 9, c->error_json);
        sbx_store_bind_text(stmt, 10, c->policy_json);
        sqlite3_bind_int64(stmt, 11, c->duration_ms);
        if (!sbx_store_step_done(store, stmt, error)) {
            return FALSE;
        }
    }
    return stmt != NULL;
}

static gboolean insert_approvals(SbxStore *store, const char *id, const SbxRecordApproval *list,
                                 gsize n, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store,
        "INSERT INTO approvals (execution_id, seq, approval_id, provider, tool, decision,"
        " answered_by, asked_at, answered_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        error);

    for (gsize i = 0; stmt != NULL && i < n; i++) {
        const SbxRecordApproval *a = &list[i];
        sqlite3_reset(stmt);
        sbx_store_bind_text(stmt, 1, id);
        sqlite3_bind_int64(stmt, 2, (gint64)i);
        sbx_store_bind_text(stmt, 3, a->approval_id);
        sbx_store_bind_text(stmt, 4, a->provider);
        sbx_store_bind_text(stmt, 5, a->tool);
        sbx_store_bind_text(stmt, 6, a->decision);
        sbx_store_bind_text(stmt, 7, a->answered_by);
        sqlite3_bind_int64(stmt, 8, a->asked_at_ms);
        bind_ms(stmt, 9, a->answered_at_ms);
        if (!sbx_store_step_done(store, stmt, error)) {
            return FALSE;
        }
    }
    return stmt != NULL;
}

/* Calls and approvals of a finish called twice replace the first's. */
static gboolean clear_calls(SbxStore *store, const char *id, GError **error)
{
    g_autoptr(sqlite3_stmt) calls =
        sbx_store_prepare(store, "DELETE FROM tool_calls WHERE execution_id = ?1", error);
    g_autoptr(sqlite3_stmt) approvals =
        calls != NULL
            ? sbx_store_prepare(store, "DELETE FROM approvals WHERE execution_id = ?1", error)
            : NULL;

    if (approvals == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(calls, 1, id);
    sbx_store_bind_text(approvals, 1, id);
    return sbx_store_step_done(store, calls, error) && sbx_store_step_done(store, approvals, error);
}

/* Compute the size of record @id from what is stored of it (SBX_STORE_RECORD_SIZE) into *@ret. */
static gboolean update_size(SbxStore *store, const char *id, gint64 *ret, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt =
        sbx_store_prepare(store,
                          "UPDATE executions SET size_bytes = " SBX_STORE_RECORD_SIZE
                          " WHERE id = ?1 RETURNING size_bytes",
                          error);

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, id);
    if (sqlite3_step(stmt) != SQLITE_ROW) {
        return sbx_store_fail(store, "size", error);
    }
    *ret = sqlite3_column_int64(stmt, 0);
    return sbx_store_step_done(store, stmt, error);
}

gboolean sbx_records_finish(SbxStore *store, const SbxRecord *r, const SbxRecordCall *calls,
                            gsize n_calls, const SbxRecordApproval *approvals, gsize n_approvals,
                            GError **error)
{
    if (!check_finish(r, n_calls, n_approvals, error)) {
        return FALSE;
    }
    for (gsize i = 0; i < n_calls; i++) {
        if (!check_call(&calls[i], error)) {
            return FALSE;
        }
    }
    for (gsize i = 0; i < n_approvals; i++) {
        if (!check_approval(&approvals[i], error)) {
            return FALSE;
        }
    }
    if (!sbx_store_begin(store, error)) {
        return FALSE;
    }
    gint64 size = 0;
    gboolean ok = update_outcome(store, r, error) && clear_calls(store, r->id, error) &&
                  insert_calls(store, r->id, calls, n_calls, error) &&
                  insert_approvals(store, r->id, approvals, n_approvals, error) &&
                  update_size(store, r->id, &size, error);
    if (!sbx_store_end(store, ok, ok ? error : NULL)) {
        return FALSE;
    }
    if (store->on_finished != NULL) {
        store->on_finished((guint64)MAX(size, 0), store->on_finished_data);
    }
    return TRUE;
}

void sbx_records_set_on_finished(SbxStore *store, SbxRecordsFinishedFunc func, gpointer data)
{
    store->on_finished = func;
    store->on_finished_data = data;
}

/* Run a DELETE of finished records whose ?1 is @value; add what it removed to *@deleted. */
static gboolean prune_step(SbxStore *store, const char *sql, gint64 value, guint *deleted,
                           GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(store, sql, error);

    if (stmt == NULL) {
        return FALSE;
    }
    sqlite3_bind_int64(stmt, 1, value);
    if (!sbx_store_step_done(store, stmt, error)) {
        return FALSE;
    }
    *deleted += (guint)sqlite3_changes(store->db);
    return TRUE;
}

/*
 * Delete the finished records past @age_ms (0: no bound) or @count (0: no bound), then, for
 * @bytes (0: no bound), each finished one whose size and the sizes of the finished ones newer
 * than it sum to more than @bytes: the oldest, only as many as the bound needs and at most
 * @batch (0: no limit; *@bytes_deleted: how many). One pass over the index executions_size
 * (migration 6 -> 7), which holds what the sum reads.
 */
static gboolean prune_executions(SbxStore *store, gint64 age_ms, gint64 count, gint64 bytes,
                                 guint batch, guint *deleted, guint *bytes_deleted, GError **error)
{
    gboolean ok =
        (age_ms == 0 ||
         prune_step(store,
                    "DELETE FROM executions WHERE status NOT IN " UNFINISHED " AND created_at < ?1",
                    sbx_store_now_ms() - age_ms, deleted, error)) &&
        (count == 0 || prune_step(store,
                                  "DELETE FROM executions WHERE id IN (SELECT id FROM executions"
                                  " WHERE status NOT IN " UNFINISHED
                                  " ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?1)",
                                  count, deleted, error));
    if (!ok || bytes == 0) {
        return ok;
    }
    g_autofree char *sql = g_strdup_printf(
        "DELETE FROM executions WHERE id IN (SELECT id FROM (SELECT id,"
        " sum(size_bytes) OVER (ORDER BY created_at DESC, id DESC"
        " ROWS UNBOUNDED PRECEDING) AS kept FROM executions WHERE status NOT IN " UNFINISHED
        ") WHERE kept > ?1 ORDER BY kept DESC LIMIT %d)",
        batch > 0 ? (int)MIN(batch, G_MAXINT) : -1);
    return prune_step(store, sql, bytes, bytes_deleted, error);
}

/*
 * Delete the ended sessions past @age_ms or @count, as prune_executions(), once their
 * executions are gone: run after it, so a session goes with its last execution record and
 * `sandbox records session` finds every session an execution record names.
 */
static gboolean prune_sessions(SbxStore *store, gint64 age_ms, gint64 count, guint *deleted,
                               GError **error)
{
    return (age_ms == 0 ||
            prune_step(store, "DELETE FROM sessions WHERE " SESSION_PRUNABLE " AND created_at < ?1",
                       sbx_store_now_ms() - age_ms, deleted, error)) &&
           (count == 0 || prune_step(store,
                                     "DELETE FROM sessions WHERE " SESSION_PRUNABLE
                                     " AND id IN (SELECT id FROM sessions WHERE status != 'open'"
                                     " ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?1)",
                                     count, deleted, error));
}

gboolean sbx_records_prune(SbxStore *store, const SbxRecordsPrune *bounds, guint *ret_deleted,
                           guint *ret_sessions, gboolean *ret_more, GError **error)
{
    guint deleted = 0, by_bytes = 0, sessions = 0;
    /* Past 2^53 ms a bound means nothing anyway; keeps the arithmetic in gint64. */
    gint64 age_ms = (gint64)MIN(bounds->max_age_s, (guint64)G_MAXINT64 / 2000) * 1000;
    gint64 count = (gint64)MIN(bounds->max_count, (guint64)G_MAXINT64);
    gint64 bytes = (gint64)MIN(bounds->max_bytes, (guint64)G_MAXINT64);

    if (!sbx_store_begin(store, error)) {
        return FALSE;
    }
    gboolean ok = prune_executions(store, age_ms, count, bytes, bounds->max_deleted, &deleted,
                                   &by_bytes, error) &&
                  prune_sessions(store, age_ms, count, &sessions, error);
    if (!sbx_store_end(store, ok, ok ? error : NULL)) {
        return FALSE;
    }
    if (ret_deleted != NULL) {
        *ret_deleted = deleted + by_bytes;
    }
    if (ret_sessions != NULL) {
        *ret_sessions = sessions;
    }
    if (ret_more != NULL) {
        *ret_more = bounds->max_deleted > 0 && by_bytes >= bounds->max_deleted;
    }
    return TRUE;
}
