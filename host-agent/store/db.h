/*
 * The store's database (docs/service.md): opening it (mode, WAL, schema and its migrations),
 * closing it, and where it lives by default. Tenants (tenants.h), execution records
 * (records.h) and session records (sessions.h) are kept in it.
 */
#pragma once

#include <glib.h>

#define SBX_STORE_ERROR (sbx_store_error_quark())
GQuark sbx_store_error_quark(void);

typedef enum {
    SBX_STORE_ERROR_DB,      /* SQLite failed (I/O, corrupt file, newer schema); the message says */
    SBX_STORE_ERROR_INVALID, /* an argument breaks a rule (a name, a quota, a size) */
    SBX_STORE_ERROR_NOT_FOUND, /* no such tenant or record (or one of another tenant) */
    SBX_STORE_ERROR_EXISTS,    /* a tenant of that name, a record of that id exists already, a
                                  session's end is recorded already */
    SBX_STORE_ERROR_AUTH,      /* the API key is not one of a tenant (never says why) */
} SbxStoreErrorCode;

/* The schema this build writes (PRAGMA user_version); older files are migrated at open. */
#define SBX_STORE_SCHEMA_VERSION 7

typedef struct SbxStore SbxStore;

/**
 * Open (and create) the database at @path: its folder is made 0700 if missing, the file is
 * 0600, in WAL mode with synchronous=FULL, and its schema is brought to this build's. Executions
 * a previous server left running or queued, and sessions it left open, are marked interrupted
 * (sbx_store_interrupted_at_open(), sbx_store_sessions_interrupted_at_open()). One server per
 * database: a second one opening it would mark the first one's executions and sessions
 * interrupted, so it holds an exclusive lock on <path>.lock (a second server's open fails).
 */
SbxStore *sbx_store_open(const char *path, GError **error);

/**
 * As sbx_store_open(), but executions left running and sessions left open are left alone: for a
 * process that may run beside the server using the database (`sandbox run`, `sandbox records`,
 * `sandbox tenant`).
 */
SbxStore *sbx_store_open_client(const char *path, GError **error);

/** Close @store (NULL: nothing). */
void sbx_store_close(SbxStore *store);

/** How many executions sbx_store_open() found running or queued and marked interrupted. */
guint sbx_store_interrupted_at_open(const SbxStore *store);

/** How many sessions sbx_store_open() found open and marked interrupted. */
guint sbx_store_sessions_interrupted_at_open(const SbxStore *store);

/** The database file's path (owned by @store). */
const char *sbx_store_path(const SbxStore *store);

/**
 * The default database: sandbox.db in the state directory (sbx_paths_state_dir():
 * $SANDBOX_STATE_DIR, the service's $STATE_DIRECTORY, the build tree's, or the user's XDG one;
 * docs/install.md, "Paths").
 */
char *sbx_store_default_path(void);

G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxStore, sbx_store_close)
