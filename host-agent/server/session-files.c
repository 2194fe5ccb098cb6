/*
 * A session's workspace files (session-files.h): each operation waits for the session's
 * channel (sessions.h), runs on it (session/files.h) and reports once.
 */
#include "server/session-files.h"

#include <string.h>

#include "files.h"

typedef enum { OP_PUT, OP_GET, OP_LIST, OP_DELETE } OpKind;

typedef struct {
    SbxServerSession *session; /* a reference */
    OpKind kind;
    char *path;          /* NULL: a list of the workspace */
    GBytes *data;        /* a put's */
    SbxSession *channel; /* while the operation has it */
    gboolean sizing;     /* a put: the workspace's listing before the write */
    SbxSessionFileFunc file_func;
    SbxSessionListFunc list_func;
    gpointer user_data;
} FileOp;

static void op_free(FileOp *op)
{
    sbx_server_session_unref(op->session);
    g_free(op->path);
    g_clear_pointer(&op->data, g_bytes_unref);
    g_free(op);
}

/* What a session/files.h error means for a client. */
static int error_code(const GError *e)
{
    if (e->domain == SBX_SERVER_SESSION_ERROR) {
        return e->code;
    }
    if (e->domain != G_IO_ERROR) {
        return SBX_SERVER_SESSION_ERROR_FILE_FAILED;
    }
    switch (e->code) {
    case G_IO_ERROR_NOT_FOUND:
        return SBX_SERVER_SESSION_ERROR_FILE_NOT_FOUND;
    case G_IO_ERROR_IS_DIRECTORY:
    case G_IO_ERROR_NOT_DIRECTORY:
    case G_IO_ERROR_PERMISSION_DENIED:
    case G_IO_ERROR_INVALID_ARGUMENT:
    case G_IO_ERROR_FILENAME_TOO_LONG:
    case G_IO_ERROR_EXISTS:
    case G_IO_ERROR_NOT_EMPTY:
    case G_IO_ERROR_READ_ONLY:
        return SBX_SERVER_SESSION_ERROR_FILE_REFUSED;
    case G_IO_ERROR_NO_SPACE:
        return SBX_SERVER_SESSION_ERROR_WORKSPACE_FULL;
    case G_IO_ERROR_MESSAGE_TOO_LARGE:
        return SBX_SERVER_SESSION_ERROR_FILE_TOO_LARGE;
    case G_IO_ERROR_BUSY:
        return SBX_SERVER_SESSION_ERROR_BUSY;
    case G_IO_ERROR_CLOSED:
    case G_IO_ERROR_NOT_INITIALIZED:
        return SBX_SERVER_SESSION_ERROR_ENDED;
    default:
        return SBX_SERVER_SESSION_ERROR_FILE_FAILED;
    }
}

/* Report @op's end (@error, or the put/get/delete @outcome, or the list's) and free it. */
static void finish(FileOp *op, const SbxFileOutcome *outcome, const GError *error)
{
    g_autoptr(GError) e = NULL;
    SbxSessionFileResult r = {.path = op->path};
    gboolean broken = op->channel != NULL && error != NULL && !sbx_session_is_ready(op->channel);

    if (error != NULL) {
        e = g_error_new(SBX_SERVER_SESSION_ERROR, error_code(error), "%s", error->message);
    }
    op->channel = NULL;
    /* the session first: its state is settled when the front end answers (a broken channel:
     * the session has ended) */
    sbx_server_session_channel_done(op->session, broken, e != NULL ? e->message : NULL);
    if (op->kind == OP_LIST) {
        op->list_func(op->session, outcome != NULL ? outcome->entries : NULL,
                      outcome != NULL ? outcome->n_entries : 0,
                      outcome != NULL && outcome->truncated, e, op->user_data);
    } else {
        if (outcome != NULL) {
            r.size = outcome->size;
            memcpy(r.sha256, outcome->sha256, sizeof(r.sha256));
            r.data = outcome->data;
        }
        op->file_func(op->session, e == NULL ? &r : NULL, e, op->user_data);
    }
    op_free(op);
}

static void on_done(SbxSession *channel, const SbxFileOutcome *outcome, const GError *error,
                    gpointer data);

/* A put knows the workspace's size: within the cap, the write. */
static void put_after_list(FileOp *op, const SbxFileOutcome *listing)
{
    g_autoptr(GError) error = NULL;
    guint64 used = 0;

    for (gsize i = 0; i < listing->n_entries; i++) {
        const SbxFileEntry *en = &listing->entries[i];
        if (en->type == SBX_FILE_TYPE_FILE && strcmp(en->path, op->path) != 0) {
            used += en->size; /* the file it replaces does not count */
        }
    }
    if (used + g_bytes_get_size(op->data) > SBX_SESSION_WORKSPACE_MAX) {
        error = g_error_new(SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_WORKSPACE_FULL,
                            "the workspace holds %" G_GUINT64_FORMAT " bytes; %" G_GSIZE_FORMAT
                            " more is past its %u MiB",
                            used, g_bytes_get_size(op->data), SBX_SESSION_WORKSPACE_MAX >> 20);
        finish(op, NULL, error);
        return;
    }
    op->sizing = FALSE;
    if (!sbx_session_file_put_async(op->channel, op->path, op->data, on_done, op, &error)) {
        finish(op, NULL, error);
    }
}

static void on_done(SbxSession *channel, const SbxFileOutcome *outcome, const GError *error,
                    gpointer data)
{
    FileOp *op = data;
    (void)channel;

    if (error == NULL && op->sizing) {
        put_after_list(op, outcome);
        return;
    }
    finish(op, outcome, error);
}

/* The session ends while @op has the channel: it leaves it, and its client hears why. */
static void on_abort(gpointer data)
{
    FileOp *op = data;
    g_autoptr(GError) e =
        g_error_new_literal(SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_ENDED,
                            "the session ended during the file operation");

    if (op->channel != NULL) {
        sbx_session_file_cancel(op->channel); /* its callback never runs now */
    }
    op->channel = NULL;
    finish(op, NULL, e);
}

static void on_channel(SbxServerSession *session, SbxSession *channel, const GError *error,
                       gpointer data)
{
    FileOp *op = data;
    g_autoptr(GError) e = NULL;
    gboolean ok = FALSE;
    (void)session;

    if (error != NULL) {
        finish(op, NULL, error);
        return;
    }
    op->channel = channel;
    switch (op->kind) {
    case OP_PUT:
        op->sizing = TRUE; /* the workspace's listing first: its cap */
        ok = sbx_session_file_list_async(channel, NULL, on_done, op, &e);
        break;
    case OP_GET:
        ok = sbx_session_file_get_async(channel, op->path, SBX_SESSION_FILE_MAX, NULL, on_done, op,
                                        &e);
        break;
    case OP_LIST:
        ok = sbx_session_file_list_async(channel, op->path, on_done, op, &e);
        break;
    case OP_DELETE:
        ok = sbx_session_file_delete_async(channel, op->path, on_done, op, &e);
        break;
    }
    if (!ok) {
        finish(op, NULL, e);
    }
}

static gboolean start(SbxServerSession *session, OpKind kind, const char *path, GBytes *data,
                      SbxSessionFileFunc file_func, SbxSessionListFunc list_func,
                      gpointer user_data, GError **error)
{
    if (path != NULL && !sbx_workspace_path_valid(path)) {
        g_set_error_literal(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_FILE_REFUSED,
                            "not a workspace path: relative, no \".\" or \"..\" component, at "
                            "most 1024 bytes");
        return FALSE;
    }
    if (data != NULL && g_bytes_get_size(data) > SBX_SESSION_FILE_MAX) {
        g_set_error(error, SBX_SERVER_SESSION_ERROR, SBX_SERVER_SESSION_ERROR_FILE_TOO_LARGE,
                    "the file is larger than %u MiB", SBX_SESSION_FILE_MAX >> 20);
        return FALSE;
    }
    if (kind == OP_PUT || kind == OP_DELETE) {
        sbx_server_session_mark_files_changed(session); /* even if it fails half way */
    }
    FileOp *op = g_new0(FileOp, 1);
    op->session = sbx_server_session_ref(session);
    op->kind = kind;
    op->path = g_strdup(path);
    op->data = data != NULL ? g_bytes_ref(data) : NULL;
    op->file_func = file_func;
    op->list_func = list_func;
    op->user_data = user_data;
    if (!sbx_server_session_with_channel(session, on_channel, G_CALLBACK(on_abort), op, error)) {
        op_free(op);
        return FALSE;
    }
    return TRUE;
}

gboolean sbx_server_session_put_file(SbxServerSession *session, const char *path, GBytes *data,
                                     SbxSessionFileFunc func, gpointer user_data, GError **error)
{
    g_assert(path != NULL && data != NULL);
    return start(session, OP_PUT, path, data, func, NULL, user_data, error);
}

gboolean sbx_server_session_get_file(SbxServerSession *session, const char *path,
                                     SbxSessionFileFunc func, gpointer user_data, GError **error)
{
    g_assert(path != NULL);
    return start(session, OP_GET, path, NULL, func, NULL, user_data, error);
}

gboolean sbx_server_session_list_files(SbxServerSession *session, const char *path,
                                       SbxSessionListFunc func, gpointer user_data, GError **error)
{
    return start(session, OP_LIST, path, NULL, NULL, func, user_data, error);
}

gboolean sbx_server_session_delete_file(SbxServerSession *session, const char *path,
                                        SbxSessionFileFunc func, gpointer user_data, GError **error)
{
    g_assert(path != NULL);
    return start(session, OP_DELETE, path, NULL, func, NULL, user_data, error);
}

/* The name a client reads for SBX_SERVER_SESSION_ERROR's @code. */
static const char *code_name(int code)
{
    switch (code) {
    case SBX_SERVER_SESSION_ERROR_NOT_FOUND:
    case SBX_SERVER_SESSION_ERROR_FILE_NOT_FOUND:
        return "not_found";
    case SBX_SERVER_SESSION_ERROR_BUSY:
        return "busy";
    case SBX_SERVER_SESSION_ERROR_ENDED:
        return "ended";
    case SBX_SERVER_SESSION_ERROR_QUOTA:
        return "quota";
    case SBX_SERVER_SESSION_ERROR_FILE_REFUSED:
        return "bad_request";
    case SBX_SERVER_SESSION_ERROR_FILE_TOO_LARGE:
        return "too_large";
    case SBX_SERVER_SESSION_ERROR_WORKSPACE_FULL:
        return "workspace_full";
    case SBX_SERVER_SESSION_ERROR_FILE_FAILED:
        return "failed";
    default: /* FULL, START: the server's room or its VMs, not the request */
        return "unavailable";
    }
}

const char *sbx_server_session_error_code(const GError *error)
{
    return error->domain == SBX_SERVER_SESSION_ERROR ? code_name(error->code) : "unavailable";
}

const char *sbx_server_session_file_error_code(const GError *error)
{
    return code_name(error_code(error));
}
