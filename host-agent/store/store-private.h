/*
 * What the files of the store share and no user of it sees: the handle, SQLite helpers that
 * turn its failures into GErrors, and the JSON string escaper of the list/show output.
 */
#pragma once

#include <sqlite3.h>

#include "db.h"
#include "records.h"

struct SbxStore {
    sqlite3 *db;
    char *path;
    guint interrupted;          /* executions marked interrupted at open */
    guint sessions_interrupted; /* sessions marked interrupted at open */
    int lock_fd; /* a server's: the exclusive lock beside the file (<path>.lock), or -1 */
    SbxRecordsFinishedFunc on_finished; /* sbx_records_set_on_finished(), or NULL */
    gpointer on_finished_data;
};

G_DEFINE_AUTOPTR_CLEANUP_FUNC(sqlite3_stmt, sqlite3_finalize)

/*
 * A record's size in bytes (sbx_records_prune()), an SQL expression over its row of executions:
 * the bytes of its texts and blobs and of its tool calls' and approvals' (CAST: length() of a
 * text counts characters). Computed by SQLite over what it stored, so it is what the file holds
 * whatever the caller handed in (an output cut at its cap, a finish called twice). Why a column
 * and not SQLite's own accounting: the dbstat table (compiled into Debian 12's libsqlite3)
 * counts pages per table, not per row, and reads every page of the file to do so. A column
 * added to these tables adds its term here, and a migration recomputes the sizes.
 */
#define SBX_STORE_RECORD_SIZE                                                                      \
    "( ifnull(length(CAST(id AS BLOB)), 0) + ifnull(length(CAST(tenant_id AS BLOB)), 0) + "        \
    "ifnull(length(CAST(front_end AS BLOB)), 0) + ifnull(length(CAST(language AS BLOB)), 0) + "    \
    "ifnull(length(CAST(code AS BLOB)), 0) + ifnull(length(CAST(code_sha256 AS BLOB)), 0) + "      \
    "ifnull(length(CAST(entry AS BLOB)), 0) + ifnull(length(CAST(args_json AS BLOB)), 0) + "       \
    "ifnull(length(CAST(profile AS BLOB)), 0) + ifnull(length(CAST(snapshot_key AS BLOB)), 0) + "  \
    "ifnull(length(CAST(image_id AS BLOB)), 0) + ifnull(length(CAST(status AS BLOB)), 0) + "       \
    "ifnull(length(CAST(result_json AS BLOB)), 0) + "                                              \
    "ifnull(length(CAST(error_json AS BLOB)), 0) + ifnull(length(CAST(stdout AS BLOB)), 0) + "     \
    "ifnull(length(CAST(stderr AS BLOB)), 0) + ifnull(length(CAST(entropy_hex AS BLOB)), 0) + "    \
    "ifnull(length(CAST(catalog AS BLOB)), 0) + ifnull(length(CAST(session_id AS BLOB)), 0) + "    \
    "ifnull(length(CAST(kwargs_json AS BLOB)), 0) + "                                              \
    "ifnull(length(CAST(files_json AS BLOB)), 0) + ifnull(length(CAST(seed_hex AS BLOB)), 0) + "   \
    "ifnull(length(CAST(clock_log_json AS BLOB)), 0) + "                                           \
    "ifnull(length(CAST(not_replayable AS BLOB)), 0) + "                                           \
    "ifnull(length(CAST(event_log_json AS BLOB)), 0) + "                                           \
    "ifnull(length(CAST(tools_json AS BLOB)), 0) + (SELECT ifnull(sum( "                           \
    "ifnull(length(CAST(t.provider AS BLOB)), 0) + ifnull(length(CAST(t.tool AS BLOB)), 0) + "     \
    "ifnull(length(CAST(t.input_json AS BLOB)), 0) + "                                             \
    "ifnull(length(CAST(t.result_json AS BLOB)), 0) + "                                            \
    "ifnull(length(CAST(t.error_json AS BLOB)), 0) + "                                             \
    "ifnull(length(CAST(t.policy_json AS BLOB)), 0)), 0) "                                         \
    "FROM tool_calls t WHERE t.execution_id = executions.id) + (SELECT ifnull(sum( "               \
    "ifnull(length(CAST(a.approval_id AS BLOB)), 0) + "                                            \
    "ifnull(length(CAST(a.provider AS BLOB)), 0) + ifnull(length(CAST(a.tool AS BLOB)), 0) + "     \
    "ifnull(length(CAST(a.decision AS BLOB)), 0) + "                                               \
    "ifnull(length(CAST(a.answered_by AS BLOB)), 0)), 0) "                                         \
    "FROM approvals a WHERE a.execution_id = executions.id))"

/* The reason of a session a server's open found open (SQL text: no quote in it). */
#define SBX_STORE_SESSION_INTERRUPTED_REASON "the server stopped while the session was open"

/** Set @error from the database's last failure, with @what (an action) before it; FALSE. */
gboolean sbx_store_fail(SbxStore *store, const char *what, GError **error);

/** Prepare @sql (a constant: values are bound, never printed into it). NULL and @error. */
sqlite3_stmt *sbx_store_prepare(SbxStore *store, const char *sql, GError **error);

/** Run a constant statement that returns no rows. */
gboolean sbx_store_exec(SbxStore *store, const char *sql, GError **error);

/** Step @stmt to its end (an INSERT, UPDATE, DELETE). */
gboolean sbx_store_step_done(SbxStore *store, sqlite3_stmt *stmt, GError **error);

/** BEGIN IMMEDIATE (the write lock now, so no transaction fails half-way on a busy file). */
gboolean sbx_store_begin(SbxStore *store, GError **error);

/** COMMIT, or, if @ok is FALSE, ROLLBACK; returns whether the transaction was committed. */
gboolean sbx_store_end(SbxStore *store, gboolean ok, GError **error);

/** Bind @s (NULL: SQL NULL) to parameter @i. */
int sbx_store_bind_text(sqlite3_stmt *stmt, int i, const char *s);

/** Column @i as a new string (NULL for SQL NULL). */
char *sbx_store_column_text(sqlite3_stmt *stmt, int i);

/** The time now, unix ms. */
gint64 sbx_store_now_ms(void);

/**
 * Append @len bytes of @data to @out as a JSON string: escapes as JSON needs, each byte that
 * is not part of valid UTF-8 becomes U+FFFD (output is bytes, the JSON is text). NULL data:
 * `null`.
 */
void sbx_store_json_string(GString *out, const char *data, gsize len);

/** As sbx_store_json_string() for a C string (NULL: `null`). */
void sbx_store_json_str(GString *out, const char *s);
