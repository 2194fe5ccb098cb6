/*
 * A session's workspace files (docs/sessions.md, "Files"): put, get, list and delete, each one
 * operation on the session's channel between its executions (sessions.h), streamed to and
 * from the guest in chunks (session/files.h). The front ends (the Unix socket, the HTTP API)
 * call these; the caps are here.
 */
#pragma once

#include <gio/gio.h>

#include "protocol/message.h"
#include "server/sessions.h"

/*
 * One file in or out: 32 MiB. The workspace lives in the guest's RAM (256 MiB for the default
 * profile, ~100 of it taken by the kernel and the runtimes), and the server holds a file whole
 * while it moves (an HTTP body, the bytes of a get).
 */
#define SBX_SESSION_FILE_MAX (32u * 1024 * 1024)

/* What the files put into a workspace may add up to: 64 MiB, a quarter of the default VM. */
#define SBX_SESSION_WORKSPACE_MAX (64u * 1024 * 1024)

/* More errors of SBX_SERVER_SESSION_ERROR (sessions.h), for the files. */
enum {
    SBX_SERVER_SESSION_ERROR_FILE_NOT_FOUND = 100, /* no such file (404) */
    SBX_SERVER_SESSION_ERROR_FILE_REFUSED,         /* a path the guest refuses: a symlink on the
                                                      way, a directory (400) */
    SBX_SERVER_SESSION_ERROR_FILE_TOO_LARGE,       /* past SBX_SESSION_FILE_MAX (413) */
    SBX_SERVER_SESSION_ERROR_WORKSPACE_FULL,       /* past SBX_SESSION_WORKSPACE_MAX (507) */
    SBX_SERVER_SESSION_ERROR_FILE_FAILED,          /* the guest failed, or broke the channel
                                                      (the session ends then) (502) */
};

/**
 * The code a client reads for an error of sessions.h or of this file (serve's socket, the MCP
 * session tools): not_found, busy, ended, quota, bad_request, too_large, workspace_full, failed,
 * unavailable (anything else: the server's room, its VMs).
 */
const char *sbx_server_session_error_code(const GError *error);

/**
 * The code a client reads for an error of session/files.h (a file operation on a session's
 * channel), as the front ends here map it: not_found, bad_request, workspace_full, too_large,
 * busy, ended, failed. `sandbox mcp`'s own sessions (cli/mcp-local.c) answer with it too.
 */
const char *sbx_server_session_file_error_code(const GError *error);

/* The end of a put or a get. */
typedef struct {
    const char *path;
    guint64 size;
    char sha256[65]; /* hex, of the bytes that crossed */
    GBytes *data;    /* a get's bytes (the callback may keep a reference), else NULL */
} SbxSessionFileResult;

typedef void (*SbxSessionFileFunc)(SbxServerSession *session, const SbxSessionFileResult *result,
                                   const GError *error, gpointer data);

/* The end of a list: every entry under the directory (at most SBX_FILE_LIST_MAX). */
typedef void (*SbxSessionListFunc)(SbxServerSession *session, const SbxFileEntry *entries,
                                   gsize n_entries, gboolean truncated, const GError *error,
                                   gpointer data);

/**
 * Put @data (at most SBX_SESSION_FILE_MAX bytes, and within what the workspace may hold) at
 * workspace path @path (sbx_workspace_path_valid()); @func runs once, from the loop. FALSE with
 * @error when it cannot start (busy, ended, too large, a bad path): @func never runs then.
 */
gboolean sbx_server_session_put_file(SbxServerSession *session, const char *path, GBytes *data,
                                     SbxSessionFileFunc func, gpointer user_data, GError **error);

/** Get the file at @path (at most SBX_SESSION_FILE_MAX bytes) into result->data. */
gboolean sbx_server_session_get_file(SbxServerSession *session, const char *path,
                                     SbxSessionFileFunc func, gpointer user_data, GError **error);

/** List the directory @path (NULL: the workspace). */
gboolean sbx_server_session_list_files(SbxServerSession *session, const char *path,
                                       SbxSessionListFunc func, gpointer user_data, GError **error);

/** Delete @path (a file, a symlink, or a directory with what it holds); result has no data. */
gboolean sbx_server_session_delete_file(SbxServerSession *session, const char *path,
                                        SbxSessionFileFunc func, gpointer user_data,
                                        GError **error);
