/*
 * What the files of the store share and no user of it sees: the handle, SQLite helpers that
 * turn its failures into GErrors, and the JSON string escaper of the list/show output.
 */
#pragma once

#include <sqlite3.h>

#include "db.h"

struct SbxStore {
    sqlite3 *db;
    char *path;
    guint interrupted;          /* executions marked interrupted at open */
    guint sessions_interrupted; /* sessions marked interrupted at open */
    int lock_fd; /* a server's: the exclusive lock beside the file (<path>.lock), or -1 */
};

G_DEFINE_AUTOPTR_CLEANUP_FUNC(sqlite3_stmt, sqlite3_finalize)

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
