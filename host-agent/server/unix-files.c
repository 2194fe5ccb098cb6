/*
 * The file requests of `sandbox serve`'s Unix socket (docs/pool.md, "Sessions over the
 * socket"): a session's workspace files put, got, listed and deleted through session-files.h.
 * A file crosses the socket in pieces of at most 1 MiB, one request and one answer each: a
 * put's pieces are gathered on the connection until its last goes to the guest whole; a get
 * fetches the file whole and answers its pieces as the client asks for them. What a connection
 * holds meanwhile is its transfer, bounded with the others' (SBX_UNIX_TRANSFERS_HELD_MAX).
 */
#include <string.h>

#include "server/session-files.h"
#include "server/unix-private.h"

/* proto.c checks the requests against its own copy of the bound (it stays pure). */
G_STATIC_ASSERT(SBX_SERVE_FILE_MAX == SBX_SESSION_FILE_MAX);

/* A connection's file in transit. */
struct UnixTransfer {
    gboolean put;     /* a put's pieces so far; else a got file */
    char *session;    /* the session's id */
    char *path;       /* the workspace path */
    GByteArray *data; /* put: the bytes so far */
    GBytes *got;      /* get: the file */
    char sha256[65];  /* get: of the file */
    guint64 held;     /* bytes counted in *all */
    guint64 *all;     /* the front's count of bytes held by transfers */
};

void sbx_unix_transfer_free(UnixTransfer *t)
{
    if (t == NULL) {
        return;
    }
    *t->all -= t->held;
    g_free(t->session);
    g_free(t->path);
    if (t->data != NULL) {
        g_byte_array_unref(t->data);
    }
    if (t->got != NULL) {
        g_bytes_unref(t->got);
    }
    g_free(t);
}

static UnixTransfer *transfer_new(UnixConn *conn, gboolean put, const SbxServeFileReq *f)
{
    UnixTransfer *t = g_new0(UnixTransfer, 1);

    t->put = put;
    t->session = g_strdup(f->session);
    t->path = g_strdup(f->path);
    t->all = sbx_unix_conn_transfers_held(conn);
    return t;
}

/* Count @n more bytes held by @t; FALSE (and answered `unavailable`) when past the bound. */
static gboolean hold(UnixConn *conn, UnixTransfer *t, guint64 n)
{
    if (*t->all + n > SBX_UNIX_TRANSFERS_HELD_MAX) {
        g_autofree char *why = g_strdup_printf("the server holds %" G_GUINT64_FORMAT
                                               " MiB of files in transit for its clients, as "
                                               "much as it may: try again later",
                                               *t->all / (1024 * 1024));
        sbx_unix_conn_send_error(conn, "unavailable", why);
        return FALSE;
    }
    *t->all += n;
    t->held += n;
    return TRUE;
}

/* Drop @conn's transfer, if any. */
static void drop(UnixConn *conn)
{
    sbx_unix_transfer_free(g_steal_pointer(sbx_unix_conn_transfer(conn)));
}

/* @f continues @conn's transfer of its kind (same session, same path); else NULL. */
static UnixTransfer *continued(UnixConn *conn, gboolean put, const SbxServeFileReq *f)
{
    UnixTransfer *t = *sbx_unix_conn_transfer(conn);

    return t != NULL && t->put == put && strcmp(t->session, f->session) == 0 &&
                   strcmp(t->path, f->path) == 0
               ? t
               : NULL;
}

/* The session @id of a new file operation: there and idle; else NULL, answered. */
static SbxServerSession *idle_session(UnixConn *conn, const char *id)
{
    SbxServerSession *s = sbx_unix_session_find(conn, id);
    g_autoptr(GError) error = NULL;

    if (s != NULL && !sbx_server_session_can_run(s, &error)) {
        sbx_unix_conn_send_session_error(conn, error);
        return NULL;
    }
    return s;
}

/* A file operation on its way in the session: the connection's request in flight. */
typedef struct {
    UnixOp op;
    char *session; /* its id */
    char *path;    /* as the client named it (NULL: the workspace, for a list) */
} FileOp;

static FileOp *file_op_new(const SbxServeFileReq *f)
{
    FileOp *o = g_new0(FileOp, 1);

    o->session = g_strdup(f->session);
    o->path = g_strdup(f->path);
    return o;
}

/* Its answer is queued (or its client gone): the connection takes the next request. */
static void file_op_free(FileOp *o)
{
    sbx_unix_conn_op_end(&o->op);
    g_free(o->session);
    g_free(o->path);
    g_free(o);
}

/* @o is the connection's request in flight if it @started (the session module's answer to its
 * start), else it is answered why not and freed. */
static void file_op_start(UnixConn *conn, FileOp *o, gboolean started, const GError *error)
{
    if (!started) {
        sbx_unix_conn_send_session_error(conn, error);
        file_op_free(o);
        return;
    }
    sbx_unix_conn_op_begin(conn, &o->op);
}

/* ---- put ------------------------------------------------------------------------------------- */

static void on_put(SbxServerSession *s, const SbxSessionFileResult *r, const GError *error,
                   gpointer data)
{
    FileOp *o = data;
    (void)s;

    if (o->op.conn != NULL && error != NULL) {
        sbx_unix_conn_send_session_error(o->op.conn, error);
    } else if (o->op.conn != NULL) {
        SbxServeMsg m = {
            .type = SBX_SERVE_MSG_FILE,
            .path = o->path,
            .size = r->size,
            .sha256 = (char *)r->sha256,
        };
        sbx_unix_conn_send_msg(o->op.conn, &m);
    }
    file_op_free(o);
}

/* The put's last piece is in: the file goes to the guest whole. */
static void put_whole(UnixConn *conn, const SbxServeFileReq *f)
{
    UnixTransfer *t = g_steal_pointer(sbx_unix_conn_transfer(conn));
    g_autoptr(GBytes) bytes = g_byte_array_free_to_bytes(g_steal_pointer(&t->data));
    SbxServerSession *s = idle_session(conn, f->session); /* it may have ended meanwhile */
    g_autoptr(GError) error = NULL;

    sbx_unix_transfer_free(t); /* the session module holds the bytes now */
    if (s == NULL) {
        return;
    }
    FileOp *o = file_op_new(f);
    gboolean ok = sbx_server_session_put_file(s, f->path, bytes, on_put, o, &error);
    file_op_start(conn, o, ok, error);
}

static void put(UnixConn *conn, const SbxServeFileReq *f)
{
    UnixTransfer *t;

    if (f->offset == 0) {
        drop(conn); /* a new put replaces what the connection held */
        if (idle_session(conn, f->session) == NULL) {
            return; /* refused before its bytes cross */
        }
        t = *sbx_unix_conn_transfer(conn) = transfer_new(conn, TRUE, f);
        t->data = g_byte_array_new();
    } else if ((t = continued(conn, TRUE, f)) == NULL || t->data->len != f->offset) {
        g_autofree char *why = g_strdup_printf(
            "file_put: offset %" G_GUINT64_FORMAT " continues no put of `%s` on this connection "
            "(a put starts at offset 0, each next piece at the bytes sent so far)",
            f->offset, f->path);
        drop(conn);
        sbx_unix_conn_send_error(conn, "bad_request", why);
        return;
    }
    if (!hold(conn, t, f->len)) {
        drop(conn);
        return;
    }
    g_byte_array_append(t->data, f->data, f->len);
    if (f->last) {
        put_whole(conn, f);
        return;
    }
    SbxServeMsg m = {.type = SBX_SERVE_MSG_FILE_PART, .path = f->path, .size = t->data->len};
    sbx_unix_conn_send_msg(conn, &m);
}

/* ---- get ------------------------------------------------------------------------------------- */

/* Answer the piece of @t's file at @offset; the transfer goes with its last piece. */
static void send_piece(UnixConn *conn, UnixTransfer *t, guint64 offset)
{
    gsize size = g_bytes_get_size(t->got);
    const guint8 *bytes = g_bytes_get_data(t->got, NULL);
    gsize n = MIN(size - offset, SBX_SERVE_FILE_CHUNK_MAX);
    SbxServeMsg m = {
        .type = SBX_SERVE_MSG_FILE,
        .path = t->path,
        .size = size,
        .sha256 = t->sha256,
        .offset = offset,
        .data = (guint8 *)(n > 0 ? bytes + offset : (const guint8 *)""),
        .data_len = n,
    };

    sbx_unix_conn_send_msg(conn, &m);
    if (offset + n == size) {
        drop(conn);
    }
}

static void on_got(SbxServerSession *s, const SbxSessionFileResult *r, const GError *error,
                   gpointer data)
{
    FileOp *o = data;
    UnixConn *conn = o->op.conn;
    (void)s;

    if (conn != NULL && error != NULL) {
        sbx_unix_conn_send_session_error(conn, error);
    } else if (conn != NULL) {
        SbxServeFileReq f = {.session = o->session, .path = o->path};
        UnixTransfer *t = transfer_new(conn, FALSE, &f);
        t->got = g_bytes_ref(r->data);
        g_strlcpy(t->sha256, r->sha256, sizeof(t->sha256));
        *sbx_unix_conn_transfer(conn) = t;
        /* held until its last piece is asked for; one piece only needs no holding */
        if (g_bytes_get_size(t->got) <= SBX_SERVE_FILE_CHUNK_MAX ||
            hold(conn, t, g_bytes_get_size(t->got))) {
            send_piece(conn, t, 0);
        } else {
            drop(conn);
        }
    }
    file_op_free(o);
}

static void get(UnixConn *conn, const SbxServeFileReq *f)
{
    UnixTransfer *t;
    g_autoptr(GError) error = NULL;

    if (f->offset > 0) {
        if ((t = continued(conn, FALSE, f)) == NULL || f->offset >= g_bytes_get_size(t->got)) {
            g_autofree char *why = g_strdup_printf(
                "file_get: offset %" G_GUINT64_FORMAT " continues no get of `%s` on this "
                "connection (a get starts at offset 0, the file's pieces follow up to its size)",
                f->offset, f->path);
            sbx_unix_conn_send_error(conn, "bad_request", why);
            return;
        }
        send_piece(conn, t, f->offset);
        return;
    }
    drop(conn); /* a new get replaces what the connection held */
    SbxServerSession *s = idle_session(conn, f->session);
    if (s == NULL) {
        return;
    }
    FileOp *o = file_op_new(f);
    gboolean ok = sbx_server_session_get_file(s, f->path, on_got, o, &error);
    file_op_start(conn, o, ok, error);
}

/* ---- list, delete ---------------------------------------------------------------------------- */

static void on_list(SbxServerSession *s, const SbxFileEntry *entries, gsize n_entries,
                    gboolean truncated, const GError *error, gpointer data)
{
    FileOp *o = data;
    (void)s;

    if (o->op.conn != NULL && error != NULL) {
        sbx_unix_conn_send_session_error(o->op.conn, error);
    } else if (o->op.conn != NULL) {
        gsize n = MIN(n_entries, SBX_FILE_LIST_MAX); /* the module's bound: the frame's */
        g_autofree SbxServeFileEntry *view = g_new0(SbxServeFileEntry, n + 1);
        for (gsize i = 0; i < n; i++) {
            view[i] = (SbxServeFileEntry){
                .path = entries[i].path,
                .type = entries[i].type,
                .size = entries[i].size,
                .mtime_us = entries[i].mtime_us,
            };
        }
        SbxServeMsg m = {
            .type = SBX_SERVE_MSG_FILES,
            .path = o->path,
            .entries = view,
            .n_entries = n,
            .truncated = truncated || n < n_entries,
        };
        sbx_unix_conn_send_msg(o->op.conn, &m);
    }
    file_op_free(o);
}

static void on_deleted(SbxServerSession *s, const SbxSessionFileResult *r, const GError *error,
                       gpointer data)
{
    FileOp *o = data;
    (void)s;
    (void)r;

    if (o->op.conn != NULL && error != NULL) {
        sbx_unix_conn_send_session_error(o->op.conn, error);
    } else if (o->op.conn != NULL) {
        SbxServeMsg m = {.type = SBX_SERVE_MSG_FILE_DELETED, .path = o->path};
        sbx_unix_conn_send_msg(o->op.conn, &m);
    }
    file_op_free(o);
}

/* A list or a delete: one operation, one answer. */
static void list_or_delete(UnixConn *conn, SbxServeRequestType type, const SbxServeFileReq *f)
{
    SbxServerSession *s = idle_session(conn, f->session);
    g_autoptr(GError) error = NULL;
    gboolean ok;

    if (s == NULL) {
        return;
    }
    FileOp *o = file_op_new(f);
    if (type == SBX_SERVE_REQ_FILE_LIST) {
        ok = sbx_server_session_list_files(s, f->path, on_list, o, &error);
    } else {
        ok = sbx_server_session_delete_file(s, f->path, on_deleted, o, &error);
    }
    file_op_start(conn, o, ok, error);
}

gboolean sbx_unix_file_message(UnixConn *conn, const SbxServeRequest *req)
{
    /* checked by unix.c: good fields, none in flight, the server not stopping */
    switch (req->type) {
    case SBX_SERVE_REQ_FILE_PUT:
        put(conn, &req->file);
        return TRUE;
    case SBX_SERVE_REQ_FILE_GET:
        get(conn, &req->file);
        return TRUE;
    case SBX_SERVE_REQ_FILE_LIST:
    case SBX_SERVE_REQ_FILE_DELETE:
        list_or_delete(conn, req->type, &req->file);
        return TRUE;
    default:
        return FALSE;
    }
}
