/*
 * The files of an execution (docs/sessions.md, "Files of an execution"): put into the
 * workspace before the execute, and the ones the program created or changed collected after
 * its done, with their sizes, SHA-256 and, up to a cap, their contents. The execution core
 * (exec.c) drives it on the execution's session; every front end shares it.
 */
#pragma once

#include <gio/gio.h>

#include "session/files.h" /* session.h */

/*
 * Files an execution takes in: each costs a put (a round trip at least) before the program
 * starts; 64 covers a program's inputs, and a client with more puts them in a session.
 */
#define SBX_EXEC_FILES_IN_MAX 64

/*
 * Their bytes together: they travel in the request (an HTTP body, base64 in JSON) and are held
 * while the execution waits in its queue. 4 MiB of inputs; larger data goes through a session's
 * file API, which streams.
 */
#define SBX_EXEC_FILES_IN_BYTES_MAX (4u * 1024 * 1024)

/*
 * Files reported back: each is an entry of the result (and of its record) and costs a read.
 * Beyond 64 the result says it is truncated.
 */
#define SBX_EXEC_FILES_OUT_MAX 64

/*
 * Bytes of contents returned, over all files: they go into the result (base64 in the HTTP
 * object, kept in memory with the finished execution). 8 MiB; a file beyond what is left is
 * reported with its size and digest but no contents.
 */
#define SBX_EXEC_FILES_CONTENT_MAX (8u * 1024 * 1024)

/*
 * Bytes read back to digest them, over all files: a program may write the guest's whole RAM,
 * and each byte read costs channel time after the execution. 64 MiB (a session's workspace
 * cap); a file beyond what is left is reported with its size only.
 */
#define SBX_EXEC_FILES_READ_MAX (64u * 1024 * 1024)

/*
 * Time a stage may take in all: the puts (4 MiB) or the reads (64 MiB) move at 10 MiB/s or
 * more under TCG, so a minute is slack for a loaded host, and bounds a guest that answers each
 * chunk just within its own timeout (session/files.h). Past it the stage fails (timed out).
 */
#define SBX_EXEC_FILES_STAGE_TIMEOUT_MS 60000

/* A file given to an execution. */
typedef struct {
    char *path;    /* a workspace path (sbx_workspace_path_valid()) */
    GBytes *bytes; /* its contents */
} SbxExecFileIn;

/* A file the execution created or changed. */
typedef struct {
    char *path;
    guint64 size;                             /* as read (or as listed when not read) */
    char sha256[SBX_SESSION_SHA256_HEX_SIZE]; /* "" when not read */
    GBytes *content;                          /* NULL when beyond SBX_EXEC_FILES_CONTENT_MAX */
    char *omitted; /* why the contents (or also the digest) are missing, or NULL */
} SbxExecFileOut;

typedef struct SbxExecFiles SbxExecFiles;

/** A stage ended: @error NULL = done. Runs once, from the main loop. */
typedef void (*SbxExecFilesFunc)(SbxExecFiles *files, const GError *error, gpointer data);

/**
 * The files of one execution: @in (@n_in, within SBX_EXEC_FILES_IN_MAX; copied, the bytes
 * referenced) to put, and the changed ones to collect.
 */
SbxExecFiles *sbx_exec_files_new(const SbxExecFileIn *in, gsize n_in);

/**
 * Before the execute, on @session (the execution's, with no run in progress): the hello if
 * the session has not had it, the puts in order, then a listing of the workspace that the
 * collection compares with. @done runs once. Cancel with sbx_exec_files_cancel().
 */
void sbx_exec_files_stage(SbxExecFiles *files, SbxSession *session, SbxExecFilesFunc done,
                          gpointer data);

/**
 * After the done, on the same session: list the workspace again; every regular file new or
 * changed (size or modification time) since the staging's listing is read, in the listing's
 * order, within the caps above. A file that cannot be read (gone, grown past a cap, refused)
 * is reported with the reason in `omitted`; only a broken session fails the collection.
 */
void sbx_exec_files_collect(SbxExecFiles *files, SbxSession *session, SbxExecFilesFunc done,
                            gpointer data);

/**
 * Abandon the stage in progress (its done never runs). TRUE if the session stays usable
 * (sbx_session_file_cancel()).
 */
gboolean sbx_exec_files_cancel(SbxExecFiles *files);

/** The collected files, in the listing's order; *@truncated: more changed than reported. */
const SbxExecFileOut *sbx_exec_files_out(const SbxExecFiles *files, gsize *n, gboolean *truncated);

/**
 * The collected files as the API's object (docs/api.md): {"changed": [{path, size, sha256,
 * content_base64?, omitted?}], "truncated": bool, "error": @why (why none were collected) or
 * null}; @with_content FALSE: without the contents, as records keep it. Caller frees.
 */
char *sbx_exec_files_json(const SbxExecFiles *files, const char *why, gboolean with_content);

/** Free @files (accepts NULL); a stage in progress is cancelled. */
void sbx_exec_files_free(SbxExecFiles *files);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(SbxExecFiles, sbx_exec_files_free)
