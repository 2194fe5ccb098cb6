/*
 * Session records (sessions.h): the checks on what the session manager hands in, a session's
 * opening and end, reading them back and their JSON form. Retention is records.c's (a session
 * goes after its executions); a killed server's open sessions are ended at the next open (db.c).
 */
#include "sessions.h"

#include <string.h>

#include "protocol/message.h"
#include "records.h"
#include "store-private.h"

/* The columns read_row() reads, in order: the executions naming it counted by their index. */
#define SESSION_COLUMNS                                                                            \
    "id, tenant_id, profile, memory_mib, created_at, idle_timeout_ms, max_lifetime_ms, status,"    \
    " reason, ended_at,"                                                                           \
    " (SELECT count(*) FROM executions e WHERE e.session_id = sessions.id)"

/* The statuses a session ends with (docs/service.md, "Sessions"). */
static const char *const END_STATUSES[] = {"ended",       "expired", "crashed",
                                           "interrupted", "deleted", NULL};

void sbx_session_record_free(SbxSessionRecord *s)
{
    if (s == NULL) {
        return;
    }
    g_free(s->id);
    g_free(s->tenant_id);
    g_free(s->profile);
    g_free(s->status);
    g_free(s->reason);
    g_free(s);
}

gboolean sbx_session_records_end_status_valid(const char *status)
{
    return status != NULL && g_strv_contains(END_STATUSES, status);
}

static gboolean bad(GError **error, const char *field, const char *why)
{
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_INVALID, "session: %s: %s", field, why);
    return FALSE;
}

/* An id or a name: as an execution id, 1..64 of [A-Za-z0-9._-] (NULL allowed if @optional). */
static gboolean check_id(const char *field, const char *s, gboolean optional, GError **error)
{
    return (s == NULL && optional) || sbx_id_valid(s) ||
           bad(error, field, "expected 1 to 64 of A-Z a-z 0-9 . _ -");
}

static gboolean check_begin(const SbxSessionRecord *s, GError **error)
{
    if (s->created_at_ms < 0 || s->idle_timeout_ms < 0 || s->max_lifetime_ms < 0) {
        return bad(error, "times", "negative");
    }
    if (s->memory_mib > (guint64)G_MAXINT64) {
        return bad(error, "memory_mib", "too large");
    }
    return check_id("id", s->id, FALSE, error) &&
           check_id("tenant_id", s->tenant_id, TRUE, error) &&
           check_id("profile", s->profile, FALSE, error);
}

/* Bind @v to parameter @i, SQL NULL if 0 (not known). */
static void bind_nonzero(sqlite3_stmt *stmt, int i, gint64 v)
{
    if (v != 0) {
        sqlite3_bind_int64(stmt, i, v);
    } else {
        sqlite3_bind_null(stmt, i);
    }
}

gboolean sbx_session_records_begin(SbxStore *store, const SbxSessionRecord *s, GError **error)
{
    if (!check_begin(s, error)) {
        return FALSE;
    }
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store,
        "INSERT INTO sessions (id, tenant_id, profile, memory_mib, created_at, idle_timeout_ms,"
        " max_lifetime_ms, status) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, '" SBX_SESSION_STATUS_OPEN
        "')",
        error);
    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, s->id);
    sbx_store_bind_text(stmt, 2, s->tenant_id);
    sbx_store_bind_text(stmt, 3, s->profile);
    bind_nonzero(stmt, 4, (gint64)s->memory_mib);
    sqlite3_bind_int64(stmt, 5, s->created_at_ms != 0 ? s->created_at_ms : sbx_store_now_ms());
    sqlite3_bind_int64(stmt, 6, s->idle_timeout_ms);
    sqlite3_bind_int64(stmt, 7, s->max_lifetime_ms);
    return sbx_store_step_done(store, stmt, error);
}

/*
 * @reason as kept: valid UTF-8 (each invalid byte U+FFFD: it may quote a process's output),
 * at most SBX_SESSION_REASON_MAX bytes, cut between characters. NULL: NULL.
 */
static char *bound_reason(const char *reason)
{
    if (reason == NULL) {
        return NULL;
    }
    /* Read no further than the bound (and a character's bytes past it) of a long text. */
    gsize len = strnlen(reason, SBX_SESSION_REASON_MAX + 4);
    char *valid = g_utf8_make_valid(reason, (gssize)len);
    if (strlen(valid) > SBX_SESSION_REASON_MAX) {
        const char *cut = g_utf8_find_prev_char(valid, valid + SBX_SESSION_REASON_MAX + 1);
        valid[cut - valid] = '\0';
    }
    return valid;
}

/* Why no open session @id could be ended: NOT_FOUND, or EXISTS with the end it has. */
static gboolean end_refused(SbxStore *store, const char *id, GError **error)
{
    g_autoptr(SbxSessionRecord) s = NULL;

    if (!sbx_session_records_get(store, NULL, id, &s, error)) {
        return FALSE;
    }
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS, "session \"%s\" has ended (%s)", id,
                s->status);
    return FALSE;
}

gboolean sbx_session_records_end(SbxStore *store, const char *id, const char *status,
                                 const char *reason, gint64 ended_at_ms, GError **error)
{
    if (!check_id("id", id, FALSE, error)) {
        return FALSE;
    }
    if (!sbx_session_records_end_status_valid(status)) {
        return bad(error, "status", "expected ended, expired, crashed, interrupted or deleted");
    }
    if (ended_at_ms < 0) {
        return bad(error, "ended_at", "negative");
    }
    g_autofree char *kept = bound_reason(reason);
    g_autoptr(sqlite3_stmt) stmt =
        sbx_store_prepare(store,
                          "UPDATE sessions SET status = ?2, reason = ?3, ended_at = ?4"
                          " WHERE id = ?1 AND status = '" SBX_SESSION_STATUS_OPEN "'",
                          error);
    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, id);
    sbx_store_bind_text(stmt, 2, status);
    sbx_store_bind_text(stmt, 3, kept);
    sqlite3_bind_int64(stmt, 4, ended_at_ms != 0 ? ended_at_ms : sbx_store_now_ms());
    if (!sbx_store_step_done(store, stmt, error)) {
        return FALSE;
    }
    return sqlite3_changes(store->db) > 0 || end_refused(store, id, error);
}

static SbxSessionRecord *read_row(sqlite3_stmt *stmt)
{
    SbxSessionRecord *s = g_new0(SbxSessionRecord, 1);

    s->id = sbx_store_column_text(stmt, 0);
    s->tenant_id = sbx_store_column_text(stmt, 1);
    s->profile = sbx_store_column_text(stmt, 2);
    s->memory_mib = (guint64)sqlite3_column_int64(stmt, 3); /* NULL reads as 0 */
    s->created_at_ms = sqlite3_column_int64(stmt, 4);
    s->idle_timeout_ms = sqlite3_column_int64(stmt, 5);
    s->max_lifetime_ms = sqlite3_column_int64(stmt, 6);
    s->status = sbx_store_column_text(stmt, 7);
    s->reason = sbx_store_column_text(stmt, 8);
    s->ended_at_ms = sqlite3_column_int64(stmt, 9);
    s->executions = (guint64)sqlite3_column_int64(stmt, 10);
    return s;
}

gboolean sbx_session_records_get(SbxStore *store, const char *tenant_id, const char *id,
                                 SbxSessionRecord **ret, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(
        store,
        "SELECT " SESSION_COLUMNS " FROM sessions WHERE id = ?1 AND (?2 IS NULL OR tenant_id = ?2)",
        error);

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, id);
    sbx_store_bind_text(stmt, 2, tenant_id);
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_NOT_FOUND, "no session \"%s\"", id);
        return FALSE;
    }
    if (rc != SQLITE_ROW) {
        return sbx_store_fail(store, "read a session", error);
    }
    *ret = read_row(stmt);
    return TRUE;
}

gboolean sbx_session_records_list(SbxStore *store, const SbxSessionFilter *f, GPtrArray **ret,
                                  GError **error)
{
    static const SbxSessionFilter all = {0};
    f = f != NULL ? f : &all;
    guint limit = f->limit == 0 ? SBX_RECORDS_LIST_DEFAULT : MIN(f->limit, SBX_RECORDS_LIST_MAX);
    g_autoptr(sqlite3_stmt) stmt =
        sbx_store_prepare(store,
                          "SELECT " SESSION_COLUMNS " FROM sessions"
                          " WHERE (?1 IS NULL OR tenant_id = ?1) AND (?2 IS NULL OR status = ?2)"
                          " AND (?3 IS NULL OR (created_at, id) < (?4, ?3))"
                          " ORDER BY created_at DESC, id DESC LIMIT ?5",
                          error);
    g_autoptr(GPtrArray) list =
        g_ptr_array_new_with_free_func((GDestroyNotify)sbx_session_record_free);
    int rc;

    if (stmt == NULL) {
        return FALSE;
    }
    sbx_store_bind_text(stmt, 1, f->tenant_id);
    sbx_store_bind_text(stmt, 2, f->status);
    sbx_store_bind_text(stmt, 3, f->cursor_id);
    sqlite3_bind_int64(stmt, 4, f->cursor_created_ms);
    sqlite3_bind_int64(stmt, 5, limit);
    while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
        g_ptr_array_add(list, read_row(stmt));
    }
    if (rc != SQLITE_DONE) {
        return sbx_store_fail(store, "list sessions", error);
    }
    *ret = g_steal_pointer(&list);
    return TRUE;
}

static void append_str(GString *out, const char *key, const char *s)
{
    g_string_append_printf(out, ",\"%s\":", key);
    sbx_store_json_str(out, s);
}

/* A number, null if 0 (not known, not ended, none). */
static void append_nonzero(GString *out, const char *key, gint64 v)
{
    if (v != 0) {
        g_string_append_printf(out, ",\"%s\":%" G_GINT64_FORMAT, key, v);
    } else {
        g_string_append_printf(out, ",\"%s\":null", key);
    }
}

char *sbx_session_record_to_json(const SbxSessionRecord *s)
{
    GString *out = g_string_new("{\"id\":");

    sbx_store_json_str(out, s->id);
    append_str(out, "tenant_id", s->tenant_id);
    append_str(out, "profile", s->profile);
    append_nonzero(out, "memory_mib", (gint64)s->memory_mib);
    append_nonzero(out, "created_at", s->created_at_ms);
    g_string_append_printf(
        out, ",\"idle_timeout_ms\":%" G_GINT64_FORMAT ",\"max_lifetime_ms\":%" G_GINT64_FORMAT,
        s->idle_timeout_ms, s->max_lifetime_ms);
    append_str(out, "status", s->status);
    append_str(out, "reason", s->reason);
    append_nonzero(out, "ended_at", s->ended_at_ms);
    g_string_append_printf(out, ",\"executions\":%" G_GUINT64_FORMAT "}", s->executions);
    return g_string_free(out, FALSE);
}
