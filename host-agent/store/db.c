/*
 * Opening the store (db.h): the file's mode, the pragmas that make it durable, the schema and
 * its migrations, the executions and sessions a killed server left behind; and the SQLite helpers
 * the other files of the store share (store-private.h).
 */
#include "store-private.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/paths.h"

G_DEFINE_QUARK(sbx - store - error - quark, sbx_store_error)

/*
 * How long a statement waits for another connection's write lock before failing. Writers are
 * short (one record, one tenant), so a CLI verb and the server wait on each other for
 * milliseconds; 5 s covers a loaded host without hanging a script forever.
 */
#define STORE_BUSY_TIMEOUT_MS 5000
/* The WAL file kept after a checkpoint (configure(): journal_size_limit), 64 MiB. */
#define STORE_WAL_KEEP_BYTES 67108864

/*
 * Migrations: entry N takes a database of user_version N to N + 1, in one transaction, and
 * ends by setting user_version. Only appended to: a released entry never changes.
 */
static const char *const migrations[] = {
    /* 0 -> 1: tenants, their catalogs, executions, their tool calls and approvals. */
    "CREATE TABLE tenants ("
    "  id TEXT PRIMARY KEY,"
    "  name TEXT NOT NULL UNIQUE,"
    "  created_at INTEGER NOT NULL,"
    "  key_hash TEXT NOT NULL UNIQUE,"
    "  key_prefix TEXT NOT NULL,"
    "  max_concurrent INTEGER NOT NULL,"
    "  max_per_minute INTEGER NOT NULL,"
    "  max_timeout_ms INTEGER NOT NULL,"
    "  max_output_bytes INTEGER NOT NULL);"
    "CREATE TABLE tenant_catalogs ("
    "  tenant_id TEXT NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,"
    "  catalog TEXT NOT NULL,"
    "  PRIMARY KEY (tenant_id, catalog));"
    /* tenant_id is no foreign key: a record outlives its tenant (retention removes it). */
    "CREATE TABLE executions ("
    "  id TEXT PRIMARY KEY,"
    "  tenant_id TEXT,"
    "  front_end TEXT NOT NULL,"
    "  language TEXT NOT NULL,"
    "  code TEXT NOT NULL,"
    "  code_sha256 TEXT NOT NULL,"
    "  entry TEXT,"
    "  args_json TEXT,"
    "  profile TEXT,"
    "  snapshot_key TEXT,"
    "  image_id TEXT,"
    "  timeout_ms INTEGER NOT NULL,"
    "  output_limit INTEGER NOT NULL,"
    "  status TEXT NOT NULL,"
    "  exit_code INTEGER,"
    "  result_json TEXT,"
    "  error_json TEXT,"
    "  stdout BLOB,"
    "  stderr BLOB,"
    "  stdout_truncated INTEGER NOT NULL DEFAULT 0,"
    "  stderr_truncated INTEGER NOT NULL DEFAULT 0,"
    "  created_at INTEGER NOT NULL,"
    "  started_at INTEGER,"
    "  finished_at INTEGER,"
    "  boot_ms INTEGER,"
    "  duration_ms INTEGER,"
    "  entropy_hex TEXT,"
    "  guest_clock_ms INTEGER);"
    "CREATE INDEX executions_created ON executions (created_at, id);"
    "CREATE INDEX executions_tenant ON executions (tenant_id, created_at, id);"
    "CREATE INDEX executions_status ON executions (status);"
    "CREATE TABLE tool_calls ("
    "  execution_id TEXT NOT NULL REFERENCES executions(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  call_id INTEGER NOT NULL,"
    "  provider TEXT NOT NULL,"
    "  tool TEXT NOT NULL,"
    "  input_json TEXT NOT NULL,"
    "  ok INTEGER NOT NULL,"
    "  result_json TEXT,"
    "  error_json TEXT,"
    "  policy_json TEXT,"
    "  duration_ms INTEGER NOT NULL,"
    "  PRIMARY KEY (execution_id, seq));"
    "CREATE TABLE approvals ("
    "  execution_id TEXT NOT NULL REFERENCES executions(id) ON DELETE CASCADE,"
    "  seq INTEGER NOT NULL,"
    "  approval_id TEXT NOT NULL,"
    "  provider TEXT NOT NULL,"
    "  tool TEXT NOT NULL,"
    "  decision TEXT NOT NULL,"
    "  answered_by TEXT,"
    "  asked_at INTEGER NOT NULL,"
    "  answered_at INTEGER,"
    "  PRIMARY KEY (execution_id, seq));"
    "PRAGMA user_version = 1;",
    /* 1 -> 2: the catalog an API request named, so the API can show the execution whole once
     * the server has forgotten it (after a restart). */
    "ALTER TABLE executions ADD COLUMN catalog TEXT;"
    "PRAGMA user_version = 2;",
    /* 2 -> 3: sessions (a VM a tenant keeps for several executions) and the session an
     * execution ran in; the tenants' session quotas, existing tenants given the defaults of
     * this version (2 sessions, 1024 MiB: tenants.h), as literals since this entry never
     * changes. tenant_id is no foreign key, as for executions. */
    "CREATE TABLE sessions ("
    "  id TEXT PRIMARY KEY,"
    "  tenant_id TEXT,"
    "  profile TEXT NOT NULL,"
    "  memory_mib INTEGER,"
    "  created_at INTEGER NOT NULL,"
    "  idle_timeout_ms INTEGER NOT NULL,"
    "  max_lifetime_ms INTEGER NOT NULL,"
    "  status TEXT NOT NULL,"
    "  reason TEXT,"
    "  ended_at INTEGER);"
    "CREATE INDEX sessions_created ON sessions (created_at, id);"
    "CREATE INDEX sessions_tenant ON sessions (tenant_id, created_at, id);"
    "CREATE INDEX sessions_status ON sessions (status);"
    "ALTER TABLE executions ADD COLUMN session_id TEXT;"
    "CREATE INDEX executions_session ON executions (session_id, created_at, id);"
    "ALTER TABLE tenants ADD COLUMN max_sessions INTEGER NOT NULL DEFAULT 2;"
    "ALTER TABLE tenants ADD COLUMN max_session_memory_mib INTEGER NOT NULL DEFAULT 1024;"
    "PRAGMA user_version = 3;",
    /* 3 -> 4: a function call's keyword arguments, and the files an execution took in and
     * returned (their names, sizes and digests: exec-files.h; not their contents). */
    "ALTER TABLE executions ADD COLUMN kwargs_json TEXT;"
    "ALTER TABLE executions ADD COLUMN files_json TEXT;"
    "PRAGMA user_version = 4;",
    /* 4 -> 5: what a replay needs from the runners (docs/protocol.md, "Replay"): the seed of
     * their generators, the program's clock reads, and whether the run can be replayed (NULL:
     * recorded before this, or not finished). */
    "ALTER TABLE executions ADD COLUMN seed_hex TEXT;"
    "ALTER TABLE executions ADD COLUMN clock_log_json TEXT;"
    "ALTER TABLE executions ADD COLUMN replayable INTEGER;"
    "ALTER TABLE executions ADD COLUMN not_replayable TEXT;"
    "PRAGMA user_version = 5;",
    /* 5 -> 6: the replay logs of a run killed without its done (docs/protocol.md, "Replay"): the
     * order of its asynchronous deliveries (timers, tool results), and whether its logs are
     * open (it was killed after their last entries: a replay waits past their ends) */
    "ALTER TABLE executions ADD COLUMN event_log_json TEXT;"
    "ALTER TABLE executions ADD COLUMN log_open INTEGER;"
    /* the tools the guest was given (their real names and descriptions, in the catalog's
     * order): a replay gives the same namespace (docs/replay.md) */
    "ALTER TABLE executions ADD COLUMN tools_json TEXT;"
    "PRAGMA user_version = 6;",
    /* 6 -> 7: each record's size in bytes, for the bound on the bytes the store keeps
     * (sbx_records_prune()): the bytes of its texts and blobs and of its tool calls' and
     * approvals' (SBX_STORE_RECORD_SIZE when this was written, spelled out: a column added later
     * would not exist yet in a file of this version), computed for the records there are. And
     * an index that covers the pruning by bytes in its order, newest first, so that it reads the
     * index alone: the column is the row's last, after the outputs, and reading it from each
     * row would follow their overflow pages. */
    "ALTER TABLE executions ADD COLUMN size_bytes INTEGER NOT NULL DEFAULT 0;"
    "UPDATE executions SET size_bytes = ifnull(length(CAST(id AS BLOB)), 0) + "
    "ifnull(length(CAST(tenant_id AS BLOB)), 0) + ifnull(length(CAST(front_end AS BLOB)), 0) + "
    "ifnull(length(CAST(language AS BLOB)), 0) + ifnull(length(CAST(code AS BLOB)), 0) + "
    "ifnull(length(CAST(code_sha256 AS BLOB)), 0) + ifnull(length(CAST(entry AS BLOB)), 0) + "
    "ifnull(length(CAST(args_json AS BLOB)), 0) + ifnull(length(CAST(profile AS BLOB)), 0) + "
    "ifnull(length(CAST(snapshot_key AS BLOB)), 0) + ifnull(length(CAST(image_id AS BLOB)), 0) + "
    "ifnull(length(CAST(status AS BLOB)), 0) + ifnull(length(CAST(result_json AS BLOB)), 0) + "
    "ifnull(length(CAST(error_json AS BLOB)), 0) + ifnull(length(CAST(stdout AS BLOB)), 0) + "
    "ifnull(length(CAST(stderr AS BLOB)), 0) + ifnull(length(CAST(entropy_hex AS BLOB)), 0) + "
    "ifnull(length(CAST(catalog AS BLOB)), 0) + ifnull(length(CAST(session_id AS BLOB)), 0) + "
    "ifnull(length(CAST(kwargs_json AS BLOB)), 0) + ifnull(length(CAST(files_json AS BLOB)), 0) + "
    "ifnull(length(CAST(seed_hex AS BLOB)), 0) + ifnull(length(CAST(clock_log_json AS BLOB)), 0) + "
    "ifnull(length(CAST(not_replayable AS BLOB)), 0) + "
    "ifnull(length(CAST(event_log_json AS BLOB)), 0) + "
    "ifnull(length(CAST(tools_json AS BLOB)), 0) + (SELECT ifnull(sum( "
    "ifnull(length(CAST(t.provider AS BLOB)), 0) + ifnull(length(CAST(t.tool AS BLOB)), 0) + "
    "ifnull(length(CAST(t.input_json AS BLOB)), 0) + "
    "ifnull(length(CAST(t.result_json AS BLOB)), 0) + "
    "ifnull(length(CAST(t.error_json AS BLOB)), 0) + "
    "ifnull(length(CAST(t.policy_json AS BLOB)), 0)), 0) "
    "FROM tool_calls t WHERE t.execution_id = executions.id) + (SELECT ifnull(sum( "
    "ifnull(length(CAST(a.approval_id AS BLOB)), 0) + "
    "ifnull(length(CAST(a.provider AS BLOB)), 0) + ifnull(length(CAST(a.tool AS BLOB)), 0) + "
    "ifnull(length(CAST(a.decision AS BLOB)), 0) + "
    "ifnull(length(CAST(a.answered_by AS BLOB)), 0)), 0) "
    "FROM approvals a WHERE a.execution_id = executions.id);"
    "CREATE INDEX executions_size ON executions (created_at, id, status, size_bytes);"
    "PRAGMA user_version = 7;",
};

G_STATIC_ASSERT(G_N_ELEMENTS(migrations) == SBX_STORE_SCHEMA_VERSION);

gboolean sbx_store_fail(SbxStore *store, const char *what, GError **error)
{
    g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB, "%s: %s: %s", store->path, what,
                sqlite3_errmsg(store->db));
    return FALSE;
}

sqlite3_stmt *sbx_store_prepare(SbxStore *store, const char *sql, GError **error)
{
    sqlite3_stmt *stmt = NULL;

    if (sqlite3_prepare_v2(store->db, sql, -1, &stmt, NULL) != SQLITE_OK) {
        sbx_store_fail(store, "prepare", error);
        return NULL;
    }
    return stmt;
}

gboolean sbx_store_exec(SbxStore *store, const char *sql, GError **error)
{
    if (sqlite3_exec(store->db, sql, NULL, NULL, NULL) != SQLITE_OK) {
        return sbx_store_fail(store, "exec", error);
    }
    return TRUE;
}

gboolean sbx_store_step_done(SbxStore *store, sqlite3_stmt *stmt, GError **error)
{
    int rc = sqlite3_step(stmt);

    if (rc == SQLITE_CONSTRAINT) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_EXISTS, "%s",
                    sqlite3_errmsg(store->db));
        return FALSE;
    }
    return rc == SQLITE_DONE || sbx_store_fail(store, "write", error);
}

gboolean sbx_store_begin(SbxStore *store, GError **error)
{
    return sbx_store_exec(store, "BEGIN IMMEDIATE", error);
}

gboolean sbx_store_end(SbxStore *store, gboolean ok, GError **error)
{
    if (ok && sbx_store_exec(store, "COMMIT", error)) {
        return TRUE;
    }
    /* A failed COMMIT leaves the transaction open; either way nothing of it stays. */
    (void)sqlite3_exec(store->db, "ROLLBACK", NULL, NULL, NULL);
    return FALSE;
}

int sbx_store_bind_text(sqlite3_stmt *stmt, int i, const char *s)
{
    return s != NULL ? sqlite3_bind_text(stmt, i, s, -1, SQLITE_TRANSIENT)
                     : sqlite3_bind_null(stmt, i);
}

char *sbx_store_column_text(sqlite3_stmt *stmt, int i)
{
    const unsigned char *s = sqlite3_column_text(stmt, i);
    return s != NULL ? g_strdup((const char *)s) : NULL;
}

gint64 sbx_store_now_ms(void)
{
    return g_get_real_time() / 1000;
}

char *sbx_store_default_path(void)
{
    g_autofree char *dir = sbx_paths_state_dir();

    return g_build_filename(dir, "sandbox.db", NULL);
}

/*
 * Make @path's folder (0700) and the file itself (0600) before SQLite does: it would create
 * the file with the umask's mode, and its -wal and -shm files take the database file's mode.
 * The file holds code, output and key hashes: no one but its owner reads it.
 */
static gboolean make_file(const char *path, GError **error)
{
    g_autofree char *dir = g_path_get_dirname(path);

    if (g_mkdir_with_parents(dir, 0700) != 0) {
        int e = errno;
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB, "create %s: %s", dir,
                    g_strerror(e));
        return FALSE;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 || fchmod(fd, 0600) != 0) {
        int e = errno;
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB, "open %s: %s", path, g_strerror(e));
        if (fd >= 0) {
            close(fd);
        }
        return FALSE;
    }
    close(fd);
    return TRUE;
}

/* A pragma that answers with one text row, which must be @want (journal_mode answers so). */
static gboolean pragma_expect(SbxStore *store, const char *sql, const char *want, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(store, sql, error);

    if (stmt == NULL) {
        return FALSE;
    }
    if (sqlite3_step(stmt) != SQLITE_ROW) {
        return sbx_store_fail(store, sql, error);
    }
    const char *got = (const char *)sqlite3_column_text(stmt, 0);
    if (g_strcmp0(got, want) != 0) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB, "%s: %s answered \"%s\", not %s",
                    store->path, sql, got != NULL ? got : "", want);
        return FALSE;
    }
    return TRUE;
}

/*
 * WAL: readers (`sandbox records list`) never block the server's writes, and a commit is one
 * append to the log. synchronous=FULL: a finished record must survive kill -9 of the server,
 * and more. A commit is in the WAL file when COMMIT returns, so a killed process loses nothing
 * at any level; FULL also fsyncs the WAL at every commit, so an OS crash or a power cut loses
 * no committed record either (NORMAL would fsync only at checkpoints). One fsync per record is
 * cheap beside an execution. foreign_keys: tool calls and approvals go with their execution.
 * journal_size_limit: a prune by bytes (retention.c) may write hundreds of MiB into the WAL in
 * one transaction (Debian's SQLite overwrites what it deletes: secure_delete); without a limit
 * the WAL file keeps that size after its checkpoint. 64 MiB keeps the usual commits' WAL and
 * gives the rest back.
 */
static gboolean configure(SbxStore *store, GError **error)
{
    if (sqlite3_busy_timeout(store->db, STORE_BUSY_TIMEOUT_MS) != SQLITE_OK) {
        return sbx_store_fail(store, "busy timeout", error);
    }
    return pragma_expect(store, "PRAGMA journal_mode=WAL", "wal", error) &&
           sbx_store_exec(store, "PRAGMA synchronous=FULL", error) &&
           sbx_store_exec(store, "PRAGMA foreign_keys=ON", error) &&
           sbx_store_exec(store, "PRAGMA journal_size_limit=" G_STRINGIFY(STORE_WAL_KEEP_BYTES),
                          error);
}

static gboolean user_version(SbxStore *store, int *ret, GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(store, "PRAGMA user_version", error);

    if (stmt == NULL) {
        return FALSE;
    }
    if (sqlite3_step(stmt) != SQLITE_ROW) {
        return sbx_store_fail(store, "read the schema version", error);
    }
    *ret = sqlite3_column_int(stmt, 0);
    return TRUE;
}

/* Bring the schema to SBX_STORE_SCHEMA_VERSION, one migration per transaction. */
static gboolean migrate(SbxStore *store, GError **error)
{
    int version = 0;

    if (!user_version(store, &version, error)) {
        return FALSE;
    }
    if (version < 0 || version > SBX_STORE_SCHEMA_VERSION) {
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB,
                    "%s: schema version %d; this sandbox knows up to %d (a newer sandbox made it)",
                    store->path, version, SBX_STORE_SCHEMA_VERSION);
        return FALSE;
    }
    for (; version < SBX_STORE_SCHEMA_VERSION; version++) {
        if (!sbx_store_begin(store, error) ||
            !sbx_store_end(store, sbx_store_exec(store, migrations[version], error), error)) {
            return FALSE;
        }
    }
    return TRUE;
}

/* Run @sql, an UPDATE whose ?1 is the time now; *@ret_changed: how many rows it changed. */
static gboolean update_now(SbxStore *store, const char *sql, gint64 now, guint *ret_changed,
                           GError **error)
{
    g_autoptr(sqlite3_stmt) stmt = sbx_store_prepare(store, sql, error);

    if (stmt == NULL) {
        return FALSE;
    }
    sqlite3_bind_int64(stmt, 1, now);
    if (!sbx_store_step_done(store, stmt, error)) {
        return FALSE;
    }
    *ret_changed = (guint)sqlite3_changes(store->db);
    return TRUE;
}

/*
 * Executions left running or queued, and sessions left open, by a server that is gone:
 * interrupted, now, in one transaction. A session lives in its server's memory only, so none
 * survives the server (kill -9 included); its record must not claim it is open. An interrupted
 * record is finished: its size is computed then, as sbx_records_finish() does (it counts in the
 * bound on bytes), over its new status.
 */
static gboolean mark_interrupted(SbxStore *store, GError **error)
{
    gint64 now = sbx_store_now_ms();

    if (!sbx_store_begin(store, error)) {
        return FALSE;
    }
    guint sized = 0;
    gboolean ok = update_now(store,
                             "UPDATE executions SET status = 'interrupted', finished_at = ?1"
                             " WHERE status IN ('running', 'queued')",
                             now, &store->interrupted, error) &&
                  update_now(store,
                             "UPDATE executions SET size_bytes = " SBX_STORE_RECORD_SIZE
                             " WHERE status = 'interrupted' AND finished_at = ?1",
                             now, &sized, error) &&
                  update_now(store,
                             "UPDATE sessions SET status = 'interrupted', ended_at = ?1,"
                             " reason = '" SBX_STORE_SESSION_INTERRUPTED_REASON "'"
                             " WHERE status = 'open'",
                             now, &store->sessions_interrupted, error);
    return sbx_store_end(store, ok, ok ? error : NULL);
}

/*
 * A server's lock on the database: one server per file, since a server marks every execution
 * still running interrupted when it opens (a second one would interrupt the first's). The
 * lock goes with the process, kill -9 included, so a dead server never blocks the next.
 */
static gboolean lock_server(SbxStore *store, GError **error)
{
    g_autofree char *lock = g_strdup_printf("%s.lock", store->path);

    store->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (store->lock_fd < 0 || flock(store->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        g_set_error(error, SBX_STORE_ERROR, SBX_STORE_ERROR_DB, "%s: %s", lock,
                    e == EWOULDBLOCK ? "another `sandbox serve` uses this database"
                                     : g_strerror(e));
        return FALSE;
    }
    return TRUE;
}

static SbxStore *open_store(const char *path, gboolean server, GError **error)
{
    g_autoptr(SbxStore) store = g_new0(SbxStore, 1);

    store->lock_fd = -1;
    store->path = g_strdup(path);
    if (!make_file(path, error) || (server && !lock_server(store, error))) {
        return NULL;
    }
    int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOFOLLOW | SQLITE_OPEN_FULLMUTEX;
    if (sqlite3_open_v2(path, &store->db, flags, NULL) != SQLITE_OK) {
        sbx_store_fail(store, "open", error);
        return NULL;
    }
    sqlite3_extended_result_codes(store->db, 0);
    if (!configure(store, error) || !migrate(store, error) ||
        (server && !mark_interrupted(store, error))) {
        return NULL;
    }
    return g_steal_pointer(&store);
}

SbxStore *sbx_store_open(const char *path, GError **error)
{
    return open_store(path, TRUE, error);
}

SbxStore *sbx_store_open_client(const char *path, GError **error)
{
    return open_store(path, FALSE, error);
}

void sbx_store_close(SbxStore *store)
{
    if (store == NULL) {
        return;
    }
    sqlite3_close_v2(store->db); /* NULL: a no-op */
    if (store->lock_fd >= 0) {
        close(store->lock_fd); /* the lock goes with it */
    }
    g_free(store->path);
    g_free(store);
}

guint sbx_store_interrupted_at_open(const SbxStore *store)
{
    return store->interrupted;
}

guint sbx_store_sessions_interrupted_at_open(const SbxStore *store)
{
    return store->sessions_interrupted;
}

const char *sbx_store_path(const SbxStore *store)
{
    return store->path;
}
